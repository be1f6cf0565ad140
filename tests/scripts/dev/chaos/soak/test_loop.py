"""The soak's faults against real processes: a process it killed is no target while supervisord
still reports it RUNNING (not reaped yet), and one that exited on its own is skipped, not a crash."""

from __future__ import annotations

import queue
import random
import subprocess
import threading
from types import SimpleNamespace

from scripts.dev.chaos.soak.loop import Soak
from scripts.dev.chaos.soak.schedule import Fault


def a_soak(actors: list[str]) -> Soak:
    """A Soak with only what `fire` reads: no deployment, nothing started."""
    soak = Soak.__new__(Soak)
    soak.actors, soak.rng, soak.killed, soak.restarts, soak.events = (
        actors,
        random.Random(0),
        set(),
        [],
        [],
    )
    soak.kills = dict.fromkeys(["actor_kills", "learner_kills", "midwrite_kills"], 0)
    soak.t0 = 0.0
    soak.midwrite = SimpleNamespace(armed=threading.Event(), results=queue.Queue())
    return soak


def running(pid: int) -> dict:
    """supervisord's view of a process RUNNING for a minute."""
    return {"pid": pid, "statename": "RUNNING", "start": 0.0, "now": 60.0}


def test_a_killed_actor_that_supervisord_still_reports_running_is_not_killed_again():
    child = subprocess.Popen(["sleep", "600"])
    try:
        soak = a_soak(["actor-0"])
        procs = {"actor-0": running(child.pid)}  # the same stale view on both ticks
        assert soak.fire(Fault(0.0, "actor"), procs)
        assert child.wait(10) == -9
        assert not soak.fire(Fault(1.0, "actor"), procs)  # no target: the kill is not booked twice
        assert soak.kills["actor_kills"] == 1
        assert [e["event"] for e in soak.events] == ["actor killed"]
    finally:
        child.kill()
        child.wait()


def test_an_actor_that_exited_on_its_own_before_the_kill_is_skipped():
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process
    soak = a_soak(["actor-0"])
    assert not soak.fire(Fault(0.0, "actor"), {"actor-0": running(gone.pid)})
    assert soak.kills["actor_kills"] == 0 and not soak.events


def test_a_fault_held_back_into_the_closing_calm_is_dropped_not_fired():
    """A 2-minute soak is calm from 100 s: an actor kill due at 60 s that could not strike
    before then is dropped, so the last kill's new actor life is still seen."""
    child = subprocess.Popen(["sleep", "600"])
    try:
        soak = a_soak(["actor-0"])
        soak.duration_s = 120.0
        pending = [Fault(60.0, "actor"), Fault(90.0, "actor")]
        procs = {"actor-0": running(child.pid)}
        soak.fire_due(pending, procs, elapsed=99.0)  # due, ready, before the calm: fired
        assert child.wait(10) == -9 and soak.kills["actor_kills"] == 1
        assert pending == [Fault(90.0, "actor")]
        soak.fire_due(pending, procs, elapsed=100.5)  # held back to here: dropped
        assert pending == [] and soak.kills["actor_kills"] == 1
        assert soak.events[-1]["event"] == "fault skipped: due in the closing calm"
    finally:
        child.kill()
        child.wait()
