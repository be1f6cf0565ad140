"""What the soak does to the learner and what it books per crash: the mid-checkpoint-write
killer (a thread, for its reaction time) and one learner restart being timed."""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

# a checkpoint write's temp file (common/rundir.py's atomic_write): .ckpt-<version>.pt.tmp-<pid>
TEMP_FILE = re.compile(r"^\.ckpt-(\d+)\.pt\.tmp-(\d+)$")
MIDWRITE_WAIT_S = 60.0  # an armed killer gives up when no write starts within this


class MidwriteKill(NamedTuple):
    t_kill: float  # unix time
    version: int  # the checkpoint being written
    torn: bool  # its temp file was still there after the kill: the write was cut
    pid: int  # the learner killed


class MidwriteKiller:
    """Once armed, kill -9 the learner the moment a checkpoint's temp file appears in `ckpt_dir`;
    each arming ends in one result on `results`: a MidwriteKill, or None (no write within
    MIDWRITE_WAIT_S)."""

    def __init__(self, ckpt_dir: Path):
        self.ckpt_dir = ckpt_dir
        self.armed = threading.Event()
        self.results: queue.Queue[MidwriteKill | None] = queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="midwrite", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)

    def _watch(self) -> None:
        while not self.stopping.is_set():
            if not self.armed.wait(0.2):
                continue
            deadline, kill = time.monotonic() + MIDWRITE_WAIT_S, None
            while kill is None and time.monotonic() < deadline and not self.stopping.is_set():
                kill = self._kill_a_writer()
                time.sleep(0.002)
            self.results.put(kill)
            self.armed.clear()

    def _kill_a_writer(self) -> MidwriteKill | None:
        names = (p.name for p in self.ckpt_dir.glob(".ckpt-*"))  # none before the first write
        hit = next((m for n in names if (m := TEMP_FILE.match(n))), None)
        if hit is None:
            return None
        try:
            os.kill(int(hit[2]), signal.SIGKILL)
        except ProcessLookupError:
            return None  # a dead learner's leftover: wait for a live write
        t_kill = time.time()
        time.sleep(0.05)  # the kill lands; then see what it left
        torn = (self.ckpt_dir / hit[0]).exists()
        return MidwriteKill(t_kill, int(hit[1]), torn, int(hit[2]))


@dataclass
class Restart:
    """One learner crash, measured until every actor that lived through it streams again."""

    kind: str  # "crash" | "mid-write"
    t_kill: float  # unix time
    updates_at_kill: int
    resumed_version: int
    lost_s: float  # training time lost: since the resumed checkpoint, or the life's start if later
    bound_s: float  # one checkpoint interval plus the longest update seen (and two ticks)
    actors: dict[str, int]  # name -> pid of the actors alive at the kill
    t_ready: float | None = None  # when the new learner served
    first_version: int | None = None  # the new learner's version when first scraped
    resume_s: dict[str, float] = field(default_factory=dict)  # inf: not within the timeout
    dropped: list[str] = field(default_factory=list)  # killed before they streamed

    def done(self) -> bool:
        settled = len(self.resume_s) + len(self.dropped)
        return self.t_ready is not None and settled == len(self.actors)

    def summary(self) -> dict[str, Any]:
        lost = self.updates_at_kill - self.resumed_version
        return {
            "kind": self.kind,
            "updates_at_kill": self.updates_at_kill,
            "resumed_version": self.resumed_version,
            "first_version_seen": self.first_version,
            "lost_updates": lost,
            "lost_s": round(self.lost_s, 2),
            "bound_s": round(self.bound_s, 2),
            # the work since the resumed checkpoint's state spans at most the interval and the
            # update that straddled its end (the learner's loop reads the clock between updates)
            "within_interval": lost == 0 or self.lost_s <= self.bound_s,
        }

    def observe(self, name: str, pid: int | None, m: dict[str, float], timeout_s: float) -> None:
        """Whether actor `name` (now `pid`, its /metrics `m`) streams to the new learner: it
        registered with it and sent a chunk since."""
        if self.t_ready is None or name in self.resume_s or name in self.dropped:
            return
        if pid != self.actors[name]:
            self.dropped.append(name)
            return
        registered = m.get("mario_actor_registered_timestamp_seconds", 0.0)
        sent = m.get("mario_actor_last_chunk_timestamp_seconds", 0.0)
        if registered >= self.t_ready and sent >= registered:
            self.resume_s[name] = sent - self.t_ready
        elif time.time() - self.t_ready > timeout_s:
            self.resume_s[name] = float("inf")
