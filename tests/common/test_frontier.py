"""The frontier archive with fake snapshots: bounded, the furthest cells kept, picks among them."""

from __future__ import annotations

import numpy as np

from common.env import EnvSpec, EpisodeSummary, FrameEnv, signed_x
from common.frontier import X_CELL, Y_CELL, Archive

CORRIDOR = "tests.fakes:Corridor-v0"


def test_the_archive_keeps_at_most_its_cap_per_level_and_the_furthest_cells():
    archive = Archive(cells_per_level=4)
    for x in range(0, 40 * X_CELL, X_CELL):  # one new cell per x box, left to right
        archive.offer("1-1", x, 79, steps=x, dump=lambda x=x: f"state at {x}")
    archive.offer("1-2", 100, 79, steps=1, dump=lambda: "other level")
    cells = archive.levels["1-1"]
    assert len(cells) == 4 and len(archive) == 5
    assert sorted(c.x for c in cells.values()) == [x * X_CELL for x in range(36, 40)]
    assert all(c.snapshot == f"state at {c.x}" for c in cells.values())


def test_a_snapshot_is_dumped_only_when_kept():
    archive = Archive(cells_per_level=2)
    dumps = []

    def dump():
        dumps.append(1)
        return object()

    assert archive.offer("1-1", 500, 79, 50, dump) and archive.offer("1-1", 600, 79, 60, dump)
    assert not archive.offer("1-1", 100, 79, 10, dump)  # full, and behind every kept cell
    assert not archive.offer("1-1", 505, 79 + 1, 70, dump)  # the same cell, reached slower
    assert len(dumps) == 2
    assert archive.offer("1-1", 505, 79, 30, dump)  # the same cell, reached faster: replaced
    assert archive.levels["1-1"][(500 // X_CELL, 79 // Y_CELL)].steps == 30
    assert archive.offer("1-1", 510, 79 + Y_CELL, 80, dump)  # another height: another cell,
    assert sorted(c.x for c in archive.levels["1-1"].values()) == [510, 600]  # the nearest out
    assert len(dumps) == 4


def test_picks_are_drawn_among_the_kept_cells_near_the_frontier():
    archive = Archive(cells_per_level=8)
    rng = np.random.default_rng(0)
    assert archive.pick("1-1", rng) is None  # nothing reached yet
    for x in range(0, 3000, 10):
        archive.offer("1-1", x, 79, x, lambda: None)
    picks = [archive.pick("1-1", rng).x for _ in range(400)]
    assert min(picks) >= 3000 - 8 * X_CELL  # only the furthest 8 cells
    assert len(set(picks)) == 8  # and each of them
    assert archive.pick("1-2", rng) is None


def _play_right(env: FrameEnv, episodes: int) -> list[EpisodeSummary]:
    """Run right, jumping now and then, for `episodes` episodes."""
    out = []
    env.reset()
    while len(out) < episodes:
        step = env.step(2 if env._length % 8 < 3 else 1)  # right + A, else right
        if step.episode is not None:
            out.append(step.episode)
            env.reset()
    return out


def test_a_real_env_starts_the_share_asked_from_snapshots_of_its_own_emulator():
    env = FrameEnv(EnvSpec(frontier_starts=0.5, no_progress_steps=30), seed=3)
    env.reset()
    start_x = env._max_x  # the level's start: nothing archived yet
    _play_right(env, 2)
    cells = env.archive.levels["1-1"].values()
    assert cells and all(c.x > start_x for c in cells)
    starts = []
    for _ in range(200):
        env.reset()
        x = signed_x(int(env._env._x_position))  # the emulator's own x now
        assert x == env._max_x and (env._cell is None) == (x == start_x)
        if env._cell is not None:
            assert x == env._cell.x and any(c is env._cell for c in cells)
        starts.append(env._cell is not None)
    assert 0.4 < np.mean(starts) < 0.6
    episodes = _play_right(env, 12)
    frontier = [e for e in episodes if e.start_x >= 0]
    assert frontier and len(frontier) < len(episodes)  # both kinds
    assert all(e.max_x >= e.start_x > start_x for e in frontier)
    env.close()
    assert env.archive is None  # the snapshots go with their emulators


def test_without_frontier_starts_every_episode_starts_at_the_level_start():
    env = FrameEnv(EnvSpec(no_progress_steps=30), seed=3)
    assert env.archive is None
    assert all(e.start_x == -1 for e in _play_right(env, 3))


def test_the_share_is_checked_and_needs_mario_levels():
    assert EnvSpec(frontier_starts=0.5).problems() == []
    for spec in (EnvSpec(frontier_starts=1.0), EnvSpec(level=CORRIDOR, frontier_starts=0.5)):
        (problem,) = spec.problems()
        assert problem.startswith("frontier_starts must be in [0, 1) (0 = off; Mario levels only)")
    assert FrameEnv(EnvSpec(level=CORRIDOR)).archive is None
