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

    def every(period_s: float, kind: str, jitter: float = 0.0) -> list[Fault]:
        # one period past the end too: jittered, it may still fall before the end
        ks = range(1, int(end // period_s) + 2)
        return [Fault(max(1.0, (k + jitter * rng.uniform(-1, 1)) * period_s), kind) for k in ks]

    faults = every(min(midwrite_every_s, duration_s / 3), "learner_midwrite", jitter=0.2)
    faults += every(min(learner_every_s, duration_s / 2), "learner") + every(actor_every_s, "actor")
    return sorted(f for f in faults if f.at_s <= end)
