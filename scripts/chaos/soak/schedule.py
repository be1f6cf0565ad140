"""The soak's fault schedule: seeded, in time order, pure."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Fault:
    at_s: float  # seconds from the soak's start
    kind: str  # "actor" | "learner" | "learner_midwrite"


def fault_schedule(
    duration_s: float,
    seed: int,
    *,
    actor_every_s: float = 30.0,
    learner_every_s: float = 300.0,
    midwrite_every_s: float = 75.0,
    settle_s: float = 30.0,
) -> list[Fault]:
    """Faults in time order, none in the last `settle_s`. A soak too short for the full periods
    gets each learner fault at least once: learner kills every duration/2 at most, mid-write kills
    every duration/3 at most. Mid-write times are jittered (seeded) by up to a fifth of a period."""
    rng = random.Random(seed)
    end = duration_s - settle_s
    learner_every_s = min(learner_every_s, duration_s / 2)
    midwrite_every_s = min(midwrite_every_s, duration_s / 3)
    faults = [Fault(k * actor_every_s, "actor") for k in range(1, int(end // actor_every_s) + 1)]
    faults += [
        Fault(k * learner_every_s, "learner") for k in range(1, int(end // learner_every_s) + 1)
    ]
    k = 1
    while (t := k * midwrite_every_s + rng.uniform(-0.2, 0.2) * midwrite_every_s) <= end:
        faults.append(Fault(max(t, 1.0), "learner_midwrite"))
        k += 1
    return sorted(f for f in faults if f.at_s <= end)
