"""The env factory against the raw nes-py env, plus the builder's retry and watchdog."""

from __future__ import annotations

import subprocess
import sys
import time

import cv2
import numpy as np
import pytest

from actor import eval_matrix as em
from actor.evaluation import play_policies
from common.env import (
    ACTION_SETS,
    WATCHDOG_EXIT_CODE,
    EnvBuildError,
    EnvSpec,
    FrameEnv,
    build_envs,
    signed_x,
)

CORRIDOR = "tests.fakes:Corridor-v0"


def test_mario_frame_is_84x84_uint8():
    env = FrameEnv(EnvSpec())
    frame = env.reset()
    assert frame.shape == (84, 84) and frame.dtype == np.uint8
    assert env.num_actions == len(ACTION_SETS["simple"])
    step = env.step(1)
    assert step.frame.shape == (84, 84) and step.frame.dtype == np.uint8
    assert 20 < step.frame.mean() < 235  # a real picture, not a blank buffer


@pytest.mark.parametrize("action_set,n", [("right_only", 5), ("simple", 7), ("complex", 12)])
def test_action_sets(action_set, n):
    assert FrameEnv(EnvSpec(action_set=action_set)).num_actions == n


def test_frame_skip_sums_rewards_and_maxes_last_two_frames():
    """Four raw frames with the same buttons give the factory's reward sum and max-pooled frame."""
    from gym_super_mario_bros import SuperMarioBrosEnv

    raw = SuperMarioBrosEnv(target=(1, 1))
    raw.reset()
    env = FrameEnv(EnvSpec(no_progress_steps=0))
    env.reset()
    right_a = 0b10000001  # SIMPLE_MOVEMENT action 2 = right + A
    total_nonzero = 0
    for _ in range(60):
        step = env.step(2)
        rewards, grays = [], []
        for _ in range(4):
            _, r, terminated, truncated, _ = raw.step(right_a)
            rewards.append(r)
            grays.append(raw.observation("grayscale").copy())
            if terminated or truncated:
                break
        pooled = np.maximum(grays[-2], grays[-1])  # [240, 256]
        half = cv2.resize(pooled, (128, 120), interpolation=cv2.INTER_AREA)
        expected = cv2.resize(half, (84, 84), interpolation=cv2.INTER_LINEAR)
        assert step.reward == pytest.approx(sum(rewards))
        np.testing.assert_array_equal(step.frame, expected)
        total_nonzero += sum(r != 0 for r in rewards)
        assert step.terminated == terminated
        if terminated:
            break
    assert total_nonzero > 10  # the agent moved, so the sums were not trivially zero


def test_no_progress_cutoff_truncates():
    env = FrameEnv(EnvSpec(no_progress_steps=10))
    env.reset()
    steps = [env.step(0) for _ in range(10)]  # NOOP: Mario stands still
    assert not any(s.truncated for s in steps[:-1])
    last = steps[-1]
    assert last.truncated and not last.terminated
    assert last.episode is not None and last.episode.outcome == "no_progress"
    assert last.episode.length == 10 and not last.episode.flag


def test_x_is_read_as_a_signed_16_bit_value():
    assert [signed_x(v) for v in (0, 40, 3161, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF)] == [
        0, 40, 3161, 0x7FFF, -0x8000, -2, -1
    ]  # fmt: skip


@pytest.mark.slow
def test_an_x_wrapped_below_zero_is_never_a_max_x():
    """In 4-4 the game takes its x page below zero (0xFF): read unsigned, x 65,534 became the
    max x of episode 16 of the random baseline there (seed 0), past any level's end. The same
    episodes again, with the raw x watched before every step: the wrap happens, and no
    episode's max x shows it."""
    level = "4-4"
    spec = EnvSpec(level=level)
    env = FrameEnv(spec, seed=(0, em.level_seed(level), 0))
    rng = np.random.default_rng([0, em.level_seed(level), 0])
    raw: list[int] = []

    def random_policy(_obs, _last) -> int:
        raw.append(int(env._env.unwrapped._x_position))
        return int(rng.integers(env.num_actions))

    played = play_policies(env, [("random", random_policy, 17)], record=False)
    env.close()
    assert max(raw) >= 0x8000  # the case is real
    assert all(e.max_x < 4000 for e in played.episodes["random"])


def test_a_death_costs_the_penalty_once_and_returns_stay_the_games():
    """The env adds the death penalty (and flag bonus) only; scaling is the learner's loss's."""
    plain, shaped = FrameEnv(EnvSpec()), FrameEnv(EnvSpec(death_penalty=5.0, flag_bonus=9.0))
    plain.reset(), shaped.reset()
    for _ in range(300):  # right into the first goomba
        a, b = plain.step(1), shaped.step(1)
        if a.terminated:
            break
        assert b.reward == a.reward
    assert a.episode.outcome == b.episode.outcome == "death"
    assert b.reward == a.reward - 5.0
    assert b.episode.episode_return == a.episode.episode_return  # the game's own


def test_episode_summary_on_gym_env():
    env = FrameEnv(EnvSpec(level=CORRIDOR, frame_skip=1))
    env.reset()
    for _ in range(env._env.unwrapped.half):
        step = env.step(1 if env._env.unwrapped.goal > 0 else 6)
    assert step.terminated and step.episode.outcome == "flag" and step.episode.flag
    assert step.episode.episode_return == pytest.approx(1.8)


def test_sticky_actions_repeat_the_last_buttons_with_their_probability():
    """Corridor, one frame per step: each step asks for the move opposite to the one the env last
    made, so a step that moves the same way (or not at all) is a repeat; about p of them are."""
    env = FrameEnv(EnvSpec(level=CORRIDOR, frame_skip=1, sticky_actions=0.25), seed=7)
    corridor = env._env.unwrapped
    env.reset()
    last_move, repeats, steps = 0, 0, 2000
    for _ in range(steps):
        ask = 6 if last_move > 0 else 1  # left after a move right, else right
        before = corridor.pos
        step = env.step(ask)
        moved = corridor.pos - before if step.episode is None else None
        if moved is not None:
            repeats += moved != (1 if ask == 1 else -1)
            last_move = moved
        else:  # the episode ended: a new one starts with no buttons held
            env.reset()
            last_move = 0
    assert 0.2 < repeats / steps < 0.3


def _x_trajectory(spec: EnvSpec, seed: int, steps: int = 120) -> list[int]:
    """Mario's max x after each step of a fixed button sequence (3 steps right, 3 standing)."""
    env = FrameEnv(spec, seed=seed)
    env.reset()
    xs = []
    for t in range(steps):
        step = env.step(1 if t % 6 < 3 else 0)
        xs.append(env._max_x)
        if step.episode is not None:
            break
    env.close()
    return xs


def test_sticky_actions_change_the_trajectory_and_repeat_with_the_seed():
    plain, sticky = EnvSpec(no_progress_steps=0), EnvSpec(no_progress_steps=0, sticky_actions=0.25)
    assert _x_trajectory(plain, 0) == _x_trajectory(plain, 1)  # NES Mario is deterministic
    assert _x_trajectory(sticky, 3) == _x_trajectory(sticky, 3)
    assert _x_trajectory(sticky, 3) != _x_trajectory(plain, 3)
    assert _x_trajectory(sticky, 3) != _x_trajectory(sticky, 4)


def test_noop_starts_vary_the_first_frame_and_repeat_with_the_seed():
    def first_frames(spec: EnvSpec, seed: int) -> list[bytes]:
        env = FrameEnv(spec, seed=seed)
        frames = [env.reset().tobytes() for _ in range(6)]
        env.close()
        return frames

    assert len(set(first_frames(EnvSpec(), 0))) == 1  # every episode starts alike
    noop = EnvSpec(noop_max=30)
    starts = first_frames(noop, 5)
    assert len(set(starts)) > 1  # the clock and the enemies moved on meanwhile
    assert starts == first_frames(noop, 5)
    assert starts != first_frames(noop, 6)


def test_bad_spec_lists_every_problem():
    with pytest.raises(ValueError) as err:
        FrameEnv(EnvSpec(action_set="all", frame_skip=0, noop_max=-1))
    msg = str(err.value)
    assert "action_set" in msg and "frame_skip" in msg and "noop_max" in msg


@pytest.mark.slow
def test_100_mario_envs_built_one_after_another():
    start = time.perf_counter()
    envs = build_envs(EnvSpec(), 100, timeout_s=60)
    assert len(envs) == 100
    for env in envs:
        frame = env.reset()
        assert frame.shape == (84, 84) and frame.dtype == np.uint8
        env.close()
    assert time.perf_counter() - start < 600


def test_build_retries_then_succeeds(monkeypatch):
    import tests.fakes as fakes

    monkeypatch.setenv("FLAKY_FAILURES", "2")
    monkeypatch.setattr(fakes.FlakyBuild, "built", 0)
    built, failed = [], []
    envs = build_envs(
        EnvSpec(level="tests.fakes:FlakyBuild-v0"), 1, retries=2, backoff_s=0.01,
        on_built=built.append, on_failed=lambda: failed.append(1),
    )  # fmt: skip
    assert len(envs) == 1 and fakes.FlakyBuild.built == 3
    assert len(failed) == 2 and len(built) == 1 and built[0] > 0  # each attempt reported


def test_build_gives_up_with_a_clear_error(monkeypatch):
    import tests.fakes as fakes

    monkeypatch.setenv("FLAKY_FAILURES", "5")
    monkeypatch.setattr(fakes.FlakyBuild, "built", 0)
    failed = []
    with pytest.raises(EnvBuildError, match=r"after 2 attempts: RuntimeError: flaky build #2"):
        build_envs(
            EnvSpec(level="tests.fakes:FlakyBuild-v0"), 1, retries=1, backoff_s=0.01,
            on_failed=lambda: failed.append(1),
        )  # fmt: skip
    assert len(failed) == 2  # the last attempt too


def test_watchdog_turns_a_hung_build_into_a_nonzero_exit():
    code = (
        "import logging; logging.basicConfig()\n"
        "from common.env import build_envs\nfrom common.env_spec import EnvSpec\n"
        "build_envs(EnvSpec(level='tests.fakes:HangingBuild-v0'), 1, timeout_s=2)\n"
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == WATCHDOG_EXIT_CODE
    assert time.perf_counter() - start < 30
    assert "building env 0 (tests.fakes:HangingBuild-v0) did not finish within" in proc.stderr
    assert "time.sleep" in proc.stderr or "fakes.py" in proc.stderr  # where it hung
