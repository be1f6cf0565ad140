"""The update's per-level parts: each level's advantage spread, and advantages normalised per
level (`--advantage-norm-by level`), against references written out."""

from __future__ import annotations

import copy

import pytest
import torch

from learner import vtrace
from learner.losses import clipped_surrogate, normalize_advantages
from learner.update import Learner, batch_targets, forward_and_targets, loss_and_stats
from tests.learner.test_update import hyper, make_batch, new_model, on_policy, replaced

model = pytest.fixture(name="model")(new_model)


def test_an_update_reports_each_levels_advantage_scale_before_normalising(model):
    levels = torch.tensor([0, 2, 2, 0, 2, 5])[None, :].repeat(4, 1)  # [T, N]
    levels[2:, 3] = 2  # an episode on another level starts inside sequence 3
    batch = on_policy(model, make_batch(4, 6, seed=8, level=levels))
    held = batch_targets(model, batch, hyper())  # the first pass's advantages: the held ones
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
        logits = forward_and_targets(model, batch, hyper()).logits[:4]  # [T, N, A]
    p = torch.softmax(logits.double(), -1)
    entropy = -(p * p.log()).sum(-1)  # [T, N]
    want = {level: float(entropy[levels == level].mean()) for level in (0, 2, 5)}
    assert max(want.values()) - min(want.values()) > 1e-4  # levels apart, beyond the tolerance
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-4), hyper(minibatches=1))
    stats = learner.step(batch)
    for level, h in want.items():
        assert float(stats.level_entropy[level]) == pytest.approx(h, rel=1e-5)
    assert float(stats.level_entropy[1]) == 0.0  # no steps: no figure (the telemetry skips it)


def test_advantages_are_normalised_per_level_when_asked(model):
    """One level: the same update as the minibatch's normalisation. Two levels whose rewards
    differ 100-fold: the policy loss is the surrogate on each level's own normalisation."""
    batch = on_policy(model, make_batch(4, 4, seed=9))
    by_level = hyper(advantage_norm_by="level")
    state = copy.deepcopy(model.state_dict())
    updated = []
    for settings in (hyper(), by_level):
        model.load_state_dict(state)
        Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), settings).step(batch)
        updated.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*updated, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    model.load_state_dict(state)
    levels = torch.tensor([[0, 0, 1, 1]]).repeat(4, 1)  # [T, N]
    two = make_batch(4, 4, seed=9, level=levels)  # off policy: pi/mu differs from 1
    two = replaced(two, rewards=two.rewards * torch.tensor([1.0, 1, 100, 100]))
    held = batch_targets(model, two, hyper())
    with torch.no_grad():
        logits = forward_and_targets(model, two, hyper()).logits[:4]
    log_pi = vtrace.action_log_probs(logits, two.actions)
    pg = {}
    for name, settings, groups in (("minibatch", hyper(), None), ("level", by_level, levels)):
        want = clipped_surrogate(
            log_pi - held.behaviour_log_probs, normalize_advantages(held.advantages, groups), 0.1
        ).loss.mean()
        pg[name] = float(loss_and_stats(model, two, settings, targets=held).pg)
        assert pg[name] == pytest.approx(float(want), rel=1e-4, abs=1e-6)
    assert pg["minibatch"] != pytest.approx(pg["level"], rel=1e-2)
