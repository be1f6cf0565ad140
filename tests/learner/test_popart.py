"""PopArt against its definition: moments, output preservation, normalised targets."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from learner import popart
from learner.popart import PopArt, Stats


def test_update_stats_matches_reference():
    s = Stats(torch.tensor(0.5), torch.tensor(2.0))
    targets = torch.tensor([[1.0, 3.0], [-2.0, 6.0]])
    beta = 0.1
    mean = sum(targets.flatten().tolist()) / 4
    mean_sq = sum(v * v for v in targets.flatten().tolist()) / 4
    new = popart.update_stats(s, targets, beta)
    assert float(new.mean) == pytest.approx(0.9 * 0.5 + 0.1 * mean)
    assert float(new.mean_sq) == pytest.approx(0.9 * 2.0 + 0.1 * mean_sq)
    sigma = math.sqrt(float(new.mean_sq) - float(new.mean) ** 2)
    assert float(new.sigma(1e-4)) == pytest.approx(sigma)


def test_sigma_has_a_floor():
    s = Stats(torch.tensor(3.0), torch.tensor(9.0))  # every target was 3: variance 0
    assert float(s.sigma(1e-2)) == pytest.approx(1e-2)


def test_rescaling_preserves_every_output():
    torch.manual_seed(0)
    layer = nn.Linear(8, 1)
    p = PopArt(layer, beta=0.5)
    h = torch.randn(32, 8)
    for targets in (torch.randn(64) * 50 + 200, torch.randn(64) * 0.1 - 3, torch.randn(64)):
        before = p.denormalize(layer(h).squeeze(-1)).detach()
        p.update(targets)
        after = p.denormalize(layer(h).squeeze(-1)).detach()
        torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    assert float(p.stats.sigma(p.min_sigma)) != pytest.approx(1.0)  # the stats did move


def test_normalised_targets_follow_the_targets_scale():
    layer = nn.Linear(4, 1)
    p = PopArt(layer, beta=1.0)  # beta 1: the stats are the last batch's
    targets = torch.tensor([10.0, 20.0, 30.0, 40.0])
    p.update(targets)
    z = p.normalize(targets)
    assert float(z.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(z.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    torch.testing.assert_close(p.denormalize(z), targets)


def test_state_round_trip_and_refusals():
    p = PopArt(nn.Linear(4, 1), beta=0.2)
    p.update(torch.tensor([1.0, 5.0]))
    q = PopArt(nn.Linear(4, 1), beta=0.2)
    q.load_state_dict(p.state_dict())
    assert q.state_dict() == p.state_dict()
    assert isinstance(p.state_dict()["mean"], float)  # as checkpoints have always held it
    with pytest.raises(ValueError, match="one-output"):
        PopArt(nn.Linear(4, 2), beta=0.1)
    with pytest.raises(ValueError, match="beta"):
        PopArt(nn.Linear(4, 1), beta=0.0)
