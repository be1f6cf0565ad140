"""`make up` / `make status` / `make down` with the real supervisord and deploy config: a learner
and 4 Mario actors train; kill -9 of an actor or of the learner is repaired (the learner resumes
from its checkpoint, the actors reconnect); make down leaves a final checkpoint and no process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.rundir import RunDir
from learner import checkpoint
from scripts.service import host
from tests import procs

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal, pytest.mark.integration]

VENV = Path(sys.executable).parent.parent
LEARNER_ARGS = (
    "--batch-chunks 2 --unroll-length 16 --checkpoint-interval-s 5 "
    "--heartbeat-interval-s 0.5 --actor-timeout-s 4 --replay-capacity 0"
)
ACTOR_ARGS = "--num-envs 1 --reconnect-backoff-max-s 2"  # heartbeats: the learner's


def make(target: str, settings: dict[str, object], timeout_s: float = 60) -> str:
    """Run `make target` with these variables and this venv (never reinstalling it)."""
    argv = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", target, f"VENV={VENV}"]
    argv += [f"{k}={v}" for k, v in settings.items()]
    out = subprocess.run(
        argv, cwd=procs.ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if out.returncode and target != "status":  # status exits 3 while a process is not RUNNING
        raise AssertionError(f"make {target} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    return out.stdout


def status(settings: dict[str, object]) -> dict[str, tuple[str, int]]:
    """{process: (state, pid)} from `make status`."""
    out = {}
    for line in make("status", settings).splitlines():
        name, state, *rest = line.split()
        pid = int(rest[1].rstrip(",")) if rest[:1] == ["pid"] else 0
        out[name] = (state, pid)
    return out


def all_running(settings: dict[str, object]) -> bool:
    """Every process supervisord starts is RUNNING (the eval actor, with EVAL=false, and the
    weight relay, on a host with the learner, are not started: they stay STOPPED)."""
    not_started = {"mario:relay"} | ({"mario:eval"} if settings.get("EVAL") == "false" else set())
    return all(
        state == "RUNNING" and pid > 0
        for name, (state, pid) in status(settings).items()
        if name not in not_started
    )


def kill9(pid: int) -> None:
    """SIGKILL one process; a pid of 0 or less would signal this test's own process group."""
    assert pid > 0, f"refusing to kill pid {pid}"
    os.kill(pid, signal.SIGKILL)


def gone(pid: int) -> bool:
    """No such process, or only its zombie (exited; its parent has not reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def ours(port: int) -> list[int]:
    """Live processes whose command line names our learner port: the learner and its actors."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            match = ("-m learner" in cmd and f"--port {port} " in cmd) or (
                "-m actor" in cmd and f":{port} " in cmd
            )
            if match and not gone(int(d.name)):
                pids.append(int(d.name))
    return pids


def test_supervisord_keeps_training_through_kills_and_stops_cleanly(tmp_path):
    port, lport, abase = procs.free_port(2), procs.free_port(), procs.free_port(4)
    run = tmp_path / "run"
    settings = {
        "RUN": run,
        "PORT": port,
        "LEARNER_METRICS_PORT": lport,
        "ACTOR_METRICS_BASE": abase,
        "TARGETS": tmp_path / "targets",
        "N": 4,
        "DEVICE": "cpu",
        "LEARNER_ARGS": LEARNER_ARGS,
        "ACTOR_ARGS": ACTOR_ARGS,
        "EVAL": "false",  # the eval actor under make up: tests/integration/test_soak.py
    }
    lm = lambda: procs.scrape(lport)  # noqa: E731
    # the run's updates, across learner lives (the updates counter restarts with each process)
    updates = lambda: lm().get("mario_policy_version", 0)  # noqa: E731
    layout = RunDir(run)
    learner_log = layout.logs / "learner.log"
    supervisord_pid = 0
    try:
        make("up", settings)
        supervisord_pid = int(layout.supervisord_pid.read_text())
        (actors,) = (tmp_path / "targets").glob("actors-run-*.json")  # Prometheus file_sd
        assert all(f"127.0.0.1:{abase + i}" in actors.read_text() for i in range(4))
        procs.wait_until("5 updates under supervisord", lambda: updates() >= 5, 150)
        procs.wait_until("every process RUNNING", lambda: all_running(settings), 60)
        first = status(settings)
        assert sorted(first) == [
            *(f"mario:actor-{i}" for i in range(4)),
            "mario:eval",
            "mario:learner",
            "mario:relay",
        ]
        assert first["mario:eval"] == ("STOPPED", 0)  # EVAL=false: configured, not started
        assert first["mario:relay"] == ("STOPPED", 0)  # the learner is on this host: no relay
        # 4 actors and the learner on 5 cores or fewer: one lane each (the lane rule)
        argv = Path(f"/proc/{first['mario:actor-0'][1]}/cmdline").read_bytes().split(b"\0")
        assert ("--lanes" in map(bytes.decode, argv)) == (host._cores() <= 5)

        # -- kill -9 an actor: supervisord starts a new one, which streams again ------------
        old = first["mario:actor-1"][1]
        kill9(old)
        procs.wait_until(
            "a new actor-1 streaming chunks",
            lambda: (
                status(settings)["mario:actor-1"][1] not in (0, old)
                and procs.scrape(abase + 1).get("mario_actor_chunks_sent_total", 0) >= 1
            ),
            90,
        )

        # -- kill -9 the learner: restarted, resumed from its checkpoint, actors reconnect ---
        procs.wait_until(
            "a checkpoint",
            lambda: checkpoint.latest_path(layout) is not None,
            30,
        )
        procs.wait_until("every process RUNNING", lambda: all_running(settings), 60)
        old = status(settings)["mario:learner"][1]
        kill9(old)
        version = checkpoint.load(checkpoint.latest_path(layout))["policy_version"]
        procs.wait_until(
            "the restarted learner's metrics",
            lambda: status(settings)["mario:learner"][1] not in (0, old) and bool(lm()),
            90,
        )
        assert lm()["mario_policy_version"] >= version  # resumed, not started from zero
        assert "resumed from" in learner_log.read_text()
        procs.wait_until(
            "the actors to reconnect and train the restarted learner",
            lambda: updates() >= version + 5 and lm().get("mario_actors_connected", 0) >= 1,
            120,
        )

        # -- make down: final checkpoint, supervisord gone, no process left ------------------
        procs.wait_until("every process RUNNING", lambda: all_running(settings), 30)
        final = status(settings)
        last_seen = lm()["mario_policy_version"]
        start = time.monotonic()
        make("down", settings, timeout_s=200)
        stop_s = time.monotonic() - start
        assert not layout.supervisord_pid.exists()
        assert gone(supervisord_pid)
        assert all(gone(pid) for _, pid in final.values())
        assert ours(port) == []
        saved = checkpoint.load(checkpoint.latest_path(layout))
        assert saved["policy_version"] >= last_seen
        assert "stopped at policy version" in learner_log.read_text()
        assert stop_s < 60, f"make down took {stop_s:.0f} s"
    finally:
        if layout.supervisord_pid.exists():
            socket = f"unix://{layout.supervisor_socket}"
            subprocess.run(
                [f"{VENV}/bin/supervisorctl", "-s", socket, "shutdown"],
                capture_output=True,
                timeout=30,
                check=False,
            )
            deadline = time.monotonic() + 30
            while layout.supervisord_pid.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
        leftovers = ours(port)  # each child leads its own process group, as supervisord does
        if supervisord_pid and not gone(supervisord_pid):
            leftovers.append(supervisord_pid)
        for pid in leftovers:
            if pid > 0 and pid != os.getpgrp():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
