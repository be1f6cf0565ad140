"""Return normalisation against its definition: all-history moments, clipping, round trips (the
update that learns with it: tests/learner/test_update.py)."""

from __future__ import annotations

import pytest
import torch

from learner import return_norm
from learner.return_norm import ReturnNorm


def reference_moments(*batches: list[float]) -> tuple[float, float, int]:
    """Mean and population variance of the pseudo-target (mean 0, variance 1: second moment 1,
    count 1) and every target, written out as sums."""
    xs = [x for b in batches for x in b]
    n = len(xs) + 1
    mean = sum(xs) / n
    second = (1.0 + sum(x * x for x in xs)) / n
    return mean, second - mean * mean, n


def test_moments_are_those_of_every_target_seen_with_the_pseudo_target():
    a, b = [1.0, 3.0, -2.0, 6.0], [10.0, 12.0, 11.0]
    m = return_norm.merge(return_norm.initial_moments(), torch.tensor(a).view(2, 2))
    m = return_norm.merge(m, torch.tensor(b))
    mean, var, n = reference_moments(a, b)
    assert float(m.mean) == pytest.approx(mean)
    assert float(m.var) == pytest.approx(var)
    assert float(m.count) == n


def test_merging_in_parts_equals_merging_at_once():
    torch.manual_seed(0)
    xs = torch.randn(1000, dtype=torch.float64) * 30 + 5
    parts = return_norm.initial_moments()
    for chunk in xs.split(37):
        parts = return_norm.merge(parts, chunk)
    whole = return_norm.merge(return_norm.initial_moments(), xs)
    for p, w in zip(parts, whole, strict=True):
        assert float(p) == pytest.approx(float(w), rel=1e-10)


def test_an_empty_batch_changes_nothing():
    m = return_norm.initial_moments()
    assert return_norm.merge(m, torch.zeros(0)) == m


def test_normalise_and_denormalise_round_trip_within_the_clip_and_clip_beyond_it():
    norm = ReturnNorm(clip=5.0)
    norm.update(torch.tensor([10.0, 20.0, 30.0, 40.0]))
    mean = float(norm.moments.mean)
    sigma = float((norm.moments.var + norm.eps).sqrt())
    assert norm.scale() == pytest.approx(sigma)
    v = torch.tensor([mean - sigma, mean, mean + 2 * sigma])
    assert torch.allclose(norm.normalize(v), torch.tensor([-1.0, 0.0, 2.0]), atol=1e-5)
    assert torch.allclose(norm.denormalize(norm.normalize(v)), v, rtol=1e-5)
    far = torch.tensor([mean + 100 * sigma, mean - 100 * sigma])
    assert norm.normalize(far).tolist() == [5.0, -5.0]
    assert norm.denormalize(torch.tensor([7.0])).item() == pytest.approx(mean + 5 * sigma)


def test_state_dict_round_trip():
    a = ReturnNorm()
    a.update(torch.randn(64) * 9 - 4)
    b = ReturnNorm()
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()


def test_refuses_a_clip_of_zero():
    with pytest.raises(ValueError, match="clip"):
        ReturnNorm(clip=0.0)
