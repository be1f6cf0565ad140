"""`make train` as a user runs it: supervisord in the foreground under the watcher. A learner
killed with kill -9 is restarted by supervisord, the status line says so, and training resumes
from the checkpoint; Ctrl-C stops everything with a final checkpoint and takes the run's
Prometheus targets away. A process that refuses its
flags is reported with its log, and the run stops when the learner or every actor does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.model import ModelSpec
from common.rundir import RunDir
from learner import checkpoint
from learner.config import LearnerConfig
from tests import procs

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal, pytest.mark.integration]

VENV = Path(sys.executable).parent.parent


def start_make(target: str, log: Path, **variables: object) -> subprocess.Popen:
    """`make TARGET` in its own process group, as a terminal would run it; never reinstalling."""
    argv = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", target, f"VENV={VENV}"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv + [f"{k}={v}" for k, v in variables.items()],
            cwd=procs.ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def ctrl_c(p: subprocess.Popen, timeout_s: float = 120) -> bool:
    """Ctrl-C: SIGINT to every process in the foreground group; True if make then ended as it
    does on Ctrl-C (make re-raises SIGINT once its recipe has finished)."""
    os.killpg(p.pid, signal.SIGINT)
    return p.wait(timeout_s) in (0, -signal.SIGINT)


def until(p: subprocess.Popen, log: Path, check):
    """`check`, failing at once with make's output when make has already ended."""

    def checked():
        if p.poll() is not None:
            raise AssertionError(f"make exited ({p.returncode}):\n{log.read_text()[-3000:]}")
        return check()

    return checked


def exit_status(p: subprocess.Popen, timeout_s: float) -> int:
    """make's exit status once it ends on its own; Ctrl-C if it has not within `timeout_s`."""
    try:
        return p.wait(timeout_s)
    except subprocess.TimeoutExpired:
        ctrl_c(p)
        raise


def settings(tmp_path: Path) -> dict[str, object]:
    port, metrics = procs.free_port(2), procs.free_port(3)
    return {
        "RUN": tmp_path / "run",
        "PORT": port,
        "LEARNER_METRICS_PORT": metrics,
        "ACTOR_METRICS_BASE": metrics + 1,
        "TARGETS": tmp_path / "targets",
        "N": 1,
        "EVAL": "false",
        "DEVICE": "cpu",
        "LEARNER_ARGS": "--batch-chunks 2 --unroll-length 16 --checkpoint-interval-s 3 "
        "--heartbeat-interval-s 0.6",  # actors start a new session after 3 s without word
        "ACTOR_ARGS": "--num-envs 2",
    }


def test_a_killed_learner_is_restarted_reported_and_resumes_from_its_checkpoint(tmp_path):
    s = settings(tmp_path)
    run, log = RunDir(s["RUN"]), tmp_path / "train.log"
    output = lambda: log.read_text(errors="replace")  # noqa: E731
    version = lambda: procs.scrape(s["LEARNER_METRICS_PORT"]).get("mario_policy_version", 0)  # noqa: E731
    p = start_make("train", log, **s)
    try:
        procs.wait_until("a checkpoint", until(p, log, lambda: checkpoint.latest_path(run)), 180)
        procs.wait_until("the status line", until(p, log, lambda: "steps/s" in output()), 60)
        listed = sorted(f.name.split("-")[0] for f in (tmp_path / "targets").iterdir())
        assert listed == ["actors", "learner"]  # this run's, named after it (no eval actor)
        learner_pid = int(run.lock.read_text())  # the learner writes its pid there
        os.kill(learner_pid, signal.SIGKILL)
        saved = checkpoint.load(checkpoint.latest_path(run))["policy_version"]
        procs.wait_until(
            "the status line to report the restart",
            lambda: "learner restarted 1x" in output(),
            120,
        )
        assert re.search(r"learner exited \(terminated by SIGKILL; not expected\)", output())
        procs.wait_until(
            "training to go on from the checkpoint", lambda: version() >= saved + 3, 180
        )
        assert f"resumed from ckpt-{saved:010d}.pt" in (run.logs / "learner.log").read_text()
        last_seen = version()
        assert ctrl_c(p), output()[-3000:]
        final = checkpoint.load(checkpoint.latest_path(run))
        assert final["policy_version"] >= last_seen
        assert "stopping..." in output() and "error" not in output()
        assert output().count("learner exited") == 1
        assert not run.supervisord_pid.exists()
        assert list((tmp_path / "targets").iterdir()) == []  # Prometheus stops looking for it
    finally:
        if p.poll() is None:
            ctrl_c(p)


def test_flags_a_process_refuses_stop_the_run_with_its_log(tmp_path):
    s = settings(tmp_path) | {"ACTOR_ARGS": "--num-envs 2 --no-such-flag"}
    log = tmp_path / "train.log"
    p = start_make("train", log, **s)
    try:
        assert p.wait(120) == 2
    finally:
        if p.poll() is None:
            ctrl_c(p)
    out = log.read_text()
    assert re.search(
        r"actor-0 refused to start \(exit status 2; (not )?expected\); not restarted", out
    )
    assert "unrecognized arguments: --no-such-flag" in out  # the actor's own words
    assert not RunDir(s["RUN"]).supervisord_pid.exists()

    s |= {"ACTOR_ARGS": "--num-envs 1", "LEARNER_ARGS": "--epochs 0"}
    p = start_make("train", log, **s)
    assert p.wait(120) == 2
    assert "learner refused to start" in log.read_text()
    assert "--epochs: must be >= 1, got 0" in log.read_text()


def test_a_planned_run_stops_at_its_frames_and_a_finished_run_refuses_to_start(tmp_path):
    batch_frames = 2 * 16 * 4 * 2  # --batch-chunks 2 of 16 steps, 4 frames a step, 2 envs
    frames = 8 * batch_frames
    s = settings(tmp_path) | {"FRAMES": frames}
    run, log = RunDir(s["RUN"]), tmp_path / "train.log"
    p = start_make("train", log, **s)
    assert exit_status(p, 600) == 0, log.read_text(errors="replace")[-3000:]
    out = log.read_text(errors="replace")
    assert "the learner has finished the run" in out and "stopping..." in out
    learner_log = (run.logs / "learner.log").read_text()
    assert f"of --train-frames {frames}; stopping" in learner_log
    final = checkpoint.load(checkpoint.latest_path(run))
    assert final["env_frames"] >= frames
    # the rate fell linearly to 0 over the run: the last update's is the schedule's near the end
    last_rate = final["optimizer"]["param_groups"][0]["lr"]
    assert 0 <= last_rate <= 1e-3 * batch_frames / frames
    assert not run.supervisord_pid.exists()

    again = tmp_path / "again.log"
    p = start_make("train", again, **s)
    assert exit_status(p, 120) == 2, again.read_text(errors="replace")[-3000:]
    out = again.read_text(errors="replace")
    assert "learner refused to start" in out
    assert f"its --train-frames is {frames}: raise --train-frames (make train FRAMES=)" in out
    assert checkpoint.latest_path(run).name == f"ckpt-{final['policy_version']:010d}.pt"

    # Raised by one batch, the resumed run ends after its first update, often within
    # supervisord's startsecs (10 s), where an exit counts as a failed start to retry: the
    # watcher ends the run all the same, and no second learner starts.
    more = tmp_path / "more.log"
    p = start_make("train", more, **s | {"FRAMES": final["env_frames"] + 1})
    assert exit_status(p, 300) == 0, more.read_text(errors="replace")[-3000:]
    out = more.read_text(errors="replace")
    assert "the learner has finished the run" in out and "refused" not in out
    learner_log = (run.logs / "learner.log").read_text()
    assert learner_log.count("resumed from") == 2  # the refused start, then this one
    last = checkpoint.load(checkpoint.latest_path(run))
    assert last["policy_version"] > final["policy_version"]
    assert last["env_frames"] > final["env_frames"]


def test_every_level_trains_with_todays_defaults(tmp_path):
    """make train LEVELS=all, smoke-sized, with no switch: today's defaults are the settings for
    a set. The run finishes at its frames, with the one network of every run in its checkpoint
    and a row of figures for every level in its metrics."""
    from common.levels import ALL_STAGES

    batch_frames = 2 * 16 * 4 * 2
    frames = 24 * batch_frames
    s = settings(tmp_path) | {"FRAMES": frames, "LEVELS": "all"}
    run, log = RunDir(s["RUN"]), tmp_path / "train.log"
    p = start_make("train", log, **s)
    assert exit_status(p, 900) == 0, log.read_text(errors="replace")[-3000:]
    assert "the learner has finished the run" in log.read_text(errors="replace")
    final = checkpoint.load(checkpoint.latest_path(run))
    assert final["env_frames"] >= frames
    assert ModelSpec.from_dict(final["model_spec"]) == LearnerConfig(level="all").model_spec()
    rows = [json.loads(line) for line in run.metrics.read_text().splitlines()]
    assert set(rows[-1]["levels"]) == set(ALL_STAGES)
