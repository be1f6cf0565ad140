"""Learning-curve windows from RUN/episodes.jsonl, and make report drawing them."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest

from common.rundir import RunDir
from common.wire import EpisodeStats
from learner.telemetry import Telemetry, Totals
from scripts import episode_windows, learning_curve, report


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


def test_a_resumed_run_goes_on_from_where_it_stopped(tmp_path):
    """A run stopped and resumed on its run dir a day later: the time between its last episode
    and the next start line is not the run's, so the resumed life's episodes land in the windows
    right after the first life's, and per level as well."""
    run = tmp_path / "r"
    write_run(run, 1000.0, [(10, 100, 300, False), (110, 900, 500, False)])
    later = 1000.0 + 86_400.0
    lines = [json.dumps({"event": "start", "time": later, "env_frames": 900})]
    for t, x, level in ((5.0, 700, "1-1"), (60.0, 800, "1-2"), (130.0, 900, "1-1")):
        row = {"time": later + t, "env_frames": 1000 + int(t), "actor_id": 0, "level": level}
        row |= {"max_x": x, "flag": False, "return": 1.0, "length": 10, "outcome": "death"}
        lines.append(json.dumps(row))
    with RunDir(run).episodes.open("a") as f:
        f.write("\n".join(lines) + "\n")
    eps = learning_curve.read_episodes(RunDir(run).episodes)
    assert eps.run_s.tolist() == [10.0, 110.0, 115.0, 170.0, 240.0]
    ws = learning_curve.windows(eps, 120.0)
    assert [(w.end_s, w.episodes) for w in ws] == [(120.0, 3), (240.0, 2)]
    assert ws[0].mean_max_x == pytest.approx(500.0)
    only_1_1 = learning_curve.read_episodes(RunDir(run).episodes, level="1-1")
    assert only_1_1.run_s.tolist() == [10.0, 110.0, 115.0, 240.0]  # 1-2's arrival still counts
    by_level = episode_windows.windows_by_level(eps, 120.0)
    assert [w.episodes for w in by_level["1-2"]] == [0, 1]


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


# ---- per level -----------------------------------------------------------------------------


def write_levels(run: Path, episodes: list[tuple[float, str, int, bool, float | None]]) -> None:
    """episodes: (seconds after start, level, max x, flag, logged progress or None for a row
    from before progress was logged); env frames 100 per second."""
    run.mkdir(parents=True)
    lines = [json.dumps({"event": "start", "time": 0.0, "env_frames": 0})]
    for t, level, x, flag, progress in episodes:
        row = {"time": t, "env_frames": int(100 * t), "actor_id": 0, "level": level}
        row |= {"max_x": x, "flag": flag, "return": 1.0, "length": 10, "outcome": "death"}
        if progress is not None:
            row["progress"] = progress
        lines.append(json.dumps(row))
    RunDir(run).episodes.write_text("\n".join(lines) + "\n")


def test_each_level_gets_windows_over_the_whole_run_and_the_mean_weighs_levels_alike(tmp_path):
    write_levels(
        tmp_path / "r",
        [
            (10, "1-1", 316, False, 0.1),
            (20, "1-1", 316, False, 0.1),
            (30, "1-1", 316, False, 0.1),
            (40, "1-2", 1580, False, 0.5),
            (70, "1-2", 3161, True, 1.0),  # second window: 1-2 only
        ],
    )
    eps = learning_curve.read_episodes(RunDir(tmp_path / "r").episodes)
    by_level = learning_curve.windows_by_level(eps, 60.0)
    assert list(by_level) == ["1-1", "1-2", learning_curve.MEAN]
    assert [w.end_s for w in by_level["1-1"]] == [60.0]  # the run's span, not the level's
    one, two, mean = (by_level[k][0] for k in by_level)
    assert one.episodes == 3 and one.mean_progress == pytest.approx(0.1)
    assert two.episodes == 1 and two.mean_progress == pytest.approx(0.5) and two.flag_rate == 0
    # each level alike: (0.1 + 0.5) / 2, not the episodes' 0.2
    assert mean.mean_progress == pytest.approx(0.3) and mean.episodes == 4
    assert mean.env_frames == 4000 and mean.median_max_x is None
    by_level = learning_curve.windows_by_level(eps, 35.0)
    late = [by_level[k][1] for k in by_level]  # (35, 70]: 1-2 alone, a flag
    assert late[0].episodes == 0 and late[0].mean_progress is None
    assert late[2].mean_progress == pytest.approx(0.75) and late[2].flag_rate == 0.5


def test_progress_of_a_log_without_it_comes_from_max_x_and_the_level_length(tmp_path):
    write_levels(
        tmp_path / "r",
        [
            (10, "1-1", 1580, False, None),  # 1-1 is 3161 long: 0.4998
            (20, "1-1", 900, True, None),  # the flag: 1 whatever its max x
            (30, "tests.fakes:Corridor-v0", 1234, False, None),  # unknown length
        ],
    )
    eps = learning_curve.read_episodes(RunDir(tmp_path / "r").episodes)
    assert eps.progress[:2] == pytest.approx([1580 / 3161, 1.0]) and np.isnan(eps.progress[2])
    by_level = learning_curve.windows_by_level(eps, 30.0)
    corridor = by_level["tests.fakes:Corridor-v0"][0]
    assert corridor.mean_progress is None and corridor.mean_max_x == 1234.0
    # the mean leaves the level of unknown length out of progress, not out of the flag rate
    assert by_level[learning_curve.MEAN][0].mean_progress == pytest.approx((1580 / 3161 + 1) / 2)
    assert by_level[learning_curve.MEAN][0].flag_rate == pytest.approx(0.25)
    text = learning_curve.level_tables("r", by_level)
    assert "| minute | env frames | 1-1 | tests.fakes:Corridor-v0 | mean |" in text
    assert "| 0.5 | 3,000 | 75.0% (2) | x 1,234 (1) | 75.0% (3) |" in text  # progress
    assert "| 0.5 | 3,000 | 50.0% (2) | 0.0% (1) | 25.0% (3) |" in text  # flag rate


def test_level_rows_hold_the_newest_episodes_the_best_window_and_the_furthest_x(tmp_path):
    eps = [(10 * k, "1-1", 316 * k, False, 0.1 * k) for k in range(1, 7)]
    write_levels(tmp_path / "r", [*eps, (65, "1-1", 100, False, 0.0)])
    rows = episode_windows.level_rows(
        learning_curve.read_episodes(RunDir(tmp_path / "r").episodes), 30.0, last=2
    )
    (row,) = rows
    assert row.level == "1-1" and row.episodes == 7 and row.last == 2
    assert row.progress == pytest.approx(0.3) and row.flag_rate == 0.0  # (0.6 + 0.0) / 2
    assert row.best_progress == pytest.approx(0.5)  # (30, 60]: 0.4, 0.5, 0.6
    assert row.furthest_x == 316 * 6


def test_the_cli_prints_per_level_tables_for_a_run_of_several_levels(tmp_path, capsys):
    write_levels(tmp_path / "world", [(10, "1-1", 316, False, 0.1), (20, "1-2", 316, False, 0.1)])
    write_run(tmp_path / "one", 0.0, [(10, 1000, 300, False), (20, 2000, 400, False)])
    png = tmp_path / "levels.png"
    argv = [str(tmp_path / "world"), str(tmp_path / "one"), "--window-s", "20", "--plot", str(png)]
    assert learning_curve.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("progress by level") == 1 and out.count("flag rate by level") == 1
    assert "| 0.333333 | 2,000 | 10.0% (1) | 10.0% (1) | 10.0% (2) |" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert learning_curve.main([str(tmp_path / "one"), "--window-s", "20", "--by-level"]) == 0
    assert "## " + str(tmp_path / "one") + ": progress by level" in capsys.readouterr().out


def test_a_single_level_run_prints_as_before(tmp_path, capsys):
    write_run(tmp_path / "r", 0.0, [(10, 1000, 300, False), (130, 2000, 700, True)])
    assert learning_curve.main([str(tmp_path / "r")]) == 0
    assert capsys.readouterr().out == (
        f"## {tmp_path / 'r'}\n"
        "| minute | env frames | episodes | mean max x | median max x | flag rate |\n"
        "|---|---|---|---|---|---|\n"
        "| 2 | 1,000 | 1 | 300 | 300 | 0.0% |\n"
        "(1 malformed lines skipped)\n\n"
    )


def test_frame_windows_bin_episodes_by_the_learners_frames_and_average_the_seeds(tmp_path, capsys):
    write_run(tmp_path / "a", 0.0, [(1, 150_000, 300, False), (2, 200_000, 500, True),
                                    (3, 390_000, 900, True), (4, 450_000, 2_000, True)])  # fmt: skip
    write_run(tmp_path / "b", 0.0, [(1, 10_000, 700, False), (2, 300_000, 1_100, False),
                                    (3, 410_000, 1_500, False)])  # fmt: skip
    eps = learning_curve.read_episodes(RunDir(tmp_path / "a").episodes)
    ws = episode_windows.frame_windows(eps, 200_000)
    assert [(w.end_frames, w.episodes) for w in ws] == [(200_000, 2), (400_000, 1)]
    assert ws[0].mean_max_x == 400.0 and ws[0].flag_rate == 0.5  # 450 k is past the last full bin
    with pytest.raises(ValueError, match="window_frames"):
        episode_windows.frame_windows(eps, 0)
    args = [str(tmp_path / "a"), str(tmp_path / "b"), "--window-frames", "200000"]
    assert learning_curve.main(args) == 0
    out = capsys.readouterr().out
    assert "| 200,000 | 400 / 50% | 700 / 0% | 550 / 25% | 857 / 1% |" in out
    assert "| 400,000 | 900 / 100% | 1,100 / 0% | 1,000 / 50% | 1,193 / 2% |" in out


def test_a_run_of_several_levels_gets_its_levels_per_window_of_frames(tmp_path, capsys):
    """env frames are 100 a second: 1-1 at 1 k and 2 k frames, 1-2 at 3 k (first window) and
    5 k and 6 k (second); each level spans the run's windows, the mean weighs levels alike."""
    one = [(10, "1-1", 316, False, 0.1), (20, "1-1", 948, False, 0.3)]
    two = [(30, "1-2", 1580, False, 0.5), (50, "1-2", 3161, True, 1.0), (60, "1-2", 0, False, 0.0)]
    write_levels(tmp_path / "world", one + two)
    eps = learning_curve.read_episodes(RunDir(tmp_path / "world").episodes)
    by_level = episode_windows.frame_windows_by_level(eps, 3_000)
    assert list(by_level) == ["1-1", "1-2", learning_curve.MEAN]
    assert [w.end_frames for w in by_level["1-1"]] == [3_000, 6_000]  # the run's, not the level's
    one, two, mean = (by_level[k][0] for k in by_level)
    assert one.episodes == 2 and one.mean_progress == pytest.approx(0.2)
    assert two.episodes == 1 and two.mean_progress == pytest.approx(0.5)
    assert mean.mean_progress == pytest.approx(0.35) and mean.episodes == 3  # not 0.3
    late = [by_level[k][1] for k in by_level]
    assert late[0].episodes == 0 and late[0].mean_progress is None
    assert late[2].mean_progress == pytest.approx(0.5) and late[2].flag_rate == 0.5
    args = [str(tmp_path / "world"), "--window-frames", "3000", "--no-reference"]
    assert learning_curve.main(args) == 0
    out = capsys.readouterr().out
    assert "| env frames | 1-1 | 1-2 | mean |" in out
    assert "| 3,000 | 20% / 0% (2) | 50% / 0% (1) | 35% / 0% (3) |" in out
    assert "| 6,000 | - | 50% / 50% (2) | 50% / 50% (2) |" in out
    write_run(tmp_path / "one", 0.0, [(1, 1_000, 300, False)])
    assert learning_curve.main([str(tmp_path / "one"), "--window-frames", "1000"]) == 0
    assert "by level" not in capsys.readouterr().out  # one level: the table of before
    assert (
        learning_curve.main([str(tmp_path / "one"), "--window-frames", "1000", "--by-level"]) == 0
    )
    assert "| 1,000 | 9% / 0% (1) |" in capsys.readouterr().out  # 300 of 1-1's 3,161


def test_a_run_stopped_at_its_frames_keeps_its_last_window(tmp_path, capsys):
    """make train FRAMES=400000: the learner stops at 400,384 frames, its last episode ended at
    399,104; the window to 400 k is full by the learner's count in metrics.jsonl."""
    run = tmp_path / "s2"
    write_run(run, 0.0, [(1, 150_000, 300, False), (2, 399_104, 900, True)])
    eps = learning_curve.read_episodes(RunDir(run).episodes)
    assert [w.end_frames for w in episode_windows.frame_windows(eps, 200_000)] == [200_000]
    rows = [{"time": 1.0, "env_frames": 200_448}, {"time": 2.0, "env_frames": 400_384}]
    RunDir(run).metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    assert episode_windows.run_env_frames(RunDir(run).metrics) == 400_384
    assert episode_windows.run_env_frames(tmp_path / "none.jsonl") == 0
    assert learning_curve.main([str(run), "--window-frames", "200000", "--no-reference"]) == 0
    assert "| 400,000 | 900 / 100% |" in capsys.readouterr().out


def test_frame_curves_are_drawn_with_their_mean_and_the_reference(tmp_path, monkeypatch):
    write_run(tmp_path / "a", 0.0, [(1, 150_000, 300, False), (2, 390_000, 900, True),
                                    (3, 420_000, 1_000, True)])  # fmt: skip
    write_run(tmp_path / "b", 0.0, [(1, 100_000, 700, False), (2, 300_000, 1_100, False)])
    drawn: dict[str, list] = {}
    real = learning_curve.plot_frames

    def spy(runs, path, reference=True):  # the windows drawn, then the real drawing
        drawn.update(runs)
        real(runs, path, reference)

    monkeypatch.setattr(learning_curve, "plot_frames", spy)
    png = tmp_path / "curve.png"
    argv = [str(tmp_path / "a"), str(tmp_path / "b"), "--window-frames", "200000"]
    assert learning_curve.main([*argv, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert [w.mean_max_x for w in drawn["a"]] == [300.0, 900.0]
    assert [w.mean_max_x for w in drawn["b"]] == [700.0]


def test_frontier_start_episodes_are_logged_with_their_start_and_left_off_every_curve(tmp_path):
    """The learner logs each episode's start_x (-1: the level's start); the curves read only the
    episodes from the level's start, whatever the frontier starts reached."""
    run = RunDir(tmp_path / "r")
    run.root.mkdir()
    run.episodes.write_text(json.dumps({"event": "start", "time": 1000.0, "env_frames": 0}) + "\n")

    def episode(max_x: int, start_x: int = -1) -> EpisodeStats:
        flag = max_x >= 3160
        outcome = "flag" if flag else "death"
        return EpisodeStats(level="1-1", episode_return=1.0, length=9, max_x=max_x, flag=flag,
                            outcome=outcome, start_x=start_x)  # fmt: skip

    logged = [
        (1010.0, 0, episode(300)),
        (1020.0, 0, episode(3160, 2900)),
        (1030.0, 1, episode(500)),
    ]
    fake = types.SimpleNamespace(
        ingest=types.SimpleNamespace(drain_episodes=lambda: logged), run=run
    )
    Telemetry._log_episodes(fake, Totals(1000, 250))
    rows = [json.loads(line) for line in run.episodes.read_text().splitlines()[1:]]
    assert [r["start_x"] for r in rows] == [-1, 2900, -1]
    eps = learning_curve.read_episodes(run.episodes)
    assert eps.max_x.tolist() == [300, 500] and not eps.flag.any() and eps.malformed == 0
    first, second = learning_curve.windows(eps, 15.0)  # (0, 15] and (15, 30] seconds
    assert (first.episodes, first.mean_max_x) == (1, 300)
    assert (second.episodes, second.mean_max_x, second.flag_rate) == (1, 500, 0.0)
