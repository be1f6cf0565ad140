"""`make eval` plays the levels of the run it judges: those of its config.json (the run dir's, or
that of the run whose checkpoints/ or eval/ holds the checkpoint named), else those the
checkpoint records; LEVELS (--levels) names others."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common import config as config_io
from common.rundir import RunDir
from learner import checkpoint
from learner.config import LearnerConfig
from scripts.checkout import ROOT
from scripts.evaluate import main as evaluate
from tests.scripts.test_evaluate import CORRIDOR, keep_best, make_run

QUICK = ["--episodes", "1", "--policy", "greedy", "--no-video", "--device", "cpu"]


def trained_on(run: Path, level: str) -> Path:
    """The run's config.json as its learner writes it, for a run of `level`."""
    cfg = config_io.from_dict(LearnerConfig, {"level": level, "run_dir": str(run)})
    config_io.write_resolved(cfg.resolved(), RunDir(run).config)
    return RunDir(run).config


def played(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())["overall"]


def make(*variables: str) -> subprocess.CompletedProcess:
    """`make eval` with this venv (-o install: do not reinstall it)."""
    cmd = ["make", "--no-print-directory", "-o", "install", f"PY={sys.executable}", "eval"]
    return subprocess.run([*cmd, *variables], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_make_eval_of_a_world_1_run_plays_its_four_levels(tmp_path):
    run = tmp_path / "w1"
    make_run(run)  # the checkpoint records no levels: the run's config.json names them
    config = trained_on(run, "world:1")
    proc = make(
        f"RUN={run}", "EPISODES=1", "POLICY=greedy", "PERTURB=0", "DEVICE=cpu",
        "EVAL_ARGS=--no-progress-steps 20 --no-video",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((RunDir(run).eval / "summary.json").read_text())
    o = summary["overall"]
    assert o["levels"] == ["1-1", "1-2", "1-3", "1-4"] and o["level"] == "world:1"
    assert [r["level"] for r in summary["matrix"]["rows"]] == o["levels"]
    assert f"Levels world:1 (the run's, from {config})." in proc.stdout


def test_make_names_the_levels_only_when_levels_is_set():
    def command(*variables: str) -> str:
        proc = subprocess.run(
            ["make", "-n", "-o", "install", "eval", "RUN=runs/x", *variables],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return proc.stdout

    assert "--levels" not in command()  # the run's own
    assert "--levels" not in command("LEVELS=")
    assert "--levels world:1 " in command("LEVELS=world:1")
    assert "--levels 1-2 " in command("LEVEL=1-2")  # the former spelling


def test_a_run_dir_or_a_checkpoint_in_it_plays_the_runs_levels(tmp_path, capsys):
    """The run's levels from its config.json, whichever of its files is played: the latest
    checkpoint, one named in checkpoints/, the best policy kept in eval/ (which records 1-1)."""
    run = tmp_path / "run"
    latest = make_run(run)
    config = trained_on(run, CORRIDOR)
    best = keep_best(run)  # the eval actor's, of a run of 1-1: the run now trains the Corridor
    for source in (["--run-dir", str(run), "--latest"], ["--checkpoint", str(latest)],
                   ["--checkpoint", str(best)], ["--run-dir", str(run)]):  # fmt: skip
        assert evaluate.main([*source, *QUICK]) == 0, source
        o = played(RunDir(run).eval)
        assert (o["level"], o["levels_from"]) == (CORRIDOR, f"the run's, from {config}")
        assert f"Levels {CORRIDOR} (the run's, from {config})." in capsys.readouterr().out
    assert evaluate.main(["--run-dir", str(run), "--levels", "1-2", *QUICK]) == 0
    assert (played(RunDir(run).eval)["level"]) == "1-2"  # named: those
    assert "Levels 1-2 (as named)." in capsys.readouterr().out


def test_a_checkpoint_outside_a_run_plays_the_levels_it_records(tmp_path, capsys):
    state = checkpoint.load(make_run(tmp_path / "run"))
    state["config"]["level"] = CORRIDOR
    loose = tmp_path / "copies" / "ckpt.pt"
    loose.parent.mkdir()
    torch.save(state, loose)
    shutil.rmtree(tmp_path / "run")
    assert evaluate.main(["--checkpoint", str(loose), *QUICK]) == 0
    o = played(loose.parent / "eval")
    assert (o["level"], o["levels_from"]) == (CORRIDOR, "the run's, as the checkpoint records them")


def test_a_run_config_that_cannot_be_read_is_refused_naming_levels(tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run)
    RunDir(run).config.write_text("{not json")
    assert evaluate.main(["--run-dir", str(run), *QUICK]) == 2
    err = capsys.readouterr().err
    assert f"cannot read the run's levels from {RunDir(run).config}" in err
    assert "LEVELS=world:1 (--levels)" in err
    assert not RunDir(run).eval.exists()
    assert evaluate.main(["--run-dir", str(run), "--levels", CORRIDOR, *QUICK]) == 0  # named
