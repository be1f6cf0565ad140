"""The clipped surrogate, advantage normalisation and per-group moments against formulas written
out element by element, plus their edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from learner.losses import clipped_surrogate, group_moments, group_sums, normalize_advantages


def surrogate_reference(log_ratio: list[float], adv: list[float], eps: float) -> list[float]:
    """-min(r A, clip(r, 1/(1+eps), 1+eps) A), one step at a time."""
    out = []
    for lr, a in zip(log_ratio, adv, strict=True):
        r = math.exp(lr)
        clipped = min(max(r, 1 / (1 + eps)), 1 + eps)
        out.append(-min(r * a, clipped * a))
    return out


def test_surrogate_matches_reference_on_both_sides_of_the_clip():
    g = torch.Generator().manual_seed(0)
    log_ratio = torch.randn(6, 5, generator=g) * 0.3  # ratios from ~0.4 to ~2.5
    adv = torch.randn(6, 5, generator=g)
    got = clipped_surrogate(log_ratio, adv, 0.1)
    want = surrogate_reference(log_ratio.flatten().tolist(), adv.flatten().tolist(), 0.1)
    torch.testing.assert_close(got.loss.flatten(), torch.tensor(want), rtol=1e-6, atol=1e-6)
    r = log_ratio.exp()
    above = (r > 1.1) & (adv > 0)
    below = (r < 1 / 1.1) & (adv < 0)
    assert above.any() and below.any(), "the test must clip on both sides"
    assert torch.equal(got.clipped, above | below)


def test_surrogate_gradient_vanishes_where_clipped_and_is_r_times_a_elsewhere():
    log_ratio = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5, 1.0]])).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 2.0]])
    clipped_surrogate(log_ratio, adv, 0.2).loss.sum().backward()
    # d(-r A)/d log r = -r A, unless the clipped branch (constant in r) is the minimum
    expected = torch.tensor([[0.0, 1.5, -0.5, 0.0, -2.0]])
    torch.testing.assert_close(log_ratio.grad, expected)


def test_surrogate_at_ratio_one_is_the_plain_policy_gradient():
    log_ratio = torch.zeros(1, 1, requires_grad=True)
    clipped_surrogate(log_ratio, torch.tensor([[3.0]]), 0.1).loss.sum().backward()
    assert float(log_ratio.grad) == pytest.approx(-3.0)


def test_surrogate_refuses_bad_input():
    with pytest.raises(ValueError, match="clip must be > 0"):
        clipped_surrogate(torch.zeros(2, 2), torch.zeros(2, 2), 0.0)
    with pytest.raises(ValueError, match="same shape"):
        clipped_surrogate(torch.zeros(2, 2), torch.zeros(2, 3), 0.1)


def test_normalize_advantages_matches_reference():
    adv = torch.tensor([[1.0, 2.0], [3.0, 10.0], [-4.0, 0.5]])
    values = adv.flatten().tolist()
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    want = torch.tensor([(v - mean) / (std + 1e-8) for v in values]).view(3, 2)
    got = normalize_advantages(adv)
    torch.testing.assert_close(got, want)
    assert float(got.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(got.std(unbiased=False)) == pytest.approx(1.0, abs=1e-6)


def test_normalize_advantages_edge_cases():
    assert normalize_advantages(torch.tensor([[5.0]])).tolist() == [[0.0]]  # T = B = 1
    same = normalize_advantages(torch.full((4, 2), 7.0))
    assert torch.all(same == 0)  # constant advantages: no direction, no blow-up
    x = torch.randn(3, 3, requires_grad=True)
    assert not normalize_advantages(x).requires_grad


def test_group_moments_match_a_reference_group_by_group():
    g = torch.Generator().manual_seed(0)
    groups = torch.randint(0, 3, (6, 5), generator=g)
    groups[0, 0] = 7  # a group of one element
    scale = torch.tensor([1.0, 50.0, 0.1, 1, 1, 1, 1, 3.0])[groups]  # very different scales
    adv = torch.randn(6, 5, generator=g) * scale + 4.0
    half = group_sums(adv[:3], groups[:3])  # summed over two minibatches, as an update does
    m = group_moments(group_sums(adv[3:], groups[3:], half))
    for group in range(8):
        where = (groups == group).flatten().tolist()
        values = [v for v, w in zip(adv.flatten().tolist(), where, strict=True) if w]
        mean = sum(values) / len(values) if values else 0.0
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) if values else 0.0
        assert float(m.count[group]) == len(values)
        assert float(m.mean[group]) == pytest.approx(mean, rel=1e-5, abs=1e-6)
        assert float(m.std[group]) == pytest.approx(std, rel=1e-4, abs=1e-5)
