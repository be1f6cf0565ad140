"""Bad input `make train` refuses before it starts anything, saying what to change: a level that
is neither a stage nor a registered Gymnasium id (the actors could never build it, and
supervisord would retry them until the run stopped), and a run directory that cannot be made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.rundir import RunDir
from tests import procs

VENV = Path(sys.executable).parent.parent


def make_train(tmp_path: Path, **variables: object) -> str:
    """`make train` with free ports, which must end on its own; its output."""
    settings = {"RUN": tmp_path / "run", "PORT": procs.free_port(2), "N": 1, "DEVICE": "cpu",
                "LEARNER_METRICS_PORT": procs.free_port(), "ACTOR_METRICS_BASE": 0,
                "TARGETS": tmp_path / "targets"} | variables  # fmt: skip
    argv = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", "train", f"VENV={VENV}"]
    argv += [f"{k}={v}" for k, v in settings.items()]
    make = subprocess.Popen(
        argv, cwd=procs.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = make.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # it started: stop it as Ctrl-C would
        os.killpg(make.pid, signal.SIGINT)
        out = make.communicate(timeout=180)[0]
        raise AssertionError(f"make train did not refuse within 120 s:\n{out[-3000:]}") from None
    assert make.returncode == 2, out
    assert "Traceback" not in out
    assert not list((tmp_path / "targets").glob("*.json"))  # no Prometheus targets written
    return out


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        ("1-5", "LEVELS: level set '1-5': '1-5': not a stage W-S (1-1 to 8-4)"),
        ("9-9", "LEVELS: level set '9-9': '9-9': not a stage W-S (1-1 to 8-4)"),
        ("Nope-v0", "LEVELS: level 'Nope-v0' is neither a stage nor a registered Gymnasium id"),
        ("no_such_env_module:Nope-v0", "module 'no_such_env_module' cannot be imported"),
    ],
)
def test_make_train_refuses_a_level_no_env_can_be_built_for(tmp_path, levels, problem):
    out = make_train(tmp_path, LEVELS=levels)
    assert problem in out
    assert not RunDir(tmp_path / "run").logs.exists()  # supervisord never ran


@pytest.mark.parametrize("run", ["/proc/nope", "/dev/null/run", "file"])
def test_make_train_refuses_a_run_directory_that_cannot_be_made(tmp_path, run):
    if run == "file":
        run = tmp_path / "taken"
        run.write_text("a file where the run directory would go\n")
    out = make_train(tmp_path, RUN=run)
    assert f"error: RUN={run}: cannot make the directory {run}" in out
    assert (
        "pass a RUN that can be made and written (e.g. RUN=runs/NAME); nothing was started" in out
    )
