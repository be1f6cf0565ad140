"""What the learner trains on is what the actor's policy saw.

Real envs step in actor lanes; their chunks go through the wire format and the learner's host
conversion and batching; the stacks the learner rebuilds at every step must equal the stacks the
actor fed its policy, across episode ends (deaths, truncations) and chunk boundaries; so must the
previous actions the learner derives from the actions and `first` flags.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from actor.config import ActorConfig
from actor.main import to_wire_chunk
from actor.rollout import Lane
from common import wire
from common.env import FrameEnv
from common.env_spec import EnvSpec
from common.stacking import stack_frames
from learner.batching import collate
from learner.ingest import to_host
from learner.inputs import final_previous_actions, final_stacks, previous_actions


def run_lane(spec: EnvSpec, num_envs: int, T: int, chunks: int, seed: int):
    """Random play; returns the finished chunks and, per chunk, the stacks [T, K, 4, H, W] and
    previous actions [T, K] fed to the policy."""
    rng = np.random.default_rng(seed)
    envs = [FrameEnv(spec) for _ in range(num_envs)]
    lane = Lane(envs, T, envs[0].num_actions)
    seen, seen_last = [], []
    out = []
    for _ in range(chunks):
        fed, fed_last = [], []
        for _t in range(T):
            obs = lane.observe().clone()  # [K, 4, H, W]
            fed.append(obs)
            fed_last.append(lane.last_action().clone())  # [K]
            actions = rng.integers(0, lane.A, size=num_envs)
            lane.act(actions, np.zeros((num_envs, lane.A), np.float32), 0)
            lane.step()
        seen.append(torch.stack(fed))
        seen_last.append(torch.stack(fed_last))
        out += lane.take_finished()
    return out, seen, seen_last


def test_learner_stacks_equal_actor_stacks():
    cfg = ActorConfig()
    spec = EnvSpec(level="tests.fakes:Corridor-v0", frame_skip=1, no_progress_steps=9)
    finished, seen, seen_last = run_lane(spec, num_envs=3, T=7, chunks=12, seed=0)
    assert len(finished) == 12
    ended = sum(int(c.arrays["terminated"].sum() + c.arrays["truncated"].sum()) for c in finished)
    truncations = sum(int(c.arrays["truncated"].sum()) for c in finished)
    assert ended > 5 and truncations > 0, "the test must cross episode ends of both kinds"
    for i, done in enumerate(finished):
        chunk = wire.decode(wire.encode(to_wire_chunk(cfg, "inst", i, done)))
        batch = collate([to_host(chunk, 1, pin=False)], torch.device("cpu"))
        rebuilt = stack_frames(batch.frames, batch.first)  # [T+1, K, 4, H, W]
        torch.testing.assert_close(rebuilt[:7], seen[i], rtol=0, atol=0)
        last = previous_actions(batch, chunk.num_actions)  # [T+1, K]
        torch.testing.assert_close(last[:7], seen_last[i], rtol=0, atol=0)
        if i + 1 < len(seen):  # the bootstrap stack is the next chunk's first observation
            torch.testing.assert_close(rebuilt[7], seen[i + 1][0], rtol=0, atol=0)
            torch.testing.assert_close(last[7], seen_last[i + 1][0], rtol=0, atol=0)
    nones = sum(int((s == 7).sum()) for s in seen_last)
    assert 0 < nones < sum(s.numel() for s in seen_last)  # both kinds of input were checked


def test_final_stack_is_the_real_next_observation():
    """After a truncated step the learner's final stack is the last 3 frames + the final frame."""
    spec = EnvSpec(level="tests.fakes:Corridor-v0", frame_skip=1, no_progress_steps=5)
    envs = [FrameEnv(spec)]
    lane = Lane(envs, 8, envs[0].num_actions)
    for t in range(8):  # actions 2..4 stand still in the corridor: no progress
        lane.act(np.array([2 + t % 3]), np.zeros((1, 7), np.float32), 0)
        lane.step()
    (done,) = lane.take_finished()
    t, final, frames = (
        done.arrays["final_t"][0],
        done.arrays["final_frames"][0],
        done.arrays["frames"],
    )
    assert t == 4  # five steps without progress: cut after the fifth
    cfg = ActorConfig()
    chunk = wire.decode(wire.encode(to_wire_chunk(cfg, "inst", 0, done)))
    batch = collate([to_host(chunk, 1, pin=False)], torch.device("cpu"))
    got = final_stacks(batch)[0]  # [4, H, W]
    expected = np.stack([frames[3 + t - 2, 0], frames[3 + t - 1, 0], frames[3 + t, 0], final])
    np.testing.assert_array_equal(got.numpy(), expected)
    assert batch.final_t.tolist() == [4]
    assert final_previous_actions(batch).tolist() == [3]  # the action of the cut step, 2 + 4 % 3
    assert done.arrays["first"][3 + t + 1, 0]  # the slot after the cut: the next episode's


@pytest.mark.slow
def test_mario_stacks_across_deaths_and_chunks():
    cfg = ActorConfig()
    spec = EnvSpec(no_progress_steps=16)
    finished, seen, seen_last = run_lane(spec, num_envs=2, T=16, chunks=8, seed=1)
    assert sum(int(c.arrays["terminated"].sum() + c.arrays["truncated"].sum()) for c in finished)
    for i, done in enumerate(finished):
        chunk = wire.decode(wire.encode(to_wire_chunk(cfg, "inst", i, done)))
        batch = collate([to_host(chunk, 4, pin=False)], torch.device("cpu"))
        rebuilt = stack_frames(batch.frames, batch.first)
        torch.testing.assert_close(rebuilt[:16], seen[i], rtol=0, atol=0)
        last = previous_actions(batch, chunk.num_actions)[:16]
        torch.testing.assert_close(last, seen_last[i], rtol=0, atol=0)


def test_the_learner_knows_the_level_of_every_step_the_actor_played():
    """Real emulators of a set, levels drawn anew at every episode end (some inside a chunk):
    each step's level, as the learner's batch holds it, is the level the env played at that
    step, by its index in the run's set."""
    cfg = ActorConfig()
    spec = EnvSpec(level="1-1,1-2", no_progress_steps=3)  # NOOP never moves: a cut every 3 steps
    envs = [FrameEnv(spec, seed=(0, k)) for k in range(2)]
    T = 8
    lane = Lane(envs, T, envs[0].num_actions)
    learners = spec.levels
    played, switches = [], 0
    for i in range(3):
        truth = []
        for _t in range(T):
            truth.append([learners.index(env.level) for env in envs])  # before the step
            lane.act(np.zeros(2, np.int64), np.zeros((2, lane.A), np.float32), 0)
            lane.step()
        (done,) = lane.take_finished()
        chunk = wire.decode(wire.encode(to_wire_chunk(cfg, "inst", i, done, level=spec.level)))
        batch = collate([to_host(chunk, 4, pin=False)], torch.device("cpu"))
        assert batch.level.tolist() == truth  # [T, N]
        played += [lv for row in truth for lv in row]
        switches += sum(a[k] != b[k] for a, b in itertools.pairwise(truth) for k in range(2))
    assert set(played) == {0, 1}, "the test must see both levels"
    assert switches > 0, "a level must change inside a chunk"
