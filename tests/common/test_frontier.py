"""The frontier archive: fake snapshots (trails, failures kept, bounds, picks), then a real env."""

from __future__ import annotations

import numpy as np

from common.env import EnvSpec, EpisodeSummary, FrameEnv, signed_x
from common.frontier import TRAIL_EVERY, TRAIL_LEN, Archive

CORRIDOR = "tests.fakes:Corridor-v0"


def test_a_failure_keeps_one_snapshot_of_its_trail_and_a_level_keeps_its_recent_failures():
    archive, rng = Archive(cells_per_level=3, trail_len=4), np.random.default_rng(0)
    dumps = []

    def walk(step, x):
        archive.walk(step, x, lambda: dumps.append(x) or f"state at {x}")

    walk(0, 40)
    walk(TRAIL_EVERY - 1, 50)  # too soon after the last: not dumped
    assert dumps == [40]
    for step in range(TRAIL_EVERY, 10 * TRAIL_EVERY, TRAIL_EVERY):
        walk(step, 40 + step)
    assert [c.x for c in archive.trail] == [40 + s * TRAIL_EVERY for s in range(6, 10)]
    assert len(archive) == 4  # the trail counts: its snapshots are held
    kept = archive.end("1-1", failed=True, rng=rng)
    assert kept in archive.levels["1-1"] and kept.snapshot == f"state at {kept.x}"
    assert kept.x >= 40 + 6 * TRAIL_EVERY and not archive.trail and len(archive) == 1
    walk(0, 100)
    assert archive.end("1-1", failed=False, rng=rng) is None  # a flag or a time-out: nothing kept
    assert not archive.trail and len(archive) == 1
    assert archive.end("1-1", failed=True, rng=rng) is None  # a failure with no trail: nothing
    for x in (200, 300, 400, 500):  # one snapshot each, failed: the oldest failures go
        walk(0, x)
        archive.end("1-1", failed=True, rng=rng)
    assert [c.x for c in archive.levels["1-1"]] == [300, 400, 500]
    walk(0, 600)
    archive.end("1-2", failed=True, rng=rng)
    assert len(archive) == 4 and [c.x for c in archive.levels["1-2"]] == [600]


def test_a_failure_keeps_each_snapshot_of_its_trail_alike_and_picks_are_uniform():
    rng = np.random.default_rng(1)
    kept = []
    for _ in range(600):
        archive = Archive(trail_len=TRAIL_LEN)
        for i in range(TRAIL_LEN + 2):
            archive.walk(i * TRAIL_EVERY, i, lambda: None)
        kept.append(archive.end("1-1", failed=True, rng=rng).x)
    counts = np.bincount(kept, minlength=TRAIL_LEN + 2)
    assert counts[:2].sum() == 0 and counts[2:].min() > 600 / TRAIL_LEN / 2  # the last TRAIL_LEN
    archive = Archive(cells_per_level=8)
    assert archive.pick("1-1", rng) is None  # nothing failed yet
    for x in range(8):
        archive.walk(0, x, lambda: None)
        archive.end("1-1", failed=True, rng=rng)
    picks = [archive.pick("1-1", rng).x for _ in range(400)]
    assert set(picks) == set(range(8)) and archive.pick("1-2", rng) is None


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


def test_a_real_env_starts_the_share_asked_from_snapshots_before_its_own_failures():
    env = FrameEnv(EnvSpec(frontier_starts=0.5, no_progress_steps=30), seed=3)
    env.reset()
    start_x = env._max_x  # the level's start: nothing archived yet
    failures = []
    while not env.archive.levels.get("1-1"):  # until an episode fails (nothing to start from)
        failures += [e.max_x for e in _play_right(env, 1) if e.outcome in ("death", "no_progress")]
    cells = list(env.archive.levels["1-1"])
    assert len(cells) == 1 and start_x <= cells[0].x <= max(failures)
    starts = []
    for _ in range(200):
        env.reset()
        x = signed_x(int(env._env._x_position))  # the emulator's own x now
        assert x == env._max_x == (env._cell.x if env._cell else start_x)
        assert env._cell is None or env._cell is cells[0]
        starts.append(env._cell is not None)
    assert 0.4 < np.mean(starts) < 0.6
    ends, end = [], env.archive.end  # what the env tells the archive at each episode's end
    env.archive.end = lambda level, failed, rng: ends.append(failed) or end(level, failed, rng)
    episodes = _play_right(env, 12)
    frontier = [e for e in episodes if e.start_x >= 0]
    assert frontier and len(frontier) < len(episodes)  # both kinds
    assert all(e.max_x >= e.start_x >= start_x for e in frontier)
    # only the failures of episodes from the level's start are kept
    assert ends == [e.start_x < 0 and e.outcome in ("death", "no_progress") for e in episodes]
    assert len(env.archive.levels["1-1"]) == 1 + sum(ends)
    env.close()
    assert env.archive is None  # the snapshots go with their emulators


def test_without_frontier_starts_every_episode_starts_at_the_level_start():
    env = FrameEnv(EnvSpec(no_progress_steps=30), seed=3)
    assert env.archive is None
    assert all(e.start_x == -1 for e in _play_right(env, 3))


def test_the_share_is_checked_and_a_gym_id_plays_from_its_start():
    assert EnvSpec(frontier_starts=0.5).problems() == []
    for share in (1.0, -0.1):
        (problem,) = EnvSpec(frontier_starts=share).problems()
        assert problem.startswith("frontier_starts must be in [0, 1) (0 = off)")
    gym = EnvSpec(level=CORRIDOR, frontier_starts=0.5)  # the learner's default on a Gym id
    assert gym.problems() == [] and FrameEnv(gym).archive is None  # no snapshots to start from
