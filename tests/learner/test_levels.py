"""The level schedule's math against a slow reference written from Prioritized Level Replay's
formulas (Jiang et al. 2021, eqs. 1-3), and the learner's per-level statistics."""

from __future__ import annotations

import numpy as np
import pytest

from common import wire
from common.levels import level_lengths
from learner.levels import (
    LevelStats,
    plr_weights,
    rank_weights,
    staleness_weights,
)


def reference(scores, last_seen, now, beta, rho):
    """P = (1 - rho) P_S + rho P_C, one level at a time: P_S from h = 1/rank (rank 1 is the
    highest score; the levels tied at one score share the mean h of the ranks they span),
    P_C from (c - C_i)."""
    n = len(scores)
    h = []
    for i in range(n):
        higher = sum(1 for j in range(n) if scores[j] > scores[i])
        tied = sum(1 for j in range(n) if scores[j] == scores[i])
        spanned = range(higher + 1, higher + tied + 1)
        h.append(sum((1.0 / r) ** (1.0 / beta) for r in spanned) / tied)
    p_s = [x / sum(h) for x in h]
    age = [now - c for c in last_seen]
    p_c = [a / sum(age) for a in age] if sum(age) > 0 else [1.0 / n] * n
    return [(1 - rho) * p_s[i] + rho * p_c[i] for i in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_plr_weights_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 33))
    scores = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], n)  # ties too
    now = int(rng.integers(0, 500))
    last_seen = rng.integers(0, now + 1, n)
    beta, rho = float(rng.choice([0.1, 0.3, 1.0, 3.0])), float(rng.uniform(0, 1))
    got = plr_weights(scores.tolist(), last_seen.tolist(), now, beta, rho)
    np.testing.assert_allclose(got, reference(scores, last_seen, now, beta, rho), rtol=1e-12)
    assert got.sum() == pytest.approx(1.0)


def test_rank_weights_of_four_levels_at_temperature_one():
    h = np.array([1 / 3, 1, 1 / 2, 1 / 4])  # ranks 3, 1, 2, 4
    np.testing.assert_allclose(rank_weights([0.2, 0.9, 0.5, 0.1], 1.0), h / h.sum())
    np.testing.assert_allclose(
        rank_weights([0.2, 0.9, 0.9, 0.1], 1.0),
        [1 / 3, 3 / 4, 3 / 4, 1 / 4] / np.sum([1 / 3, 3 / 4, 3 / 4, 1 / 4]),
    )
    np.testing.assert_allclose(staleness_weights([5, 5], 5), [0.5, 0.5])  # none stale


def test_unplayed_levels_come_first_and_the_weakest_gets_most():
    length = level_lengths()["1-1"]
    stats = LevelStats(("1-1", "1-2", "1-3"), "progress", window=4, staleness=0.0)
    for _ in range(4):
        stats.add("1-1", length, True)  # at the flag
        stats.add("1-2", length // 4, False)
    w = stats.weights()
    assert max(w, key=w.get) == "1-3"  # never played: score 1
    assert w["1-2"] > w["1-1"]
    stats.add("1-3", length, False)  # 1-3 is measured shorter than 1-1: x past its end is 100%
    w = stats.weights()
    assert max(w, key=w.get) == "1-2"
    s = stats.summary()
    assert s["1-1"] == (4, 1.0, 1.0, 4)
    assert s["1-2"].progress == pytest.approx((length // 4) / level_lengths()["1-2"])
    assert s["1-3"].progress == 1.0 and s["1-3"].flag_rate == 0.0
    stats.add("4-1", 100, False)  # outside the set: ignored
    assert set(stats.summary()) == {"1-1", "1-2", "1-3"}


def test_the_window_keeps_the_newest_episodes():
    length = level_lengths()["1-1"]
    stats = LevelStats(("1-1",), window=3)
    for x in (0, 0, 0, length, length, length):
        stats.add("1-1", x, x == length)
    assert stats.summary()["1-1"] == (6, 1.0, 1.0, 3)


def test_uniform_and_sets_of_one_send_no_weights():
    assert LevelStats(("1-1", "1-2"), "uniform").weights() == {}
    assert LevelStats(("1-1",), "progress").weights() == {}
    assert LevelStats(("1-1", "1-2"), "progress").weights() == {"1-1": 0.5, "1-2": 0.5}


def test_weights_travel_with_the_policy_and_bad_ones_are_refused():
    tensors = {"w": np.zeros(3, np.float32)}
    msg = wire.Weights(policy_version=3, tensors=tensors, model_spec={}, level_weights={"1-1": 0.7})
    assert wire.decode(wire.encode(msg)).level_weights == {"1-1": 0.7}
    for bad in ({"1-1": -0.1}, {"1-1": float("nan")}, {"1-1": 1}, {"": 0.5}):
        with pytest.raises(wire.ProtocolError, match="level_weights"):
            wire.Weights(policy_version=3, tensors=tensors, model_spec={}, level_weights=bad)
