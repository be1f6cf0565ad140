"""Held targets (`--targets batch`): an optimizer step forwards only the T stacks that acted,
and gives what the whole forward (T+1 stacks and the final ones) gives there."""

from __future__ import annotations

import copy

import pytest
import torch

from common.model import ActorCritic, ModelSpec
from learner.popart import PopArt
from learner.update import batch_targets, loss_and_stats, network_outputs
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
        logits = network_outputs(net, batch, hyper()).logits[:T]
    return replaced(batch, behaviour_logits=logits)


@pytest.mark.parametrize("core", ["none", "lstm", "gru"])
def test_the_acting_stacks_alone_give_the_whole_forwards_outputs_there(core):
    torch.manual_seed(3)
    net = ActorCritic(ModelSpec(num_actions=A, core=core, core_size=32)).eval()
    batch = batch_with_ends(net)
    T = batch.unroll_length
    with torch.no_grad():
        whole = network_outputs(net, batch, hyper())
        acting = network_outputs(net, batch, hyper(), bootstrap=False)
    assert acting.logits.shape == (T, 4, A) and acting.values.shape == (T, 4)
    assert acting.final_values is None
    torch.testing.assert_close(acting.logits, whole.logits[:T])
    torch.testing.assert_close(acting.values, whole.values[:T])
    torch.testing.assert_close(acting.features, whole.features)


@pytest.mark.parametrize("core", ["none", "lstm", "gru"])
@pytest.mark.parametrize("popart", [False, True])
def test_a_held_step_has_the_losses_and_gradients_of_the_whole_forward(core, popart):
    """Before any step, held targets are the network's own, so a held step (the acting stacks
    only) and a step that recomputes its targets (the whole forward, the reference) must give
    the same losses and the same gradients."""
    torch.manual_seed(4)
    net = ActorCritic(ModelSpec(num_actions=A, core=core, core_size=32))
    batch = batch_with_ends(net)
    h = hyper(targets="batch")
    results = []
    for held in (True, False):
        model = copy.deepcopy(net)
        norm = PopArt(model.value, beta=3e-3) if popart else None
        targets = batch_targets(model, batch, h, norm) if held else None
        out = loss_and_stats(model, batch, h, norm, targets)
        out.total.backward()
        results.append((out, [p.grad for p in model.parameters()]))
    (held, held_grads), (whole, whole_grads) = results
    for field in ("total", "pg", "baseline", "entropy", "priorities", "advantages", "entropies"):
        torch.testing.assert_close(getattr(held, field), getattr(whole, field))
    for a, b in zip(held_grads, whole_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)
