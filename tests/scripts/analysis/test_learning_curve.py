"""Learning-curve windows from RUN/episodes.jsonl, and make report drawing them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.rundir import RunDir
from scripts import report
from scripts.analysis import learning_curve


def write_run(run: Path, start: float, episodes: list[tuple[float, int, int, bool]]) -> None:
    """episodes: (seconds after start, env frames, max x, flag)."""
    run.mkdir(parents=True)
    lines = [json.dumps({"event": "start", "time": start, "env_frames": 0})]
    for t, frames, x, flag in episodes:
        row = {"time": start + t, "env_frames": frames, "actor_id": 0, "level": "1-1"}
        row |= {"max_x": x, "flag": flag, "return": 1.0, "length": 10, "outcome": "death"}
        lines.append(json.dumps(row))
    lines.append("not json")
    RunDir(run).episodes.write_text("\n".join(lines) + "\n")


def test_windows_hold_the_episodes_that_ended_in_them(tmp_path):
    write_run(
        tmp_path / "r",
        1000.0,
        [
            (10, 100, 300, False),
            (119, 900, 500, False),
            (121, 1000, 700, True),
            (250, 2000, 900, False),
        ],
    )
    eps = learning_curve.read_episodes(RunDir(tmp_path / "r").episodes)
    assert eps.malformed == 1
    ws = learning_curve.windows(eps, 120.0)
    assert [w.end_s for w in ws] == [120.0, 240.0]  # the partial third window is left out
    assert ws[0].episodes == 2 and ws[0].mean_max_x == pytest.approx(400.0)
    assert ws[0].env_frames == 900 and ws[0].flag_rate == 0.0
    assert ws[1].episodes == 1 and ws[1].mean_max_x == 700.0 and ws[1].flag_rate == 1.0
    empty = learning_curve.windows(eps, 60.0)[3]  # (180, 240]: no episode ended in it
    assert empty.episodes == 0 and empty.mean_max_x is None and empty.flag_rate is None


def test_a_bad_window_is_refused(tmp_path):
    write_run(tmp_path / "r", 0.0, [(1, 1, 1, False)])
    eps = learning_curve.read_episodes(RunDir(tmp_path / "r").episodes)
    with pytest.raises(ValueError, match="window_s"):
        learning_curve.windows(eps, 0)


def test_report_draws_the_curve_of_the_run_and_those_compared(tmp_path):
    for name in ("a", "b"):
        write_run(
            tmp_path / name, 0.0, [(60 * k, 1000 * k, 300 + 50 * k, False) for k in range(1, 8)]
        )
    row = {"time": 1.0, "env_frames": 10, "agent_steps": 3, "updates": 1, "mean_max_x": 400.0}
    RunDir(tmp_path / "a").metrics.write_text(json.dumps(row) + "\n")
    assert report.main(["--run-dir", str(tmp_path / "a"), "--compare", str(tmp_path / "b")]) == 0
    text = (tmp_path / "a" / "report" / "REPORT.md").read_text()
    assert "![Learning curve" in text and "## a" in text and "## b" in text
    assert (tmp_path / "a" / "report" / "curve.png").stat().st_size > 0
