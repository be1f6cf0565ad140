"""What the learner trains on is what the actor did, checked on real Mario emulators.

Each test here guards one way a trainer can run without error and still learn little: actions
recorded with logits other than those that chose them, a value for a stack the actor never saw,
a death that is not a negative, terminal step. The data-path tests run with each network kind:
feed-forward, and with an LSTM core whose state the actor carries from step to step and chunk to
chunk, resets at each episode's start, and sends with each chunk for the learner to unroll from.
"""

from __future__ import annotations

from typing import NamedTuple

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
from learner.batching import Batch, collate
from learner.config import LearnerConfig
from learner.ingest import to_host
from learner.inputs import previous_actions
from learner.popart import PopArt
from learner.update import Hyper, forward_and_targets

pytestmark = pytest.mark.slow

T = 16
HYPER = Hyper.from_config(LearnerConfig())


class Played(NamedTuple):
    model: ActorCritic
    chunks: list  # the lane's finished chunks
    fed_stacks: torch.Tensor  # [3T, K, 4, H, W] what the policy was fed at each step
    fed_last: torch.Tensor  # [3T, K] previous actions
    fed_states: torch.Tensor  # [3T, K, C] core states (C = 0 without a core)


@pytest.fixture(scope="module", params=["none", "lstm"])
def played(request) -> Played:
    """Two Mario envs played by a random-weight policy through the actor's own inference path,
    for three chunks, with each core kind; what the policy was fed at each step."""
    torch.manual_seed({"none": 0, "lstm": 5}[request.param])  # episodes end inside chunks
    model = ActorCritic(ModelSpec(num_actions=7, core=request.param)).eval()
    torch.nn.init.normal_(model.last_action.weight)  # the previous action matters, as trained
    with torch.no_grad():
        model.policy.weight.mul_(20)  # a peaked policy: a wrong logit would show in the ratios
        if model.core is not None:  # a core whose state matters as much as its input
            for w in (model.core.weight_ih, model.core.weight_hh):
                torch.nn.init.normal_(w, std=0.3)
            model.policy.weight.mul_(4)  # its output is in [-1, 1], the trunk's is not
    spec = EnvSpec(no_progress_steps=T)
    envs = [FrameEnv(spec) for _ in range(2)]
    lane = Lane(envs, T, 7, state_size=model.spec.state_size)
    rng = np.random.default_rng(0)
    fed_stacks, fed_last, fed_states = [], [], []
    for _ in range(3 * T):
        fed_stacks.append(lane.observe().clone())  # [K, 4, H, W]
        fed_last.append(lane.last_action().clone())  # [K]
        fed_states.append(lane.core_state().clone())  # [K, C]
        infer_and_act(model, lane, rng, policy_version=7)
        lane.step()
    chunks = lane.take_finished()
    assert len(chunks) == 3
    # episodes end inside chunks (the 16-step no-progress cutoff, deaths), not only between them
    inside = np.concatenate([c.arrays["first"][4:-1] for c in chunks])
    assert inside.any()
    return Played(
        model, chunks, torch.stack(fed_stacks), torch.stack(fed_last), torch.stack(fed_states)
    )


def learner_batch(chunks, i: int):
    cfg = ActorConfig()
    msg = wire.decode(wire.encode(to_wire_chunk(cfg, "inst", i, chunks[i])))
    return collate([to_host(msg, 4, pin=False)], torch.device("cpu"))


def log_rhos(model: ActorCritic, batch) -> torch.Tensor:
    with torch.no_grad():
        return forward_and_targets(model, batch, HYPER, PopArt(model.value)).vtrace.log_rhos


def test_at_policy_lag_zero_every_importance_ratio_is_one(played):
    model, chunks = played.model, played.chunks
    for i in range(len(chunks)):
        batch = learner_batch(chunks, i)
        rhos = log_rhos(model, batch)  # [T, K]
        assert rhos.abs().max() < 1e-4, rhos
        # and the recorded actions are ones the policy could have drawn from those logits
        probs = torch.softmax(batch.behaviour_logits, -1).gather(-1, batch.actions[..., None])
        assert (probs > 0).all()


def test_a_chunk_carries_the_core_state_its_first_step_started_from(played):
    for i, c in enumerate(played.chunks):
        want = played.fed_states[i * T].numpy()  # [K, C], what the policy was fed at step 0
        np.testing.assert_array_equal(c.arrays["core_state"], want)
    if played.model.core is not None:  # a state carried across chunks is not all zeros
        assert np.abs(played.chunks[1].arrays["core_state"]).max() > 0.1


def test_ratios_would_show_a_core_state_not_carried_or_not_reset(played):
    """The test above can fail: a learner that starts each chunk's core from zeros, or that
    does not reset it where an episode starts inside a chunk, gets ratios far from 1."""
    if played.model.core is None:
        pytest.skip("a feed-forward network has no core state")
    worst_uncarried, worst_unreset = 0.0, 0.0
    for i in range(len(played.chunks)):
        batch = learner_batch(played.chunks, i)
        uncarried = Batch(**{**vars(batch), "core_state": torch.zeros_like(batch.core_state)})
        worst_uncarried = max(worst_uncarried, log_rhos(played.model, uncarried).abs().max())
        first = batch.first.clone()
        first[4:] = False  # no episode starts after step 0: the core runs on across episode ends
        unreset = Batch(**{**vars(batch), "first": first})
        worst_unreset = max(worst_unreset, log_rhos(played.model, unreset).abs().max())
    assert worst_uncarried > 1e-2 and worst_unreset > 1e-2, (worst_uncarried, worst_unreset)


def test_each_step_records_the_logits_of_the_stack_it_saw(played):
    """The logits stored for step t are the policy's output on step t's stack and previous
    action (not a neighbour's), and with this peaked policy the actions are nearly all their
    argmax (the sampler's distribution itself: tests/actor/test_rollout.py)."""
    model, chunks, fed_stacks, fed_last = played[:4]
    logits = torch.from_numpy(
        np.concatenate([c.arrays["behaviour_logits"] for c in chunks])
    )  # [3T, K, A]
    # step by step, as the actor batches them (K rows a call): one batch of all 3T*K rows rounds
    # differently in float32, by up to ~3e-5 at this peaked LSTM policy's logits (up to ~41)
    with torch.no_grad():
        fed = zip(fed_stacks, fed_last, played.fed_states, strict=True)
        want = torch.stack([model(s, a, c).logits for s, a, c in fed])  # [3T, K, A]
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)
    actions = torch.from_numpy(
        np.concatenate([c.arrays["actions"] for c in chunks]).astype(np.int64)
    )
    assert (actions == logits.argmax(-1)).float().mean() > 0.8


def test_values_trained_on_are_those_of_the_stacks_the_actor_saw(played):
    model, chunks, fed_stacks, fed_last, fed_states = played
    for i in range(len(chunks)):
        batch = learner_batch(chunks, i)
        stacks = stack_frames(batch.frames, batch.first)[:T]  # [T, K, 4, H, W]
        seen = fed_stacks[i * T : (i + 1) * T]
        torch.testing.assert_close(stacks, seen, rtol=0, atol=0)
        torch.testing.assert_close(
            previous_actions(batch, 7)[:T], fed_last[i * T : (i + 1) * T], rtol=0, atol=0
        )
        with torch.no_grad():
            fwd = forward_and_targets(model, batch, HYPER, PopArt(model.value))
            want = model(
                seen.flatten(0, 1),
                fed_last[i * T : (i + 1) * T].flatten(),
                fed_states[i * T : (i + 1) * T].flatten(0, 1),
            ).value
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
