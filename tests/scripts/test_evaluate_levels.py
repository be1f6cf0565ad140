"""`make eval` (scripts/evaluate/) over a set of Super Mario Bros levels: the matrix agrees with
the episodes, each level's still and video, plain against perturbed; bad sets refused; the random
baseline."""

from __future__ import annotations

import json
import statistics

import cv2
import numpy as np
import pytest

from common.levels import level_lengths
from scripts import reference
from scripts.analysis import random_baseline
from scripts.evaluate import main as evaluate
from tests.scripts.test_evaluate import make_run, read_video

LEVELS = ("1-1", "1-2")
SHORT = ["--no-progress-steps", "30", "--device", "cpu"]


def run_eval(tmp_path, *flags: str) -> tuple[dict, str]:
    make_run(tmp_path / "run")
    argv = ["--run-dir", str(tmp_path / "run"), "--levels", ",".join(LEVELS), *SHORT, *flags]
    assert evaluate.main(argv) == 0
    out = tmp_path / "run" / "eval"
    return json.loads((out / "summary.json").read_text()), (out / "summary.md").read_text()


@pytest.mark.slow
def test_the_matrix_over_two_levels_agrees_with_its_episodes(tmp_path):
    summary, md = run_eval(tmp_path, "--episodes", "2", "--seed", "3")
    out = tmp_path / "run" / "eval"
    m, eps = summary["matrix"], summary["episodes"]
    assert m["levels"] == list(LEVELS) and m["settings"] == ["plain"]
    assert [(r["level"], r["policy"]) for r in m["rows"]] == [
        (lv, p) for lv in LEVELS for p in ("greedy", "sampled")
    ]
    for row in m["rows"]:
        mine = [e for e in eps if (e["level"], e["policy"]) == (row["level"], row["policy"])]
        assert row["episodes"] == len(mine) == 2
        length = level_lengths()[row["level"]]
        progress = [1.0 if e["flag"] else min(e["max_x"] / length, 1.0) for e in mine]
        assert [e["progress"] for e in mine] == pytest.approx(progress)
        assert row["mean_progress"] == pytest.approx(statistics.fmean(progress))
        assert row["median_progress"] == pytest.approx(statistics.median(progress))
        assert row["best_max_x"] == max(e["max_x"] for e in mine)
        assert row["flag_rate"] == statistics.fmean(e["flag"] for e in mine)
        assert sum(end["count"] for end in row["ends"]) == sum(not e["flag"] for e in mine)
        for end in row["ends"]:
            assert end["x_to"] - end["x_from"] == 63
            assert end["count"] == sum(
                e["outcome"] == end["outcome"] and end["x_from"] <= e["max_x"] <= end["x_to"]
                for e in mine
            )
        assert f"| {row['level']} | 2 | {row['mean_progress']:.1%} |" in md
    for mean in m["means"]:
        rows = [r for r in m["rows"] if r["policy"] == mean["policy"]]
        assert mean["mean_progress"] == pytest.approx(
            statistics.fmean(r["mean_progress"] for r in rows)
        )
        assert f"| **mean** | 2 | {mean['mean_progress']:.1%} |" in md
    # each level's best episode: its video, and a full-colour still of its max-x moment
    assert [b["level"] for b in summary["best"]] == list(LEVELS)
    for b in summary["best"]:
        mine = [e for e in eps if e["level"] == b["level"]]
        best = next(e for e in mine if (e["policy"], e["index"]) == (b["policy"], b["episode"]))
        assert best["max_x"] == b["max_x"] == max(e["max_x"] for e in mine)
        video = read_video(out / f"level-{b['level']}.mp4")
        assert len(video.frames) == b["frames"] == best["length"] + 1
        still = cv2.imread(str(out / f"level-{b['level']}.png"))[:, :, ::-1]  # RGB
        assert still.shape == (240, 256, 3) and 0 < b["still_frame"] < b["frames"]
        near = video.frames[b["still_frame"]].astype(int)  # the same screen, through H.264
        assert np.abs(near - still.astype(int)).mean() < 8
        assert f"[level-{b['level']}.png](level-{b['level']}.png)" in md
    assert (out / "best.mp4").is_file() and summary["video"]["level"] in LEVELS


@pytest.mark.slow
def test_perturbed_runs_differ_from_plain_ones_for_a_deterministic_greedy_policy(tmp_path):
    summary, md = run_eval(tmp_path, "--episodes", "3", "--policy", "greedy", "--perturbed")
    m, eps = summary["matrix"], summary["episodes"]
    assert m["settings"] == ["perturbed", "plain"]  # the headline first
    assert summary["overall"]["settings"]["perturbed"] == {
        "name": "perturbed", "sticky_actions": 0.25, "noop_max": 30
    }  # fmt: skip
    for level in LEVELS:

        def played(setting: str, level: str = level) -> list[tuple]:
            return [
                (e["max_x"], e["length"], e["return"])
                for e in eps
                if (e["setting"], e["level"]) == (setting, level)
            ]

        plain, perturbed = played("plain"), played("perturbed")
        assert len(set(plain)) == 1  # argmax on a deterministic emulator: one episode, 3 times
        assert set(perturbed) != set(plain) and len(perturbed) == 3
    assert "### greedy, perturbed (sticky actions 0.25, no-op starts 0..30)" in md
    assert "| level | policy | progress perturbed | progress plain | change |" in md
    assert md.index("### greedy, perturbed") < md.index("### greedy, plain")
    out = tmp_path / "run" / "eval"
    assert (out / "level-1-2-perturbed.png").is_file() and (out / "level-1-2.mp4").is_file()


@pytest.mark.slow
def test_jobs_play_the_same_matrix_as_one_process(tmp_path):
    """--jobs 3 over two levels, plain and perturbed (four units): every episode, row, best
    episode and still as one process plays them; it fails if a worker's seeds depended on the
    process or on what it played before, or if a unit were lost or reordered."""
    make_run(tmp_path / "run")
    common = ["--run-dir", str(tmp_path / "run"), "--levels", ",".join(LEVELS), *SHORT]
    common += ["--episodes", "2", "--seed", "5", "--perturbed"]
    summaries = {}
    for jobs in (1, 3):
        out = tmp_path / f"jobs{jobs}"
        assert evaluate.main([*common, "--jobs", str(jobs), "--out", str(out)]) == 0
        summaries[jobs] = json.loads((out / "summary.json").read_text())
    one, three = summaries[1], summaries[3]
    assert (one["overall"]["jobs"], three["overall"]["jobs"]) == (1, 3)
    assert len({(e["setting"], e["level"]) for e in one["episodes"]}) == 4
    assert three["episodes"] == one["episodes"]
    assert three["matrix"] == one["matrix"]
    assert [
        (b["level"], b["setting"], b["policy"], b["episode"], b["max_x"]) for b in three["best"]
    ] == [(b["level"], b["setting"], b["policy"], b["episode"], b["max_x"]) for b in one["best"]]
    for b in one["best"]:
        name = f"level-{b['level']}" + ("" if b["setting"] == "plain" else "-perturbed") + ".png"
        a, c = (cv2.imread(str(tmp_path / d / name)) for d in ("jobs1", "jobs3"))
        assert a is not None and np.array_equal(a, c)
    assert (tmp_path / "jobs3" / "best.mp4").is_file()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--levels", "1-1,9-9"], "'9-9': not a stage W-S (1-1 to 8-4)"),
        (["--levels", "world:9"], "'world:9': worlds are 1 to 8"),
        (["--level", "1-1,,1-2"], "an empty part"),
        (["--sticky-actions", "1.5"], "--sticky-actions must be in [0, 1)"),
        (["--perturbed", "--noop-max", "-1"], "--noop-max must be in [0, 1000]"),
    ],
)
def test_bad_level_sets_and_perturbations_are_refused(tmp_path, capsys, flags, message):
    make_run(tmp_path / "run")
    assert evaluate.main(["--run-dir", str(tmp_path / "run"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid env: ") and message in err
    assert not (tmp_path / "run" / "eval").exists()


@pytest.mark.slow
def test_the_random_baseline_writes_the_same_table_per_level(tmp_path, capsys):
    out = tmp_path / "baseline"
    argv = ["--levels", ",".join(LEVELS), "--episodes", "3", "--no-progress-steps", "30"]
    assert random_baseline.main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    m = summary["matrix"]
    assert m["policies"] == ["random"] and [r["level"] for r in m["rows"]] == list(LEVELS)
    assert [r["episodes"] for r in m["rows"]] == [3, 3] and len(m["means"]) == 1
    for row in m["rows"]:
        xs = [e["max_x"] for e in summary["episodes"] if e["level"] == row["level"]]
        assert row["mean_max_x"] == pytest.approx(statistics.fmean(xs))
    md = (out / "summary.md").read_text()
    assert "### random" in md and "| **mean** | 3 |" in md and md in capsys.readouterr().out
    assert not list(out.glob("*.mp4"))  # videos only with --video


@pytest.mark.slow
def test_the_random_baseline_merges_each_levels_floor_with_its_command(tmp_path):
    """--settings perturbed plays the perturbed setting alone; --floors keeps each level's floor
    in that setting beside what the file held, with the command that measured it."""
    floors = tmp_path / "floors.json"
    kept = reference.Floor("1-1", reference.UNPERTURBED, 200, 637.0, 0.2015, 0.0, "earlier")
    reference.save_floor(floors, kept)
    argv = ["--levels", ",".join(LEVELS), "--episodes", "2", "--no-progress-steps", "30"]
    argv += ["--settings", "perturbed", "--floors", str(floors), "--out", str(tmp_path / "out")]
    assert random_baseline.main(argv) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["matrix"]["settings"] == ["perturbed"]
    for row in summary["matrix"]["rows"]:
        f = reference.floor(row["level"], reference.PERTURBED, floors)
        assert f.episodes == 2 and f.mean_max_x == pytest.approx(row["mean_max_x"], abs=0.05)
        assert f.mean_progress == pytest.approx(row["mean_progress"], abs=1e-4)
        assert f.command == "python -m scripts.analysis.random_baseline " + " ".join(argv)
    assert reference.floor("1-1", reference.UNPERTURBED, floors) == kept


@pytest.mark.parametrize("settings", ["perturbd", "plain,plain", ""])
def test_the_random_baseline_refuses_an_unknown_setting(tmp_path, capsys, settings):
    with pytest.raises(SystemExit) as exc:
        random_baseline.main(["--settings", settings, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert "--settings must be plain, perturbed or plain,perturbed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
