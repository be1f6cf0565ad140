"""Level sampling by the value's error (learner/level_sampling.py), against PLR's formula written
out, and the actors' draws that follow the weights (common/levels.py)."""

from __future__ import annotations

import numpy as np
import pytest

from common.levels import LevelSchedule
from learner import level_sampling as ls


def slow_weights(scores, last_seen, now, temperature, staleness, floor):
    n = len(scores)
    h = []
    for s in scores:  # tied levels: the mean over the ranks they span
        tied = [k for k in range(n) if scores[k] == s]
        first = 1 + sum(1 for o in scores if o > s)
        spans = [first + j for j in range(len(tied))]
        h.append(sum((1 / r) ** (1 / temperature) for r in spans) / len(spans))
    total = sum(h)
    ages = [now - c for c in last_seen]
    stale = [a / sum(ages) for a in ages] if sum(ages) > 0 else [1 / n] * n
    return [
        floor / n + (1 - floor) * ((1 - staleness) * h[i] / total + staleness * stale[i])
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "scores,last_seen,now",
    [
        ([0.3, 0.1, 0.2, 0.05], [10, 10, 10, 10], 10),
        ([0.3, 0.3, 0.2, 0.05], [9, 10, 4, 10], 10),  # a tie, stale levels
        ([1.0], [0], 0),
        ([0.5, 0.2], [0, 0], 0),
    ],
)
def test_the_draw_weights_are_plr_with_a_floor(scores, last_seen, now):
    got = ls.draw_weights(scores, last_seen, now, temperature=1.0, staleness=0.1, floor=0.5)
    want = slow_weights(scores, last_seen, now, 1.0, 0.1, 0.5)
    assert np.allclose(got, want)
    assert got.sum() == pytest.approx(1.0)
    assert got.min() >= 0.5 / len(scores) - 1e-12


def test_the_level_that_errs_most_is_drawn_most_and_none_starves():
    scores = ls.LevelScores(("1-1", "1-2", "1-3", "1-4"))
    assert scores.weights() == {}  # every level alike until each has a score
    scores.observe([64, 0, 64, 64], [0.1, 0.0, 0.5, 0.2])
    assert scores.weights() == {}  # 1-2 not yet played
    scores.observe([64, 64, 64, 64], [0.1, 0.05, 0.5, 0.2])
    w = scores.weights()
    assert max(w, key=w.get) == "1-3" and min(w, key=w.get) == "1-2"
    assert min(w.values()) >= ls.FLOOR / 4


def test_a_score_moves_by_the_rate_towards_each_update_that_held_the_level():
    scores = ls.LevelScores(("a", "b"), rate=0.5)
    scores.observe([1, 1], [1.0, 2.0])
    scores.observe([1, 0], [3.0, 100.0])  # b absent: its score stays
    assert scores.scores == [2.0, 2.0]
    assert scores.last_seen == [2, 1]


def test_a_schedule_draws_by_the_weights_it_was_given():
    schedule = LevelSchedule(("1-1", "1-2", "1-3"), seed=0)
    schedule.set_weights({"1-1": 0.0, "1-2": 3.0, "1-3": 1.0})
    draws = [schedule.next_level() for _ in range(4000)]
    assert "1-1" not in draws
    assert draws.count("1-2") / len(draws) == pytest.approx(0.75, abs=0.03)
    schedule.set_weights({})  # back to every level alike
    draws = [schedule.next_level() for _ in range(3000)]
    assert draws.count("1-1") / len(draws) == pytest.approx(1 / 3, abs=0.03)


def test_a_level_the_weights_leave_out_gets_their_mean():
    schedule = LevelSchedule(("1-1", "1-2", "1-3"), seed=0)
    schedule.set_weights({"1-1": 1.0, "1-2": 3.0, "9-9": 50.0})
    assert np.allclose(schedule.probabilities, [1 / 6, 3 / 6, 2 / 6])
