"""An actor that shares its envs out over its set's levels (`--spread-levels`): over real sockets,
with real emulators, every level of a set no larger than its envs is in its chunks at once, in
equal steps; without it (the default) each env draws on its own."""

from __future__ import annotations

import numpy as np
import pytest

from actor.config import ActorConfig
from actor.main import Actor
from tests import procs
from tests.actor.test_welcome import FakeLearner, playing


def chunk_levels(cfg: ActorConfig, port: int, count: int) -> list[np.ndarray]:
    """The `level` array [T, K] of the first `count` chunks the actor sends."""
    learner = FakeLearner(port)
    with playing(Actor(cfg), learner):
        learner.serve_until(lambda: len(learner.chunks) >= count)
    return [c.arrays["level"] for c in learner.chunks[:count]]


@pytest.mark.slow
def test_every_level_of_the_set_is_played_at_once_in_equal_steps():
    port = procs.free_port(2)
    cfg = ActorConfig(
        learner=f"127.0.0.1:{port}", level="world:1", num_envs=4, lanes=2, spread_levels=True
    )
    levels = chunk_levels(cfg, port, 12)
    for arr in levels:  # each env keeps its level: a chunk's columns never change level
        assert (arr == arr[:1]).all(), arr
    steps = np.bincount(np.concatenate([a.ravel() for a in levels]), minlength=4)
    assert steps.min() == steps.max(), steps  # 12 chunks of 2 envs: 3 chunks' worth each
    port = procs.free_port(2)  # a fresh one: the closed socket's port may not be free yet
    apart = ActorConfig(learner=f"127.0.0.1:{port}", level="world:1", num_envs=4, lanes=1, seed=2)
    assert not apart.spread_levels  # the default
    (first,) = chunk_levels(apart, port, 1)
    assert len(set(first[0].tolist())) < 4, first  # this seed's first draws share a level
