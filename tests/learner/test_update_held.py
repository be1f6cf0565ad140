"""Held targets: an optimizer step forwards only the T stacks that acted, and gives what the
whole forward (T+1 stacks and the final ones) gives there."""

from __future__ import annotations

import copy

import pytest
import torch

from common.model import ActorCritic, ModelSpec
from learner import update
from learner.popart import PopArt
from learner.update import Outputs, batch_targets, loss_and_stats, network_outputs
from tests.learner.test_update import A, hyper, make_batch, replaced


def batch_with_ends(net: ActorCritic):
    """Four sequences of 6 steps, on the network's policy: a death, a truncation with its final
    frame, and two that continue an episode of the previous chunk from a carried core state."""
    T, N = 6, 4
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    terminated[2, 0] = True
    truncated[3, 1] = True
    batch = make_batch(
        T, N, terminated=terminated, truncated=truncated, final_t=torch.tensor([-1, 3, -1, -1])
    )
    batch.first[3, 2:] = False
    batch.last_actions[2:] = torch.tensor([2, 5])
    batch.core_state = torch.randn(N, net.spec.state_size)
    with torch.no_grad():
        logits = network_outputs(net, batch, hyper(), PopArt(net.value)).logits[:T]
    return replaced(batch, behaviour_logits=logits)


@pytest.mark.parametrize("core", ["none", "lstm", "gru"])
def test_the_acting_stacks_alone_give_the_whole_forwards_outputs_there(core):
    torch.manual_seed(3)
    net = ActorCritic(ModelSpec(num_actions=A, core=core, core_size=32)).eval()
    batch = batch_with_ends(net)
    T = batch.unroll_length
    with torch.no_grad():
        whole = network_outputs(net, batch, hyper(), PopArt(net.value))
        acting = network_outputs(net, batch, hyper(), PopArt(net.value), bootstrap=False)
    assert acting.logits.shape == (T, 4, A) and acting.values.shape == (T, 4)
    assert acting.final_values is None
    torch.testing.assert_close(acting.logits, whole.logits[:T])
    torch.testing.assert_close(acting.values, whole.values[:T])
    torch.testing.assert_close(acting.features, whole.features)


def whole_forward(model, batch, hyper, popart, bootstrap=True) -> Outputs:
    """`network_outputs` over all T+1 stacks and the final ones, cut to the T that acted where
    nothing bootstraps (an optimizer step)."""
    out = network_outputs(model, batch, hyper, popart)
    if bootstrap:
        return out
    T = batch.unroll_length
    return Outputs(out.logits[:T], out.values[:T], out.features, None)


@pytest.mark.parametrize("core", ["none", "lstm", "gru"])
def test_a_held_step_has_the_losses_and_gradients_of_the_whole_forward(core, monkeypatch):
    """A step on the acting stacks alone and one on the whole forward (the reference) must give
    the same losses, the same gradients and the same PopArt statistics."""
    torch.manual_seed(4)
    net = ActorCritic(ModelSpec(num_actions=A, core=core, core_size=32))
    batch = batch_with_ends(net)
    h = hyper()
    results = []
    for forward in (network_outputs, whole_forward):
        monkeypatch.setattr(update, "network_outputs", forward)
        model = copy.deepcopy(net)
        popart = PopArt(model.value)
        out = loss_and_stats(model, batch, h, popart, batch_targets(model, batch, h, popart))
        out.total.backward()
        results.append((out, [p.grad for p in model.parameters()], popart.state_dict()))
    (held, held_grads, held_stats), (whole, whole_grads, whole_stats) = results
    for field in ("total", "pg", "baseline", "entropy", "priorities", "advantages", "entropies"):
        torch.testing.assert_close(getattr(held, field), getattr(whole, field))
    for a, b in zip(held_grads, whole_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)
    assert held_stats == pytest.approx(whole_stats)
