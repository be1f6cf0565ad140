"""The actor's sampler draws from softmax(logits): frequencies against the exact probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from actor.rollout import sample_from_logits


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_gumbel_sampler_matches_softmax(scale):
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal((3, 7)) * scale).astype(np.float32)
    n = 40_000
    counts = np.zeros((3, 7))
    for _ in range(n // 100):
        batch = np.repeat(logits[None], 100, axis=0).reshape(-1, 7)
        actions = sample_from_logits(batch, rng).reshape(100, 3)
        assert actions.dtype.kind == "i"
        for row in range(3):
            counts[row] += np.bincount(actions[:, row], minlength=7)
    expected = softmax(logits.astype(np.float64)) * n
    chi2 = ((counts - expected) ** 2 / expected).sum(axis=1)
    assert (chi2 < 22.5).all(), chi2  # 6 degrees of freedom, p = 0.001 per row


def test_sampler_never_picks_a_masked_action():
    logits = np.array([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, 5.0]], np.float32)
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = sample_from_logits(logits, rng)
        assert a[0] in (0, 2) and a[1] == 2
