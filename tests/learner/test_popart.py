"""PopArt against its definition: moments, output preservation, normalised targets; one
normalisation for a set, or one per level (multi-task PopArt)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from common.model import value_at
from learner import popart
from learner.popart import PopArt, Stats


def test_update_stats_matches_reference():
    s = Stats(torch.tensor([0.5]), torch.tensor([2.0]))
    targets = torch.tensor([[1.0, 3.0], [-2.0, 6.0]])
    beta = 0.1
    mean = sum(targets.flatten().tolist()) / 4
    mean_sq = sum(v * v for v in targets.flatten().tolist()) / 4
    new = popart.update_stats(s, targets, None, beta)
    assert float(new.mean) == pytest.approx(0.9 * 0.5 + 0.1 * mean)
    assert float(new.mean_sq) == pytest.approx(0.9 * 2.0 + 0.1 * mean_sq)
    sigma = math.sqrt(float(new.mean_sq) - float(new.mean) ** 2)
    assert float(new.sigma(1e-4)) == pytest.approx(sigma)


def test_each_level_moves_towards_its_own_targets_and_an_absent_one_stays():
    s = Stats(torch.tensor([0.5, 1.0, -1.0]), torch.tensor([2.0, 3.0, 4.0]))
    targets = torch.tensor([[1.0, 3.0], [-2.0, 6.0]])
    level = torch.tensor([[0, 2], [0, 2]])  # level 1 is not in the batch
    new = popart.update_stats(s, targets, level, 0.1)
    for lv, ts in ((0, [1.0, -2.0]), (2, [3.0, 6.0])):
        m, sq = sum(ts) / 2, sum(t * t for t in ts) / 2
        assert float(new.mean[lv]) == pytest.approx(0.9 * float(s.mean[lv]) + 0.1 * m)
        assert float(new.mean_sq[lv]) == pytest.approx(0.9 * float(s.mean_sq[lv]) + 0.1 * sq)
    assert float(new.mean[1]) == 1.0 and float(new.mean_sq[1]) == 3.0


def test_sigma_has_a_floor():
    s = Stats(torch.tensor([3.0]), torch.tensor([9.0]))  # every target was 3: variance 0
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


def test_rescaling_preserves_every_levels_outputs():
    torch.manual_seed(0)
    layer = nn.Linear(8, 3)
    p = PopArt(layer, beta=0.9)
    h = torch.randn(30, 8)
    level = torch.arange(30) % 3
    scales = torch.tensor([100.0, 1.0, 0.01])  # three levels, returns of three scales
    for _ in range(3):
        before = p.denormalize(value_at(layer(h), level), level).detach()
        targets = torch.randn(30) * scales[level] + 5 * scales[level]
        p.update(targets, level)
        after = p.denormalize(value_at(layer(h), level), level).detach()
        torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    sigma = p.stats.sigma(p.min_sigma)
    assert sigma[0] > 10 * sigma[1] > 100 * sigma[2]  # each level its own scale


def test_one_normalisation_serves_a_whole_set():
    p = PopArt(nn.Linear(4, 1), beta=1.0)
    targets = torch.tensor([10.0, 20.0, 30.0, 40.0])
    level = torch.tensor([0, 1, 2, 3])  # four levels, one value head
    p.update(targets, level)
    assert float(p.stats.mean) == pytest.approx(25.0)
    torch.testing.assert_close(p.normalize(targets, level), p.normalize(targets))


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
    several = PopArt(nn.Linear(4, 2), beta=0.2)
    several.update(torch.tensor([1.0, 5.0]), torch.tensor([0, 1]))
    again = PopArt(nn.Linear(4, 2), beta=0.2)
    again.load_state_dict(several.state_dict())
    assert again.state_dict() == several.state_dict()
    with pytest.raises(ValueError, match="normalisations"):
        q.load_state_dict(several.state_dict())
    with pytest.raises(ValueError, match="beta"):
        PopArt(nn.Linear(4, 1), beta=0.0)
