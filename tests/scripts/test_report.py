"""scripts/report.py: plots and REPORT.md from a metrics log; refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common.rundir import RunDir
from scripts import report
from scripts.checkout import ROOT

T0 = 1_700_000_000.0


def write_log(run_dir: Path, rows: int = 36) -> None:
    """Rows shaped like learner/telemetry.py's, one every 100 s, plus one torn line."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(rows):
        no_episodes = i < 2  # the learner logs null episode figures before any episode ends
        lines.append(
            json.dumps(
                {
                    "time": T0 + 100.0 * i,
                    "updates": 10 * (i + 1),
                    "env_frames": 40_960 * (i + 1),
                    "agent_steps": 10_240 * (i + 1),
                    "agent_steps_per_s": 100.0 + i,
                    "mean_return": None if no_episodes else 200.0 + 10 * i,
                    "mean_max_x": None if no_episodes else 300.0 + 20 * i,
                    "flag_rate": None if no_episodes else (0.25 if i == 30 else 0.0),
                    "entropy": 1.9 - 0.02 * i,
                    "grad_norm": 3.0,
                    "total_loss": 5.0,
                    "pg_loss": 1.0,
                    "baseline_loss": 8.0,
                }
            )
        )
        if i == 10:
            lines.append('{"time": 17000, "env_fra')  # a line cut short by a crash
    RunDir(run_dir).metrics.write_text("\n".join(lines) + "\n")


def test_parse_skips_and_counts_malformed_lines():
    log = report.parse_metrics(['{"time": 1, "env_frames": 2}', "{not json", "[1]", '{"time": 3}'])
    assert len(log.rows) == 1 and log.malformed == 3


def test_report_writes_plots_and_a_summary_with_the_numbers(tmp_path, capsys):
    run = tmp_path / "run"
    write_log(run)
    assert report.main(["--run-dir", str(run)]) == 0
    out = run / "report"
    for figure in report.FIGURES:
        png = out / f"{figure.name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert f"]({figure.name}.png)" in (out / "REPORT.md").read_text()
    md = (out / "REPORT.md").read_text()
    assert str(run) in md
    assert "0:58:20" in md  # 35 intervals of 100 s
    assert "1.47M" in md  # final env frames 40,960 * 36 = 1,474,560
    assert "1,000.0 / 1,000.0" in md  # mean max x: final / peak (300 + 20 * 35)
    assert "550.0 / 550.0" in md  # mean return: final / peak
    assert "0.0% / 25.0%" in md  # flag rate: final / peak
    assert "1 malformed" in md
    out = capsys.readouterr().out
    assert "36 rows" in out and "flag rate 0.0%" in out


def test_a_resumed_run_reports_its_own_time_and_throughput(tmp_path):
    """The learner started at T0, stopped after its row at T0 + 1,000 s and resumed a day later:
    the duration, env frames/s and the hours axis leave the day out."""
    run = tmp_path / "run"
    write_log(run, rows=11)  # rows at T0 .. T0 + 1,000 s, 450,560 env frames at the last
    later = T0 + 86_400.0
    rows = [
        {"time": later + 100.0 * i, "updates": 200 + i, "env_frames": 450_560 + 40_960 * i}
        for i in range(1, 11)
    ]  # T0 + 1 day + 100 .. 1,000 s: 2,000 s of the run's own time in all
    with RunDir(run).metrics.open("a") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    starts = [{"event": "start", "time": t, "env_frames": 0} for t in (T0, later)]
    RunDir(run).episodes.write_text("\n".join(json.dumps(s) for s in starts) + "\n")
    summary, _ = report.report(run, run / "report")
    assert summary["duration_s"] == pytest.approx(2_000.0)
    assert summary["env_frames_per_s"] == pytest.approx((860_160 - 40_960) / 2_000.0)
    assert summary["lives"] == 2
    md = (run / "report" / "REPORT.md").read_text()
    assert "0:33:20 (h:mm:ss), the learner's own time over 2 starts" in md
    RunDir(run).episodes.unlink()  # without start lines the time is wall time, as before
    assert report.report(run, run / "report")[0]["duration_s"] == pytest.approx(87_400.0)


def test_report_shows_each_policy_of_the_last_evaluation(tmp_path):
    run = tmp_path / "run"
    write_log(run, rows=3)
    RunDir(run).eval.mkdir()
    figures = {"episodes": 5, "mean_max_x": 1234.5, "median_max_x": 1100.0, "mean_return": 900.0}
    evaluation = {
        "overall": {"policy_version": 7, "level": "1-2", "policies": ["greedy", "sampled"]},
        "policies": {
            "greedy": figures | {"flag_rate": 0.0},
            "sampled": figures | {"flag_rate": 0.4, "median_max_x": 3161.0},
        },
        "video": {"path": "x", "policy": "sampled", "episode": 3},
    }
    (RunDir(run).eval / "summary.json").write_text(json.dumps(evaluation))
    assert report.main(["--run-dir", str(run)]) == 0
    md = (run / "report/REPORT.md").read_text()
    assert "Policy v7 on 1-2 ([best episode](../eval/best.mp4): sampled 3)" in md
    assert "| - | greedy | 5 | 1,234.5 | 1,100.0 | 0.0% | 900.0 |" in md
    assert "| - | sampled | 5 | 1,234.5 | 3,161.0 | 40.0% | 900.0 |" in md
    # a report written elsewhere links the same video from there
    assert report.main(["--run-dir", str(run), "--out", str(tmp_path / "a/b")]) == 0
    md = (tmp_path / "a/b/REPORT.md").read_text()
    assert "[best episode](../../run/eval/best.mp4)" in md


def test_report_reads_a_summary_from_before_per_policy_figures(tmp_path):
    run = tmp_path / "run"
    write_log(run, rows=3)
    RunDir(run).eval.mkdir()
    evaluation = {"overall": {"policy_version": 7, "level": "1-2", "episodes": 5}, "video": {}}
    evaluation["overall"] |= {"flag_rate": 0.4, "mean_max_x": 1234.5, "mean_return": 900.0}
    evaluation["overall"] |= {"greedy": True}
    (RunDir(run).eval / "summary.json").write_text(json.dumps(evaluation))
    assert report.main(["--run-dir", str(run)]) == 0
    md = (run / "report/REPORT.md").read_text()
    assert "Policy v7 on 1-2." in md and "| - | greedy | 5 | 1,234.5 | – | 40.0% | 900.0 |" in md


def test_report_shows_the_best_policy_kept_and_the_perturbed_figures_first(tmp_path):
    from tests.scripts.test_evaluate import keep_best

    run = tmp_path / "run"
    write_log(run, rows=3)
    assert report.main(["--run-dir", str(run)]) == 0
    md = (run / "report/REPORT.md").read_text()
    assert f"## Best policy kept\n\nNone yet (`{RunDir(run).best_policy}`)" in md
    best = keep_best(run, policy_version=9, score=0.875)
    figures = {"episodes": 5, "mean_max_x": 1000.0, "median_max_x": 900.0, "mean_return": 1.0}
    evaluation = {
        "overall": {"policy_version": 9, "level": "1-1", "checkpoint": str(best)},
        "pooled": {
            "perturbed": {"sampled": figures | {"flag_rate": 0.2}},
            "plain": {"sampled": figures | {"flag_rate": 0.6}},
        },
    }
    evaluation["overall"] |= {"chosen": "the best policy the eval actor kept"}
    (RunDir(run).eval / "summary.json").write_text(json.dumps(evaluation))
    assert report.main(["--run-dir", str(run)]) == 0
    md = (run / "report/REPORT.md").read_text()
    assert f"`{best}`: policy v9 at 4,608 env frames, score 0.875 (the mean over levels" in md
    assert "of 10 fresh sampled episodes per level, perturbed" in md
    assert "| 1-1 | 87.5% | 0.0% |" in md
    assert f"`make eval` played `{best}`, the best policy the eval actor kept." in md
    perturbed = "| perturbed | sampled | 5 | 1,000.0 | 900.0 | 20.0% | 1.0 |"
    plain = "| plain | sampled | 5 | 1,000.0 | 900.0 | 60.0% | 1.0 |"
    assert md.index(perturbed) < md.index(plain)


def test_refuses_a_missing_or_empty_log(tmp_path, capsys):
    assert report.main(["--run-dir", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert report.main(["--run-dir", str(tmp_path)]) == 2
    assert "metrics.jsonl does not exist" in capsys.readouterr().err
    RunDir(tmp_path).metrics.write_text("garbage\n\n")
    assert report.main(["--run-dir", str(tmp_path)]) == 2
    assert "no metric rows (1 malformed" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


@pytest.mark.slow
def test_make_report(tmp_path):
    write_log(tmp_path / "run", rows=5)
    cmd = ["make", "--no-print-directory", "-o", "install", "report", f"PY={sys.executable}"]
    proc = subprocess.run(
        [*cmd, f"RUN={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run/report/REPORT.md").is_file()
    missing = subprocess.run(
        [*cmd, f"RUN={tmp_path / 'nope'}"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert missing.returncode != 0 and "does not exist" in missing.stderr


def write_episodes(run_dir: Path, levels: tuple[str, ...], minutes: int = 6) -> None:
    """RUN/episodes.jsonl of a run over `levels`: episode k = 1, 2, ... ends at 2k s on
    levels[k % len(levels)], at k / 200 of its length, and at the flag when on 1-1 with k % 10 = 0."""
    from common.levels import level_lengths

    lines = [json.dumps({"event": "start", "time": T0, "env_frames": 0})]
    for k in range(1, 30 * minutes + 1):
        level = levels[k % len(levels)]
        flag = level == "1-1" and k % 10 == 0
        x = round(level_lengths()[level] * k / 200)
        row = {"time": T0 + 2.0 * k, "env_frames": 1000 * k, "actor_id": 0, "level": level}
        row |= {"max_x": x, "flag": flag, "return": 1.0, "length": 10}
        row |= {"outcome": "flag" if flag else "death", "progress": 1.0 if flag else k / 200}
        lines.append(json.dumps(row))
    RunDir(run_dir).episodes.write_text("\n".join(lines) + "\n")


def test_a_run_of_several_levels_gets_their_curves_and_a_table_with_their_mean(tmp_path):
    run, other = tmp_path / "world", tmp_path / "one"
    write_log(run, rows=3)
    write_episodes(run, ("1-1", "1-2"))
    write_log(other, rows=3)
    write_episodes(other, ("1-1",))
    assert report.main(["--run-dir", str(run), "--compare", str(other)]) == 0
    out = run / "report"
    md = (out / "REPORT.md").read_text()
    for png in ("curve.png", "levels.png", "levels-compare.png"):
        assert f"]({png})" in md and (out / png).read_bytes()[:4] == b"\x89PNG"
    # even k on 1-1, odd on 1-2; the newest 50 of 1-1 are k = 82..180, ten of them at the flag
    assert "| 1-1 | 90 | 72.0% | 20.0% | 80.0% | 2,845 |" in md
    assert "| 1-2 | 90 | 65.0% | 0.0% | 75.0% | 2,829 |" in md  # k = 81..179
    assert "| mean (levels alike) | 180 | 68.5% | 10.0% | | |" in md


def test_a_run_of_one_level_gets_its_progress_and_no_mean(tmp_path):
    write_log(tmp_path / "run", rows=3)
    write_episodes(tmp_path / "run", ("1-1",))
    assert report.main(["--run-dir", str(tmp_path / "run")]) == 0
    md = (tmp_path / "run/report/REPORT.md").read_text()
    assert "](levels.png)" in md and "| 1-1 | 180 |" in md
    assert "mean (levels alike)" not in md and "levels-compare" not in md


def test_runs_compared_before_any_episode_has_ended_get_a_report(tmp_path):
    """make report COMPARE= of runs whose episode logs hold only their start (a run's first
    minutes): no levels to compare, and no crash over it."""
    runs = [tmp_path / name for name in ("s0", "s1", "s2")]
    for run in runs:
        write_log(run, rows=3)
        RunDir(run).episodes.write_text(json.dumps({"event": "start", "time": T0}) + "\n")
    argv = ["--run-dir", str(runs[0]), "--compare", *map(str, runs[1:])]
    assert report.main(argv) == 0
    md = (runs[0] / "report/REPORT.md").read_text()
    assert "](curve.png)" in md and "levels-compare" not in md


def test_a_perturbed_runs_report_sets_each_level_beside_its_perturbed_floor(tmp_path, floors):
    run = tmp_path / "run"
    write_log(run, rows=3)
    write_episodes(run, ("1-1", "1-2"))
    RunDir(run).config.write_text(json.dumps({"seed": 0, "sticky_actions": 0.25, "noop_max": 30}))
    assert report.main(["--run-dir", str(run)]) == 0
    md = (run / "report" / "REPORT.md").read_text()
    assert "| furthest x | most end at x | random policy, perturbed |" in md
    assert "unperturbed |" not in md
    ends = {lv: f"{newest_end_x(run, lv):,.0f}" for lv in ("1-1", "1-2")}
    # 600 / 3161 and 400 / 3161 (the floors fixture), and their mean
    assert f"| 1-1 | 90 | 72.0% | 20.0% | 80.0% | 2,845 | {ends['1-1']} | 19.0% |" in md
    assert f"| 1-2 | 90 | 65.0% | 0.0% | 75.0% | 2,829 | {ends['1-2']} | 12.7% |" in md
    assert "| mean (levels alike) | 180 | 68.5% | 10.0% | | | | 15.8% |" in md


def newest_end_x(run: Path, level: str, last: int = 50) -> float:
    """The slow reference of the table's end column: of the level's newest `last` episodes, those
    without a flag, by 100-wide bin of max x; the fullest bin's (the lowest on a tie) median."""
    rows = [json.loads(line) for line in RunDir(run).episodes.read_text().splitlines()]
    newest = [r for r in rows if r.get("level") == level][-last:]
    bins: dict[int, list[int]] = {}
    for r in newest:
        if not r["flag"]:
            bins.setdefault(r["max_x"] // 100, []).append(r["max_x"])
    fullest = min(bins, key=lambda b: (-len(bins[b]), b))
    return float(np.median(bins[fullest]))


def test_report_shows_the_last_evaluation_level_by_level_in_its_headline_setting(tmp_path):
    run = tmp_path / "run"
    write_log(run, rows=3)
    RunDir(run).eval.mkdir()

    def row(setting, level, progress, flags, ends):
        return {"setting": setting, "level": level, "policy": "sampled", "episodes": 20} | {
            "mean_progress": progress, "flag_rate": flags, "ends": ends,
        }  # fmt: skip

    ledge = [{"outcome": "death", "x_from": 900, "x_to": 1000, "count": 12}]
    evaluation = {
        "overall": {"policy_version": 7, "level": "world:1", "settings": {"perturbed": {}}},
        "pooled": {"perturbed": {"sampled": {"episodes": 40}}, "plain": {"sampled": {}}},
        "matrix": {
            "rows": [
                row("perturbed", "1-1", 0.8, 0.45, []),
                row("perturbed", "1-2", 0.31, 0.0, ledge),
                row("perturbed", "mean", 0.55, 0.2, []),
                row("plain", "1-2", 0.9, 0.9, []),
            ]
        },
    }
    (RunDir(run).eval / "summary.json").write_text(json.dumps(evaluation))
    assert report.main(["--run-dir", str(run)]) == 0
    md = (run / "report/REPORT.md").read_text()
    assert "By level (perturbed):" in md
    assert "| 1-1 | sampled | 20 | 80.0% | 45.0% | - |" in md
    assert "| 1-2 | sampled | 20 | 31.0% | 0.0% | 900-1,000 (death) |" in md
    assert "| mean |" not in md and "90.0%" not in md  # the headline setting's levels only
