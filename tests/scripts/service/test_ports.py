"""Ports another run holds: `make train` (and up, actors) refuses once, before starting anything,
naming the port, the process that holds it and free ports to pass instead."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from common.rundir import RunDir
from scripts.service import ports
from scripts.service.host import Host
from tests import procs

VENV = Path(sys.executable).parent.parent
LISTEN = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('ready', "
    "flush=True); time.sleep(600)\n"
)


def test_every_port_the_hosts_processes_bind_with_the_variable_that_moves_it():
    h = Host(port=20000, learner_metrics_port=20010, actor_metrics_base=20100, n=2, cores=4)
    h = h.resolved()
    assert [(b.variable, b.port) for b in ports.bindings(h)] == [
        ("PORT", 20000), ("PORT", 20001), ("LEARNER_METRICS_PORT", 20010),
        ("ACTOR_METRICS_BASE", 20100), ("ACTOR_METRICS_BASE", 20101),  # actors 0, 1
        ("ACTOR_METRICS_BASE", 20102),  # the eval actor: the port after the last actor's
    ]  # fmt: skip
    actors = Host(port=20000, actor_metrics_base=20100, n=2, first_actor=4, cores=4,
                  learner_autostart=False, eval=False, learner="10.0.0.1:20000").resolved()  # fmt: skip
    assert actors.relay  # actors of a learner on another host: a relay beside them
    assert [(b.variable, b.port) for b in ports.bindings(actors)] == [
        ("PORT", 20002),  # the relay's PUB
        ("ACTOR_METRICS_BASE", 20104), ("ACTOR_METRICS_BASE", 20105),
        ("ACTOR_METRICS_BASE", 20107),  # the relay's /metrics, after the eval id's port
    ]  # fmt: skip
    off = Host(learner_metrics_port=0, actor_metrics_base=0, n=1, cores=2).resolved()
    assert [b.variable for b in ports.bindings(off)] == ["PORT", "PORT"]


def test_a_free_port_is_free_and_a_listened_one_is_in_use_and_its_holder_named():
    port = procs.free_port()
    assert not ports.in_use("127.0.0.1", port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert ports.in_use("127.0.0.1", port) and ports.in_use("0.0.0.0", port)
        assert ports.holder(port).startswith(f"pid {os.getpid()}: ")
    assert not ports.in_use("127.0.0.1", port) and ports.holder(port) == ""


def hold(port: int, tmp_path: Path) -> procs.Proc:
    """Another process listening on 127.0.0.1:port."""
    p = procs.Proc([sys.executable, "-c", LISTEN, str(port)], tmp_path / f"holder-{port}.log")
    procs.wait_until("the holder to listen", lambda: "ready" in p.output(), 30, [p])
    return p


@pytest.mark.slow
@pytest.mark.integration
def test_make_train_on_ports_another_process_holds_refuses_before_starting_anything(tmp_path):
    port, lport, abase = procs.free_port(2), procs.free_port(), procs.free_port(3)
    run = tmp_path / "run"
    settings = {"RUN": run, "PORT": port, "LEARNER_METRICS_PORT": lport,
                "ACTOR_METRICS_BASE": abase, "TARGETS": tmp_path / "targets", "N": 1,
                "DEVICE": "cpu"}  # fmt: skip
    holders = [hold(lport, tmp_path), hold(port + 1, tmp_path)]
    argv = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", "train", f"VENV={VENV}"]
    argv += [f"{k}={v}" for k, v in settings.items()]
    make = subprocess.Popen(
        argv, cwd=procs.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = make.communicate(timeout=120)  # today: supervisord runs, restarting the learner
    except subprocess.TimeoutExpired:
        os.killpg(make.pid, 2)
        out = make.communicate(timeout=120)[0]
        raise AssertionError(f"make train did not refuse within 120 s:\n{out[-3000:]}") from None
    finally:
        for h in holders:
            h.stop()
    assert make.returncode == 2, out
    assert "nothing was started" in out
    assert f"LEARNER_METRICS_PORT {lport}: the learner's /metrics on 127.0.0.1, held by " in out
    assert f"PORT {port + 1}: the learner's weight broadcasts (PORT+1)" in out
    for h in holders:
        assert f"held by pid {h.popen.pid}: {sys.executable} -c" in out
    fix = next(line for line in out.splitlines() if line.strip().startswith("make train "))
    moved = dict(word.split("=") for word in fix.split() if "=" in word)
    assert moved.keys() == {"PORT", "LEARNER_METRICS_PORT"}  # the actors' ports were free
    assert int(moved["PORT"]) > port and int(moved["LEARNER_METRICS_PORT"]) > lport
    new = {int(moved["PORT"]), int(moved["PORT"]) + 1, int(moved["LEARNER_METRICS_PORT"])}
    assert not new & {abase, abase + 1}  # apart from the ports the run keeps
    layout = RunDir(run)
    assert not layout.supervisord_pid.exists() and not layout.logs.exists()
    assert not (tmp_path / "targets").exists()
