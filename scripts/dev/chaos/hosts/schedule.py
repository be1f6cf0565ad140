"""The rehearsal's fault schedule: seeded, in time order, pure."""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass

from scripts.dev.chaos.soak.schedule import settle_s

KINDS = ("partition", "host_death", "learner_link", "broadcast_block", "learner_kill")
ACTOR_HOSTS = ("actors-1",)  # the rehearsal's, as docs/DEPLOY.md lays them out (layout.py)


@dataclass(frozen=True, order=True)
class Fault:
    at_s: float  # seconds from the rehearsal's start
    kind: str  # one of KINDS
    length_s: float  # how long it lasts: link down, port blocked, host dead before its replacement
    host: str  # the host it strikes: an actor host, or "learner"


def fault_schedule(
    duration_s: float,
    seed: int,
    *,
    partition_s: float = 30.0,
    learner_link_s: float = 20.0,
    block_s: float = 30.0,
    death_s: float = 30.0,
    gap_s: float = 45.0,
    settle_s: float = 30.0,
    actor_hosts: tuple[str, ...] | list[str] = ACTOR_HOSTS,
) -> list[Fault]:
    """Rounds of every kind of fault, each round in a seeded order but a host's death last (its
    replacement builds its envs before the next round), one after another with `gap_s` of calm
    between them, the last one over `settle_s` before the end. The actor host struck by a
    partition or a death is drawn."""
    rng = random.Random(seed)
    lengths = {"partition": partition_s, "host_death": death_s, "learner_link": learner_link_s,
               "broadcast_block": block_s, "learner_kill": 0.0}  # fmt: skip
    faults: list[Fault] = []
    t = gap_s
    while True:
        order = [k for k in KINDS if k != "host_death"]
        rng.shuffle(order)
        order.append("host_death")
        for kind in order:
            host = rng.choice(actor_hosts) if kind in ("partition", "host_death") else "learner"
            if t + lengths[kind] > duration_s - settle_s:
                return faults
            faults.append(Fault(round(t, 2), kind, lengths[kind], host))
            t += lengths[kind] + gap_s


def death_s(args: argparse.Namespace) -> float:
    """A dead host's time before its replacement: --death-s, or the actor timeout + 15 s."""
    return args.death_s or args.actor_timeout_s + 15.0


def planned(
    args: argparse.Namespace, duration_s: float, actor_hosts: Sequence[str] = ACTOR_HOSTS
) -> list[Fault]:
    """The schedule of a rehearsal of `duration_s` with the command's flags (hosts/__main__.py),
    its partitions and host deaths drawn among `actor_hosts`."""
    return fault_schedule(
        duration_s, args.seed, partition_s=args.partition_s, learner_link_s=args.learner_link_s,
        block_s=args.block_s, death_s=death_s(args), gap_s=args.gap_s,
        settle_s=settle_s(duration_s), actor_hosts=tuple(actor_hosts),
    )  # fmt: skip
