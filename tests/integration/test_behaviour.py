"""What the learner trains on is what the actor did, checked on real Mario emulators.

Each test here guards one way a trainer can run without error and still learn little: actions
recorded with logits other than those that chose them, a value for a stack the actor never saw,
a death that is not a negative, terminal step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actor.config import ActorConfig
from actor.main import to_wire_chunk
from actor.rollout import Lane, infer_and_act
from common import wire
from common.env import FrameEnv
from common.env_spec import EnvSpec
from common.model import ActorCritic, ModelSpec
from common.stacking import stack_frames
from learner.batching import collate
from learner.config import LearnerConfig
from learner.ingest import to_host
from learner.update import Hyper, forward_and_targets, previous_actions

pytestmark = pytest.mark.slow

T = 16


@pytest.fixture(scope="module")
def played():
    """Two Mario envs played by a random-weight policy through the actor's own inference path,
    for three chunks; returns the model, the chunks and, per step, what the policy was fed."""
    torch.manual_seed(0)
    model = ActorCritic(ModelSpec(num_actions=7)).eval()
    torch.nn.init.normal_(model.last_action.weight)  # the previous action matters, as trained
    with torch.no_grad():
        model.policy.weight.mul_(20)  # a peaked policy: a wrong logit would show in the ratios
    spec = EnvSpec(no_progress_steps=T)
    envs = [FrameEnv(spec) for _ in range(2)]
    lane = Lane(envs, T, 7)
    rng = np.random.default_rng(0)
    fed_stacks, fed_last = [], []
    for _ in range(3 * T):
        fed_stacks.append(lane.observe().clone())  # [K, 4, H, W]
        fed_last.append(lane.last_action().clone())  # [K]
        infer_and_act(model, lane, rng, policy_version=7)
        lane.step()
    chunks = lane.take_finished()
    assert len(chunks) == 3
    return model, chunks, torch.stack(fed_stacks), torch.stack(fed_last)


def learner_batch(chunks, i: int):
    cfg = ActorConfig()
    msg = wire.decode(wire.encode(to_wire_chunk(cfg, "inst", i, chunks[i])))
    return collate([to_host(msg, 4, pin=False)], torch.device("cpu"))


def test_at_policy_lag_zero_every_importance_ratio_is_one(played):
    model, chunks, _, _ = played
    for i in range(len(chunks)):
        batch = learner_batch(chunks, i)
        with torch.no_grad():
            fwd = forward_and_targets(model, batch, Hyper.from_config(LearnerConfig()))
        log_rhos = fwd.vtrace.log_rhos  # [T, K]
        assert log_rhos.abs().max() < 1e-4, log_rhos
        # and the recorded actions are ones the policy could have drawn from those logits
        probs = torch.softmax(batch.behaviour_logits, -1).gather(-1, batch.actions[..., None])
        assert (probs > 0).all()


def test_each_step_records_the_logits_of_the_stack_it_saw(played):
    """The logits stored for step t are the policy's output on step t's stack and previous
    action (not a neighbour's), and with this peaked policy the actions are nearly all their
    argmax (the sampler's distribution itself: tests/actor/test_rollout.py)."""
    model, chunks, fed_stacks, fed_last = played
    logits = torch.from_numpy(
        np.concatenate([c.arrays["behaviour_logits"] for c in chunks])
    )  # [3T, K, A]
    with torch.no_grad():
        want = model(fed_stacks.flatten(0, 1), fed_last.flatten()).logits.view(logits.shape)
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)
    actions = torch.from_numpy(
        np.concatenate([c.arrays["actions"] for c in chunks]).astype(np.int64)
    )
    assert (actions == logits.argmax(-1)).float().mean() > 0.8


def test_values_trained_on_are_those_of_the_stacks_the_actor_saw(played):
    model, chunks, fed_stacks, fed_last = played
    for i in range(len(chunks)):
        batch = learner_batch(chunks, i)
        stacks = stack_frames(batch.frames, batch.first)[:T]  # [T, K, 4, H, W]
        seen = fed_stacks[i * T : (i + 1) * T]
        torch.testing.assert_close(stacks, seen, rtol=0, atol=0)
        torch.testing.assert_close(
            previous_actions(batch, 7)[:T], fed_last[i * T : (i + 1) * T], rtol=0, atol=0
        )
        with torch.no_grad():
            fwd = forward_and_targets(model, batch, Hyper.from_config(LearnerConfig()))
            want = model(seen.flatten(0, 1), fed_last[i * T : (i + 1) * T].flatten()).value
        torch.testing.assert_close(fwd.values[:T].flatten(), want, rtol=1e-4, atol=1e-4)


def test_a_death_is_a_negative_terminal_step():
    """Walking right into 1-1's first Goomba kills Mario: that step ends the episode as a
    termination (no bootstrap) with a negative reward, and the summary says death."""
    env = FrameEnv(EnvSpec(no_progress_steps=0))
    env.reset()
    for _ in range(400):
        step = env.step(1)  # right
        if step.episode is not None:
            break
    assert step.terminated and not step.truncated
    assert step.episode.outcome == "death" and not step.episode.flag
    assert step.reward < 0, step.reward


def test_progress_is_rewarded_and_standing_still_is_not():
    env = FrameEnv(EnvSpec(no_progress_steps=0))
    env.reset()
    moving = [env.step(3) for _ in range(12)]  # right + B: run (short of the first Goomba)
    still = [env.step(0) for _ in range(20)]  # NOOP: Mario slows down and stands
    assert all(s.episode is None for s in moving + still)
    assert sum(s.reward for s in moving) > 20
    assert sum(s.reward for s in still[10:]) <= 0  # only the clock: no progress, no reward
