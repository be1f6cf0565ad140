"""The learner's per-level statistics of training episodes; the wire's level weights."""

from __future__ import annotations

import pytest

from common.levels import level_lengths
from learner.levels import LevelStats


def test_each_level_summarises_its_episodes_progress_and_flags():
    length = level_lengths()["1-1"]
    stats = LevelStats(("1-1", "1-2", "1-3"), window=4)
    for _ in range(4):
        stats.add("1-1", length, True)  # at the flag
        stats.add("1-2", length // 4, False)
    stats.add("1-3", length, False)  # 1-3 is measured shorter than 1-1: x past its end is 100%
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
