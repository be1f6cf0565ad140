"""The update's per-level reports: each level's advantage spread and policy entropy, against
references written out."""

from __future__ import annotations

import pytest
import torch

from learner.popart import PopArt
from learner.update import Learner, batch_targets
from tests.learner.test_update import fwd_of, hyper, make_batch, new_model, on_policy

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
