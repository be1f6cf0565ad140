"""The evaluation matrix's rows from episodes: progress, rates, where episodes end, the mean row,
and the Markdown that users paste."""

from __future__ import annotations

import pytest

from common.env import EpisodeSummary
from common.levels import level_lengths
from scripts.evaluate import matrix as em
from scripts.evaluate import tables

CORRIDOR = "tests.fakes:Corridor-v0"


def ep(max_x: int, outcome: str = "death", level: str = "1-1", ret: float = 0.0) -> EpisodeSummary:
    return EpisodeSummary(level, ret, 10, max_x, outcome == "flag", outcome)


def result(setting: str, level: str, **episodes: list[EpisodeSummary]) -> em.LevelResult:
    return em.LevelResult(em.Setting(setting, 0.0, 0), level, em.Played(episodes, None, []))


def test_end_points_are_the_most_common_outcome_and_x_bins_of_the_missed_flags():
    eps = [ep(300), ep(310), ep(900), *[ep(600, "no_progress")] * 3, ep(3161, "flag"), ep(5)]
    assert em.end_points(eps) == (
        em.EndPoint("no_progress", 576, 639, 3),
        em.EndPoint("death", 256, 319, 2),
        em.EndPoint("death", 0, 63, 1),  # ties: the smaller x first
    )
    assert em.end_points([ep(3161, "flag")]) == ()


def test_a_row_holds_progress_rates_and_max_x():
    length = level_lengths()["1-1"]
    eps = [ep(length // 2), ep(length // 4, "no_progress"), ep(length, "flag", ret=3000.0)]
    c = em.cell("plain", "1-1", "sampled", eps)
    assert c.episodes == 3 and c.best_max_x == length
    assert c.mean_progress == pytest.approx((0.5 + 0.25 + 1.0) / 3, abs=1e-3)
    assert c.median_progress == pytest.approx(0.5, abs=1e-3)
    assert c.mean_max_x == pytest.approx(sum(e.max_x for e in eps) / 3)
    assert (c.flag_rate, c.death_rate, c.cutoff_rate) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert c.mean_return == pytest.approx(1000.0)


def test_a_level_of_unknown_length_has_no_progress_even_at_its_flag():
    c = em.cell("plain", CORRIDOR, "greedy", [ep(8, "flag", CORRIDOR), ep(3, "death", CORRIDOR)])
    assert c.mean_progress is None and c.median_progress is None and c.flag_rate == 0.5


def test_the_mean_row_counts_each_level_alike():
    matrix = em.tabulate(
        [
            result("plain", "1-1", greedy=[ep(3161, "flag")] * 4),
            result("plain", "1-2", greedy=[ep(0)]),
        ]
    )
    mean = matrix.row("plain", "mean", "greedy")
    assert mean.flag_rate == 0.5 and mean.mean_progress == pytest.approx(0.5)
    assert mean.mean_max_x is None and mean.ends == ()
    single = em.tabulate([result("plain", "1-1", greedy=[ep(100)])])
    assert single.means == ()  # a set of one: its row is the mean


def test_markdown_has_a_row_per_level_a_mean_row_and_the_settings_side_by_side():
    matrix = em.tabulate(
        [
            result("plain", "1-1", greedy=[ep(1580)], sampled=[ep(790)]),
            result("plain", CORRIDOR, greedy=[ep(4, "death", CORRIDOR)], sampled=[ep(2)]),
            result("perturbed", "1-1", greedy=[ep(395)], sampled=[ep(790)]),
            result("perturbed", CORRIDOR, greedy=[ep(4, "death", CORRIDOR)], sampled=[ep(2)]),
        ]
    )
    md = tables.markdown(matrix, {"perturbed": "sticky actions 0.25, no-op starts 0..30"})
    assert md.count("### greedy, plain") == 1
    assert "### sampled, perturbed (sticky actions 0.25, no-op starts 0..30)" in md
    progress = 1580 / level_lengths()["1-1"]
    assert f"| 1-1 | 1 | {progress:.1%} | {progress:.1%} | 1580 | 1580 | 0.0% | 100.0% |" in md
    assert f"| {CORRIDOR} | 1 | - | - | 4 | 4 |" in md
    assert f"| **mean** | 1 | {progress:.1%} | {progress:.1%} | - | - |" in md  # 1-1's alone
    change = 100 * (395 - 1580) / level_lengths()["1-1"]
    assert (
        f"| 1-1 | greedy | {progress:.1%} | {395 / level_lengths()['1-1']:.1%} | {change:+.1f} pp |"
        in md
    )
    assert f"Progress is unknown (-) for {CORRIDOR}" in md
    for block in md.split("\n\n"):  # clean tables: every row has its header's columns
        if block.startswith("|"):
            assert len({line.count("|") for line in block.splitlines()}) == 1, block
