"""The soak's fault schedule: seeded, in time order, pure; and the shortest soak that holds every
kind of fault (`shortest_minutes`, which the make hosts rehearsal uses too)."""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

KINDS = ("actor", "learner", "learner_midwrite")
SETTLE_S = 30.0  # no fault in a run's last 30 s (a sixth of a shorter run)
MINUTES_STEP = 0.1  # the resolution of `shortest_minutes`
MINUTES_MAX = 24 * 60.0


def settle_s(duration_s: float) -> float:
    """The calm at the end of a run of `duration_s`, when no fault is fired."""
    return min(SETTLE_S, duration_s / 6)


def shortest_minutes(kinds_in: Callable[[float], Iterable[str]], kinds: Iterable[str]) -> float:
    """The shortest run, in steps of MINUTES_STEP minutes, whose schedule holds every one of
    `kinds`; `kinds_in(duration_s)` gives the kinds of that length's schedule. ValueError when
    no run up to a day holds them all."""
    wanted = set(kinds)
    for step in range(1, round(MINUTES_MAX / MINUTES_STEP) + 1):
        minutes = round(step * MINUTES_STEP, 1)
        if wanted <= set(kinds_in(minutes * 60)):
            return minutes
    raise ValueError(
        f"no run of up to {MINUTES_MAX:g} minutes holds every kind of {sorted(wanted)}"
    )


@dataclass(frozen=True, order=True)
class Fault:
    at_s: float  # seconds from the soak's start
    kind: str  # one of KINDS


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
    every duration/3 at most. Mid-write times are jittered (seeded) by up to a fifth of a period.
    Actor kills keep their period: a soak whose faults end before `actor_every_s` has none (its
    command refuses it, naming `shortest_minutes`)."""
    rng = random.Random(seed)
    end = duration_s - settle_s

    def every(period_s: float, kind: str, jitter: float = 0.0) -> list[Fault]:
        # one period past the end too: jittered, it may still fall before the end
        ks = range(1, int(end // period_s) + 2)
        return [Fault(max(1.0, (k + jitter * rng.uniform(-1, 1)) * period_s), kind) for k in ks]

    faults = every(min(midwrite_every_s, duration_s / 3), "learner_midwrite", jitter=0.2)
    faults += every(min(learner_every_s, duration_s / 2), "learner") + every(actor_every_s, "actor")
    return sorted(f for f in faults if f.at_s <= end)


def planned(args: argparse.Namespace, duration_s: float) -> list[Fault]:
    """The schedule of a soak of `duration_s` with the command's flags (soak/__main__.py)."""
    return fault_schedule(
        duration_s,
        args.seed,
        actor_every_s=args.actor_kill_every_s,
        learner_every_s=args.learner_kill_every_s,
        midwrite_every_s=args.midwrite_kill_every_s,
        settle_s=settle_s(duration_s),
    )
