"""The soak's fault schedule: seeded, in time order, pure; and the shortest soak that holds every
kind of fault (`shortest_minutes`, which the make hosts rehearsal uses too).

The learner is killed only in the soak's first two thirds (`learner_faults_end_s`; another share
with --learner-faults-share). In the rest one learner life runs on while actors are killed and rogue peers connect, so its memory can
be judged over minutes (`memory_from_s`): a learner killed every minute is always young, and the
climb of each start (imports, the first batches' buffers) hides any slope."""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

KINDS = ("actor", "learner", "learner_midwrite")
SETTLE_S = 30.0  # no fault in a run's last 30 s (a sixth of a shorter run)
MINUTES_STEP = 0.1  # the resolution of `shortest_minutes`
MINUTES_MAX = 24 * 60.0
LEARNER_SHARE = 2 / 3  # of the soak, from its start, in which the learner is killed
LEARNER_WARMUP_S = 120.0  # after the last learner fault: its restart (~30 s) and climb (~60 s)


def learner_faults_end_s(duration_s: float, share: float = LEARNER_SHARE) -> float:
    """The end of the part of a soak of `duration_s` in which learner faults fall: its first
    `share`."""
    return duration_s * share


def memory_from_s(duration_s: float, share: float = LEARNER_SHARE) -> float:
    """From when the soak's memory samples are judged: the last learner life, warmed up."""
    return learner_faults_end_s(duration_s, share) + LEARNER_WARMUP_S


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
    learner_share: float = LEARNER_SHARE,
) -> list[Fault]:
    """Faults in time order, none in the last `settle_s`, the learner's none after
    `learner_faults_end_s`. A soak too short for the full periods gets each learner fault at
    least once: learner kills every half of that span at most, mid-write kills every third at
    most. Mid-write times are jittered (seeded) by up to a fifth of a period. Actor kills keep
    their period: a soak whose faults end before `actor_every_s` has none (its command refuses
    it, naming `shortest_minutes`)."""
    rng = random.Random(seed)
    end = duration_s - settle_s
    learner_end = min(end, learner_faults_end_s(duration_s, learner_share))

    def every(period_s: float, kind: str, until_s: float, jitter: float = 0.0) -> list[Fault]:
        # one period past the end too: jittered, it may still fall before the end
        ks = range(1, int(until_s // period_s) + 2)
        times = [max(1.0, (k + jitter * rng.uniform(-1, 1)) * period_s) for k in ks]
        return [Fault(t, kind) for t in times if t <= until_s]

    faults = every(min(midwrite_every_s, learner_end / 3), "learner_midwrite", learner_end, 0.2)
    faults += every(min(learner_every_s, learner_end / 2), "learner", learner_end)
    return sorted(faults + every(actor_every_s, "actor", end))


def planned(args: argparse.Namespace, duration_s: float) -> list[Fault]:
    """The schedule of a soak of `duration_s` with the command's flags (soak/__main__.py)."""
    return fault_schedule(
        duration_s,
        args.seed,
        actor_every_s=args.actor_kill_every_s,
        learner_every_s=args.learner_kill_every_s,
        midwrite_every_s=args.midwrite_kill_every_s,
        settle_s=settle_s(duration_s),
        learner_share=args.learner_faults_share,
    )
