"""scripts/curve_plots.py and the tables of scripts/learning_curve.py beside their references:
runs named by seed or --label, Sample Factory's curve and the random floors each named with the
env setting it was measured on, the floors of the runs' own setting, level by level."""

from __future__ import annotations

import pytest

from scripts import learning_curve
from tests.scripts.test_milestones import ep, start, write_lines


def test_runs_are_named_by_their_seeds_or_by_label(tmp_path, capsys):
    for name, seed in (("nick", 0), ("other", 1), ("again", 1)):
        write_lines(tmp_path / name, [start(0.0), ep(30, 1_000, False)], {"seed": seed})
    argv = [str(tmp_path / "nick"), str(tmp_path / "other"), "--window-frames", "1000"]
    assert learning_curve.main(argv) == 0
    assert "| env frames | seed 0 | seed 1 | mean of the runs |" in capsys.readouterr().out
    assert learning_curve.main([*argv, "--label", "lr 1e-3", "--label", "lr 5e-4"]) == 0
    assert "| env frames | lr 1e-3 | lr 5e-4 |" in capsys.readouterr().out
    # two runs of one seed (two settings): their names
    assert learning_curve.main([str(tmp_path / "other"), str(tmp_path / "again"),
                                "--window-frames", "1000"]) == 0  # fmt: skip
    assert "| env frames | other | again |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        learning_curve.main([*argv, "--label", "only one"])
    assert exc.value.code == 2
    assert "--label must be given once per run: 2 runs, 1 labels" in capsys.readouterr().err


def legends(monkeypatch) -> list[list[str]]:
    """The legend texts of each figure drawn from now on, axes by axes."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep each figure to read its legends
    return figures


def texts(figure) -> list[str]:
    """The entries of the figure's legends: its own, then its axes'."""
    legends = [*figure.legends, *(ax.get_legend() for ax in figure.axes)]
    return [t.get_text() for legend in legends if legend for t in legend.get_texts()]


def test_references_are_named_with_the_setting_they_were_measured_on(
    tmp_path, floors, monkeypatch, capsys
):
    perturbed = {"seed": 0, "sticky_actions": 0.25, "noop_max": 30}
    for name, config in (
        ("p", perturbed),
        ("u", {"seed": 1, "sticky_actions": 0.0, "noop_max": 0}),
    ):
        write_lines(
            tmp_path / name, [start(0.0), ep(30, 200_000, False), ep(60, 400_000, True)], config
        )
    figures = legends(monkeypatch)
    png = tmp_path / "curve.png"
    assert (
        learning_curve.main([str(tmp_path / "p"), "--window-frames", "200000", "--plot", str(png)])
        == 0
    )
    out = capsys.readouterr().out
    assert "| env frames | seed 0 | Sample Factory APPO, unperturbed (1-1) |" in out
    assert "| 200,000 | 400 / 0% | 857 / 1% |" in out
    assert "random policy, perturbed on 1-1: mean max x 600, progress 19.0%, flags 0%" in out
    assert "unperturbed on 1-1" not in out  # the run trained perturbed: its floor alone
    assert texts(figures[-1]) == [
        "seed 0",
        "Sample Factory APPO, unperturbed",
        "random policy, perturbed",
    ]
    assert (
        figures[-1]
        ._suptitle.get_text()
        .startswith("1-1: training episodes from the level's start, perturbed (")
    )
    # the two settings side by side: both floors, each named
    argv = [
        str(tmp_path / "p"),
        str(tmp_path / "u"),
        "--window-frames",
        "200000",
        "--plot",
        str(png),
    ]
    assert learning_curve.main(argv) == 0
    assert set(texts(figures[-1])) >= {"random policy, unperturbed", "random policy, perturbed"}
    assert figures[-1]._suptitle is None
    # windows of wall time (what make report draws)
    assert learning_curve.main([str(tmp_path / "u"), "--window-s", "30", "--plot", str(png)]) == 0
    assert "Sample Factory APPO, unperturbed" in texts(figures[-1])
    assert "random policy, unperturbed" in texts(figures[-1])


def test_per_level_tables_and_plots_show_each_levels_floor(tmp_path, floors, monkeypatch, capsys):
    rows = [start(0.0), ep(10, 1_000, False, "1-1"), ep(20, 2_000, False, "1-2")]
    write_lines(tmp_path / "w", rows, {"seed": 0, "sticky_actions": 0.25, "noop_max": 30})
    assert learning_curve.main([str(tmp_path / "w"), "--window-frames", "2000"]) == 0
    # 600 / 3161 and 400 / 3161, and their mean
    assert "| random policy, perturbed | 19% | 13% | 16% |" in capsys.readouterr().out
    figures = legends(monkeypatch)
    png = tmp_path / "levels.png"
    assert learning_curve.main([str(tmp_path / "w"), "--window-s", "20", "--plot", str(png)]) == 0
    assert "| random policy, perturbed | | 19.0% | 12.7% | 15.8% |" in capsys.readouterr().out
    assert "random policy, perturbed" in texts(figures[-1])
