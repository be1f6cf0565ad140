"""The learner's per-level statistics of training episodes."""

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
    assert s["1-1"][:4] == (4, 1.0, 1.0, 4)
    assert s["1-2"].progress == pytest.approx((length // 4) / level_lengths()["1-2"])
    assert s["1-3"].progress == 1.0 and s["1-3"].flag_rate == 0.0
    stats.add("4-1", 100, False)  # outside the set: ignored
    assert set(stats.summary()) == {"1-1", "1-2", "1-3"}


def test_the_window_keeps_the_newest_episodes():
    length = level_lengths()["1-1"]
    stats = LevelStats(("1-1",), window=3)
    for x in (0, 0, 0, length, length, length):
        stats.add("1-1", x, x == length)
    assert stats.summary()["1-1"][:4] == (6, 1.0, 1.0, 3)


def test_a_levels_end_x_is_where_most_of_its_flagless_episodes_end():
    stats = LevelStats(("1-2",), window=4)
    assert stats.summary()["1-2"].end_x is None
    for x, flag in ((3000, True), (975, False), (990, False), (400, False)):
        stats.add("1-2", x, flag)
    assert stats.summary()["1-2"].end_x == 982.5  # the ledge; the flag is no end
    for x in (400, 410, 420):  # the window of flagless episodes keeps the newest 4
        stats.add("1-2", x, False)
    assert stats.summary()["1-2"].end_x == 405  # 400, 400, 410, 420


def play(stats: LevelStats, flags: str, level: str = "1-1") -> None:
    """Episodes on `level`: "F" reaches the flag, "." dies a quarter of the way."""
    length = level_lengths()[level]
    for f in flags:
        stats.add(level, length if f == "F" else length // 4, f == "F")


def test_a_collapse_is_the_fall_of_the_window_from_its_best_full_window():
    stats = LevelStats(("1-1", "1-2"), window=4)
    play(stats, "FFF")  # three lucky first episodes: the window is not full, no best yet
    s = stats.summary()["1-1"]
    assert s.flag_rate == 1.0 and s.best_flag_rate is None and s.flag_rate_fall is None
    play(stats, ".")  # full: 3 of 4
    s = stats.summary()["1-1"]
    assert (s.best_flag_rate, s.flag_rate_fall) == (0.75, 0.0)
    play(stats, "FFF")  # FF.F, F.FF, .FFF: 3 of 4 each
    assert stats.summary()["1-1"].best_flag_rate == 0.75
    play(stats, "F")  # FFFF: the best rises
    assert stats.summary()["1-1"].best_flag_rate == 1.0
    play(stats, "...")  # F...: a collapse of 75 points
    s = stats.summary()["1-1"]
    assert (s.flag_rate, s.best_flag_rate, s.flag_rate_fall) == (0.25, 1.0, 0.75)
    quarter = (level_lengths()["1-1"] // 4) / level_lengths()["1-1"]
    assert s.best_progress == 1.0
    assert s.progress_fall == pytest.approx(1.0 - (1 + 3 * quarter) / 4)
    assert stats.summary()["1-2"].best_flag_rate is None  # not played


def test_the_bests_survive_a_restart_and_the_fall_waits_for_a_full_window():
    before = LevelStats(("1-1", "1-2"), window=4)
    play(before, "FFFF")
    bests = before.bests()
    assert bests == {"1-1": {"progress": 1.0, "flag_rate": 1.0}}  # 1-2 has none
    after = LevelStats(("1-1", "1-3"), window=4)  # a resumed run; 1-2 left the set
    after.restore(bests | {"1-2": {"flag_rate": 0.5}})
    play(after, "..")
    s = after.summary()["1-1"]
    assert (s.best_flag_rate, s.best_progress) == (1.0, 1.0)
    assert s.flag_rate_fall is None  # two episodes since the restart: no figure yet
    play(after, "..")
    assert after.summary()["1-1"].flag_rate_fall == 1.0
    assert after.bests() == {"1-1": {"progress": 1.0, "flag_rate": 1.0}}
