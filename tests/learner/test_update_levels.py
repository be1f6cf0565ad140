"""The update per level: each level's advantage spread and policy entropy against references
written out, and a value head and normalisation per level."""

from __future__ import annotations

import pytest
import torch

from common.model import ActorCritic, ModelSpec
from common.stacking import stack_frames
from learner.inputs import previous_actions
from learner.popart import PopArt
from learner.update import Learner, batch_targets, network_outputs
from tests.learner.test_update import A, fwd_of, hyper, make_batch, new_model, on_policy

model = pytest.fixture(name="model")(new_model)


def test_an_update_reports_each_levels_advantage_scale_before_normalising(model):
    levels = torch.tensor([0, 2, 2, 0, 2, 5])[None, :].repeat(4, 1)  # [T, N]
    levels[2:, 3] = 2  # an episode on another level starts inside sequence 3
    batch = on_policy(model, make_batch(4, 6, seed=8, level=levels))
    held = batch_targets(model, batch, hyper(), PopArt(model.value))  # the first pass's
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-4), hyper())
    stats = learner.step(batch)
    assert stats.level_steps.tolist()[:6] == [6, 0, 14, 0, 0, 4]
    for level in (0, 2, 5):
        want = held.advantages[levels == level].double().std(unbiased=False)
        assert float(stats.level_advantage_std[level]) == pytest.approx(float(want), rel=1e-4)


def test_an_update_reports_the_policys_entropy_on_each_level(model):
    """One minibatch a pass: the first pass sees the network as it is before the update, so each
    level's entropy is the mean over its steps of -sum_a pi log pi from that network."""
    levels = torch.tensor([0, 2, 2, 0, 2, 5])[None, :].repeat(4, 1)  # [T, N]
    levels[2:, 3] = 2
    batch = on_policy(model, make_batch(4, 6, seed=8, level=levels))
    with torch.no_grad():
        logits = fwd_of(model, batch, hyper()).logits[:4]  # [T, N, A]
    p = torch.softmax(logits.double(), -1)
    entropy = -(p * p.log()).sum(-1)  # [T, N]
    want = {level: float(entropy[levels == level].mean()) for level in (0, 2, 5)}
    assert max(want.values()) - min(want.values()) > 1e-4  # levels apart, beyond the tolerance
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-4), hyper(minibatches=1))
    stats = learner.step(batch)
    for level, h in want.items():
        assert float(stats.level_entropy[level]) == pytest.approx(h, rel=1e-5)
    assert float(stats.level_entropy[1]) == 0.0  # no steps: no figure (the telemetry skips it)


def per_level_model(levels: int):
    torch.manual_seed(0)
    return ActorCritic(ModelSpec(num_actions=A, value_heads=levels))


def test_each_step_is_valued_by_its_levels_head_in_its_levels_units():
    net = per_level_model(3)
    levels = torch.tensor([0, 1, 2, 1])[None, :].repeat(5, 1)  # [T, N]
    levels[3:, 0] = 2  # an episode of another level starts inside sequence 0
    batch = on_policy(net, make_batch(5, 4, seed=3, level=levels))
    popart = PopArt(net.value)
    with torch.no_grad():  # each level its own mu and sigma
        popart.stats = popart.stats._replace(
            mean=torch.tensor([1.0, -2.0, 30.0]), mean_sq=torch.tensor([5.0, 8.0, 1000.0])
        )
        out = network_outputs(net, batch, hyper(), popart)
        stacks = stack_frames(batch.frames, batch.first)  # [T+4-3, N, 4, H, W]
        prev = previous_actions(batch, A)  # [T+1, N]
        heads = net.value(net.features(stacks[:6].flatten(0, 1), prev.flatten())).view(6, 4, 3)
    sigma = popart.stats.sigma(popart.min_sigma)
    for t in range(6):  # stack T bootstraps with step T-1's level
        for n in range(4):
            lv = int(levels[min(t, 4), n])
            want = float(heads[t, n, lv] * sigma[lv] + popart.stats.mean[lv])
            assert float(out.values[t, n]) == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_an_update_moves_only_the_normalisations_of_the_levels_it_holds():
    net = per_level_model(3)
    levels = torch.tensor([0, 2, 2, 0])[None, :].repeat(4, 1)  # level 1 is not in the batch
    batch = on_policy(net, make_batch(4, 4, seed=5, level=levels))
    learner = Learner(net, torch.optim.Adam(net.parameters(), lr=1e-4), hyper())
    learner.step(batch)
    stats = learner.popart.stats
    assert float(stats.mean[1]) == 0.0 and float(stats.mean_sq[1]) == 1.0
    assert float(stats.mean[0]) != 0.0 and float(stats.mean[2]) != 0.0
    assert float(stats.mean[0]) != pytest.approx(float(stats.mean[2]))
