"""Chaos soak: the deployment under repeated crashes and a rogue peer, judged PASS or FAIL.

    make soak MINUTES=30            # or: python -m scripts.chaos.soak --minutes 30 --run-dir runs/soak
    python -m scripts.chaos.soak --builds 1000

The soak starts what `make up` starts (supervisord, deploy/supervisord/mario-impala.conf: the
learner, N=2 actors and the eval actor; restarts are the deployment's own) on CPU, with a short
checkpoint interval, and a rogue peer (scripts/chaos/rogue.py) that sends mutated copies of real actor
traffic to the learner. Then, on a seeded schedule, it crashes things:

- kill -9 of a random actor every 30 s;
- kill -9 of the learner every 5 minutes (a crash, not a stop);
- kill -9 of the learner while it writes a checkpoint (the soak watches the checkpoint directory
  for the write's temp file and kills the moment it appears), every 75 s: 24 in 30 minutes.

A fault waits until its target has been RUNNING for supervisord's startsecs, so that it is a
crash of a running process, not a start that supervisord would give up on. Short soaks fit the
schedule into their length: each learner fault at least once.

It measures, from the processes' own /metrics, supervisord and the run directory:

- hangs: no learner update for 60 s while an actor runs (learner down time counts);
- per learner restart: down time (kill to serving), and the time each actor that lived through it
  takes to stream again (registered with the new learner and sent a chunk), from the moment the
  new learner serves (mario_learner_start_time_seconds); p50, p99, max;
- per learner crash: updates lost (the version at the kill minus the version resumed) and the
  training time they took (since the resumed checkpoint was taken, or since the learner's start
  if that came later), against one checkpoint interval plus the longest update of that life (the
  loop reads the clock between updates, so one update may straddle the interval's end);
- every checkpoint on disk loads (checked at every learner crash and at the end, after make
  down), and no half-written temp file outlives the next start;
- resident memory of the learner, each actor and the eval actor every 5 s (their
  process_resident_memory_bytes); the slope after the first 5 minutes, in MiB/min, over every
  life of each process;
- rogue messages sent against the learner's mario_learner_messages_rejected_total, in rounds
  sent while nothing else can be rejected (learner up 10 s, no fault pending): each must be
  rejected exactly once; and crashes: exits other than the soak's own kill -9 (supervisord log);
- env builds and build failures (actor logs).

The summary is printed last and written to RUN/soak.json; the exit status is 1 on FAIL.

`--builds N` builds N Mario envs one after another through the actors' build path
(common.env.build_envs with the actors' timeout and retry) in a worker process, restarted if the
build watchdog ends it, and reports failures and build-time percentiles.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import xmlrpc.client
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import status
from scripts.ports import free_ports

ROOT = Path(__file__).resolve().parents[3]

RUNNING = 20  # supervisord's process state code
STARTSECS = 10.0  # deploy/supervisord/mario-impala.conf: a process younger than this is starting
HANG_S = 60.0
RESUME_TIMEOUT_S = 60.0
MEMORY_EVERY_S = 5.0
WARMUP_S = 300.0
TICK_S = 0.2  # the soak's loop: scrape, measure, fault, rogue, sleep
LIFE_WARMUP_S = 20.0  # a process's memory counts once it is this old (imports, envs, buffers)
ROGUE_BURST = 3
ROGUE_SETTLE_S = 5.0


# ---- what is judged ------------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    hangs: int = 0
    resume_p99_s: float = 5.0
    memory_slope_mib_per_min: float = 1.0
    memory_min_minutes: float = 10.0  # shorter soaks report the slope without judging it
    midwrite_kills_per_30_min: int = 20


@dataclass(frozen=True, order=True)
class Fault:
    at_s: float  # seconds from the soak's start
    kind: str  # "actor" | "learner" | "learner_midwrite"


def fault_schedule(
    duration_s: float,
    seed: int,
    *,
    actor_every_s: float = 30.0,
    learner_every_s: float = 300.0,
    midwrite_every_s: float = 75.0,
    settle_s: float = 30.0,
) -> list[Fault]:
    """Faults in time order, none in the last `settle_s`. A soak too short for the full periods
    gets each learner fault at least once: learner kills every duration/2 at most, mid-write kills
    every duration/3 at most. Mid-write times are jittered (seeded) by up to a fifth of a period."""
    rng = random.Random(seed)
    end = duration_s - settle_s
    learner_every_s = min(learner_every_s, duration_s / 2)
    midwrite_every_s = min(midwrite_every_s, duration_s / 3)
    faults = [Fault(k * actor_every_s, "actor") for k in range(1, int(end // actor_every_s) + 1)]
    faults += [
        Fault(k * learner_every_s, "learner") for k in range(1, int(end // learner_every_s) + 1)
    ]
    k = 1
    while (t := k * midwrite_every_s + rng.uniform(-0.2, 0.2) * midwrite_every_s) <= end:
        faults.append(Fault(max(t, 1.0), "learner_midwrite"))
        k += 1
    return sorted(f for f in faults if f.at_s <= end)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100, linear interpolation); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def slope_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) samples, per minute; None for fewer than 3."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return None
    return 60.0 * sum((t - mt) * (v - mv) for t, v in samples) / var


def lost_within_interval(
    lost_updates: int, lost_s: float, interval_s: float, longest_update_s: float
) -> bool:
    """Whether a crash lost at most one checkpoint interval: the work since the resumed
    checkpoint's state was taken spans no more than the interval plus the update that straddled
    its end (the loop reads the clock between updates). Trivially true if no update was lost."""
    return lost_updates == 0 or lost_s <= interval_s + longest_update_s


def judge(summary: dict[str, Any], targets: Targets) -> list[dict[str, Any]]:
    """[{check, value, target, ok}] for the summary's figures; a check with ok None is reported
    but not judged."""
    minutes = summary["duration_s"] / 60
    checks: list[dict[str, Any]] = []

    def check(name: str, value: Any, target: str, ok: bool | None) -> None:
        checks.append({"check": name, "value": value, "target": target, "ok": ok})

    check("hangs", summary["hangs"], f"<= {targets.hangs}", summary["hangs"] <= targets.hangs)
    resumes = summary["resume_s"]
    p99 = percentile(resumes, 99)
    check(
        "actor streaming again after a learner restart, p99 s",
        None if p99 is None else round(p99, 2),
        f"<= {targets.resume_p99_s}",
        p99 is not None and p99 <= targets.resume_p99_s and not summary["resume_timeouts"],
    )
    crashes = summary["learner_crashes"]
    over = [c for c in crashes if not c["within_interval"]]
    check(
        "learner crashes that lost more than one checkpoint interval of updates",
        f"{len(over)} of {len(crashes)} (most lost: "
        f"{max((c['lost_updates'] for c in crashes), default=0)} updates)",
        "0, at least one crash",
        bool(crashes) and not over,
    )
    older = [
        c for c in crashes
        if c.get("first_version_seen") is not None and c["first_version_seen"] < c["resumed_version"]
    ]  # fmt: skip
    check(
        "learner restarts that resumed from an older than the newest complete checkpoint",
        len(older),
        "0",
        not older,
    )
    need = max(1, math.floor(targets.midwrite_kills_per_30_min * minutes / 30))
    check(
        "learner killed mid-checkpoint-write",
        summary["midwrite_kills"],
        f">= {need}",
        summary["midwrite_kills"] >= need,
    )
    ck = summary["checkpoints"]
    check(
        "checkpoints that load",
        f"{ck['loaded']}/{ck['checked']}",
        "all",
        ck["checked"] > 0 and ck["loaded"] == ck["checked"],
    )
    check("half-written checkpoint files left at the end", ck["stale_temp_files"], "0",
          ck["stale_temp_files"] == 0)  # fmt: skip
    judged = minutes >= targets.memory_min_minutes
    for role, slope in summary["memory_slope_mib_per_min"].items():
        check(
            f"{role} resident memory slope after warm-up, MiB/min",
            None if slope is None else round(slope, 3),
            f"< {targets.memory_slope_mib_per_min}" + ("" if judged else " (judged from 10 min)"),
            (slope is not None and abs(slope) < targets.memory_slope_mib_per_min)
            if judged
            else None,
        )
    rogue = summary["rogue"]
    check(
        "rogue messages rejected (in accounted rounds)",
        f"{rogue['rejected']}/{rogue['accounted']}",
        "all, at least one round",
        rogue["accounted"] > 0 and rogue["rejected"] == rogue["accounted"],
    )
    check(
        "crashes (exits not caused by the soak)", summary["crashes"], "0", summary["crashes"] == 0
    )
    builds = summary["env_builds"]
    check("env build failures", builds["failures"], "0", builds["failures"] == 0)
    return checks


# ---- the deployment --------------------------------------------------------------------------


class UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's unix socket."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def make_connection(self, host):  # noqa: ANN001
        import http.client

        path = self.path

        class Conn(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(5)
                self.sock.connect(path)

        return Conn("localhost")


class Deployment:
    """`make up` / `make down` for one run dir, and supervisord's view of its processes."""

    def __init__(self, run_dir: Path, settings: dict[str, object]):
        self.run_dir = run_dir
        self.venv = Path(sys.executable).parent.parent
        self.settings = {"RUN": str(run_dir), **settings}
        self.rpc: Any = None

    def make(self, target: str, timeout_s: float = 300) -> None:
        argv = ["make", "--no-print-directory", "-o", f"{self.venv}/.installed", target]
        argv += [f"VENV={self.venv}", *(f"{k}={v}" for k, v in self.settings.items())]
        out = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if out.returncode:
            raise RuntimeError(f"make {target} exited {out.returncode}:\n{out.stdout}{out.stderr}")

    def up(self) -> None:
        self.make("up")
        sock = self.run_dir / "supervisor.sock"
        deadline = time.monotonic() + 30
        while not sock.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"supervisord made no {sock} in 30 s")
            time.sleep(0.1)
        self.rpc = xmlrpc.client.ServerProxy("http://localhost", transport=UnixTransport(str(sock)))

    def processes(self) -> dict[str, dict[str, Any]]:
        """{name: supervisord's process info} (pid, state, start, ...)."""
        try:
            return {p["name"]: p for p in self.rpc.supervisor.getAllProcessInfo()}
        except (OSError, xmlrpc.client.Error):
            return {}

    def down(self) -> None:
        if (self.run_dir / "supervisord.pid").exists():
            self.make("down", timeout_s=400)


# ---- the soak --------------------------------------------------------------------------------


@dataclass
class Restart:
    """One learner crash, measured until every actor that lived through it streams again."""

    kind: str
    t_kill: float  # unix time
    updates_at_kill: int
    resumed_version: int
    lost_s: float  # the kill's time minus the later of the resumed checkpoint and the life's start
    bound_s: float  # one checkpoint interval plus the longest update of the life that ended
    actors: dict[str, int]  # name -> pid of the actors alive at the kill
    t_ready: float | None = None
    resume_s: dict[str, float] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # killed before they streamed
    first_version: int | None = None  # the new learner's version when first scraped

    def done(self) -> bool:
        return self.t_ready is not None and len(self.resume_s) + len(self.dropped) == len(
            self.actors
        )


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.run_dir = Path(args.run_dir).resolve()
        self.duration_s = args.minutes * 60
        self.rng = random.Random(args.seed)
        self.port = free_ports(2)
        self.learner_metrics = free_ports(1)
        self.actor_base = free_ports(args.actors + 1)
        self.actors = [f"actor-{i}" for i in range(args.actors)]
        self.deploy = Deployment(
            self.run_dir,
            {
                "N": args.actors,
                "PORT": self.port,
                "LEARNER": f"127.0.0.1:{self.port}",
                "LEARNER_METRICS_PORT": self.learner_metrics,
                "ACTOR_METRICS_BASE": self.actor_base,
                "TARGETS": self.run_dir / "targets" / "actors.json",
                "LEVEL": args.level,
                "DEVICE": args.device,
                "LEARNER_ARGS": f"--checkpoint-interval-s {args.checkpoint_interval_s:g} "
                + args.learner_args,
                "ACTOR_ARGS": args.actor_args,
            },
        )
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.faults = fault_schedule(
            self.duration_s,
            args.seed,
            actor_every_s=args.actor_kill_every_s,
            learner_every_s=args.learner_kill_every_s,
            midwrite_every_s=args.midwrite_kill_every_s,
            settle_s=min(30.0, self.duration_s / 6),
        )
        # measurements
        self.restarts: list[Restart] = []
        self.hang_gaps: list[float] = []
        self.longest_gap = 0.0
        self.memory: dict[str, list[tuple[float, float, float]]] = {}  # (time, MiB, life's age)
        self.actor_kills = 0
        self.plain_kills = 0
        self.midwrite_kills = 0
        self.midwrite_missed = 0  # killed, but the write had finished: a plain crash
        self.midwrite_no_write = 0  # armed, but no checkpoint was written within 60 s
        self.ckpt_checked = 0
        self.ckpt_loaded = 0
        self.ckpt_errors: list[str] = []
        self.rogue_rounds = {"accounted": 0, "rejected": 0, "interrupted": 0, "noisy": 0}
        self.rogue_unaccounted: list[list[str]] = []
        self.rogue_open: dict[str, Any] | None = None  # the burst being accounted for
        self.last_rogue = 0.0
        self.rogue_sent: dict[str, int] = {}
        self.events: list[dict[str, Any]] = []
        # state
        self.learner_start: float | None = None
        self.learner_samples: list[tuple[float, float]] = []  # (unix time, updates) this life
        self.update_times: list[float] = []  # when this life's updates were seen
        self.longest_spacing = 0.0  # between two updates of one life, over the soak so far
        self.last_progress = 0.0
        self.gap_open = False
        self.midwrite_armed = threading.Event()
        self.midwrite_results: queue.Queue = queue.Queue()
        self.stop = threading.Event()

    # -- helpers ---------------------------------------------------------------------------

    def log(self, event: str, **kw: Any) -> None:
        t = time.time() - self.t0
        self.events.append({"t": round(t, 2), "event": event, **kw})
        extra = " ".join(f"{k}={v}" for k, v in kw.items())
        print(f"[soak {t:7.1f} s] {event} {extra}", flush=True)

    def scrape_learner(self) -> dict[str, float]:
        return status.scrape(f"http://127.0.0.1:{self.learner_metrics}/metrics", timeout_s=1.0)

    def scrape_actor(self, name: str) -> dict[str, float]:
        """An actor's /metrics ("actor-<i>"), or the eval actor's ("eval", id N)."""
        i = len(self.actors) if name == "eval" else int(name.rpartition("-")[2])
        return status.scrape(f"http://127.0.0.1:{self.actor_base + i}/metrics", timeout_s=1.0)

    def running_for(self, procs: dict[str, dict], name: str) -> float:
        """Seconds `name` has been RUNNING (supervisord's clock); -1 if it is not."""
        p = procs.get(name)
        if not p or p["state"] != RUNNING or p["pid"] <= 0:
            return -1.0
        return p["now"] - p["start"]

    def check_checkpoints(self) -> dict[int, float]:
        """Load every complete checkpoint on disk now; {policy version: time its state was taken}
        of those that load."""
        from learner import checkpoint

        saved = {}
        for path in sorted(self.ckpt_dir.glob("ckpt-*.pt")):
            self.ckpt_checked += 1
            try:
                state = checkpoint.load(path)
                saved[int(state["policy_version"])] = float(state["saved_at"])
                self.ckpt_loaded += 1
            except FileNotFoundError:
                self.ckpt_checked -= 1  # pruned between the listing and the load
            except Exception as exc:  # anything else is the finding
                self.ckpt_errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
        return saved

    def newest_version(self) -> int:
        from learner import checkpoint

        path = checkpoint.latest_path(self.ckpt_dir)
        return int(path.name[5:-3]) if path else 0

    def longest_update_s(self) -> float:
        """The longest time between two updates of one learner life seen so far, plus two of the
        soak's ticks (it sees an update at its next scrape, so a spacing reads up to a tick off
        at either end)."""
        return self.longest_spacing + 2 * TICK_S

    # -- faults ----------------------------------------------------------------------------

    def learner_crashed(self, kind: str, t_kill: float, updates: int, procs: dict) -> None:
        """Book one learner kill (the learner is dead when this runs: nothing moves on disk)."""
        resumed = self.newest_version()
        saved = self.check_checkpoints()
        alive = {a: procs[a]["pid"] for a in self.actors if self.running_for(procs, a) >= 0}
        r = Restart(
            kind,
            t_kill,
            updates,
            resumed,
            # the training time lost: since the resumed checkpoint, or since this life began
            # when it resumed from that checkpoint (the time before is the previous crash's)
            lost_s=t_kill - max(saved.get(resumed, t_kill), self.learner_start or 0.0),
            bound_s=self.args.checkpoint_interval_s + self.longest_update_s(),
            actors=alive,
        )
        self.restarts.append(r)
        self.log(
            "learner killed",
            kind=kind,
            updates=updates,
            resumes_from=resumed,
            lost=updates - resumed,
            lost_s=round(r.lost_s, 2),
            bound_s=round(r.bound_s, 2),
        )

    def kill_learner(self, procs: dict) -> bool:
        if self.running_for(procs, "learner") < STARTSECS or self.midwrite_armed.is_set():
            return False
        m = self.scrape_learner()
        pid = procs["learner"]["pid"]
        os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        self.plain_kills += 1
        self.learner_crashed("crash", t_kill, int(m.get("mario_policy_version", 0)), procs)
        return True

    def arm_midwrite(self, procs: dict) -> bool:
        if self.running_for(procs, "learner") < STARTSECS or self.midwrite_armed.is_set():
            return False
        self.midwrite_armed.set()
        self.log("armed: kill the learner at its next checkpoint write")
        return True

    def midwrite_watcher(self) -> None:
        """While armed: kill -9 the learner the moment a checkpoint's temp file appears."""
        pattern = re.compile(r"^\.ckpt-(\d+)\.pt\.tmp-(\d+)$")
        while not self.stop.is_set():
            if not self.midwrite_armed.wait(0.2):
                continue
            armed_at = time.monotonic()
            while self.midwrite_armed.is_set() and not self.stop.is_set():
                try:
                    names = os.listdir(self.ckpt_dir)
                except FileNotFoundError:
                    names = []
                hit = next((m for n in names if (m := pattern.match(n))), None)
                if hit:
                    version, pid = int(hit.group(1)), int(hit.group(2))
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass  # a dead learner's leftover: wait for a live write
                    else:
                        t_kill = time.time()
                        time.sleep(0.05)  # the kill lands; then see what it left
                        torn = (self.ckpt_dir / hit.group(0)).exists()
                        self.midwrite_results.put((t_kill, version, torn))
                        self.midwrite_armed.clear()
                        break
                if time.monotonic() - armed_at > 60:
                    self.midwrite_results.put(None)  # no checkpoint written in 60 s
                    self.midwrite_armed.clear()
                    break
                time.sleep(0.002)

    def kill_actor(self, procs: dict) -> bool:
        # not while a learner restart is being timed (or about to be): the actors' resume
        # after it is measured on actors that lived through it
        pending = any(not r.done() for r in self.restarts) or self.midwrite_armed.is_set()
        ready = [a for a in self.actors if self.running_for(procs, a) >= STARTSECS]
        if pending or not ready:
            return False
        name = self.rng.choice(ready)
        os.kill(procs[name]["pid"], signal.SIGKILL)
        self.actor_kills += 1
        self.log("actor killed", actor=name)
        return True

    # -- measurement -----------------------------------------------------------------------

    def observe_learner(self, m: dict[str, float], procs: dict, now: float) -> None:
        actor_up = any(self.running_for(procs, a) >= 0 for a in self.actors)
        if m:
            start = m.get("mario_learner_start_time_seconds")
            updates = m.get("mario_policy_version", 0.0)  # the run's updates, resumed
            if start != self.learner_start:  # a new life
                self.learner_start = start
                self.learner_samples = [(now, updates)]
                self.update_times = []
                for r in self.restarts:
                    if r.t_ready is None and start is not None and start >= r.t_kill:
                        r.t_ready = start
                        r.first_version = int(updates)
                        self.log("learner serving again", down_s=round(start - r.t_kill, 2),
                                 version=int(updates))  # fmt: skip
            else:
                if updates > self.learner_samples[-1][1]:
                    self.progress(now)
                    if self.update_times:
                        spacing = now - self.update_times[-1]
                        self.longest_spacing = max(self.longest_spacing, spacing)
                    self.update_times.append(now)
                self.learner_samples.append((now, updates))
                self.learner_samples = [s for s in self.learner_samples if now - s[0] <= 120]
        gap = now - self.last_progress
        self.longest_gap = max(self.longest_gap, gap)
        if gap > HANG_S and actor_up and not self.gap_open:
            self.gap_open = True
            self.log("HANG: no learner update", seconds=round(gap, 1))

    def progress(self, now: float) -> None:
        if self.gap_open:
            self.hang_gaps.append(now - self.last_progress)
        self.gap_open = False
        self.last_progress = now

    def observe_resumes(self, procs: dict, now: float) -> None:
        for r in self.restarts:
            if r.done() or r.t_ready is None:
                continue
            for name, pid in r.actors.items():
                if name in r.resume_s or name in r.dropped:
                    continue
                if procs.get(name, {}).get("pid") != pid:
                    r.dropped.append(name)
                    continue
                m = self.scrape_actor(name)
                registered = m.get("mario_actor_registered_timestamp_seconds", 0.0)
                sent = m.get("mario_actor_last_chunk_timestamp_seconds", 0.0)
                if registered >= r.t_ready and sent >= registered:
                    r.resume_s[name] = sent - r.t_ready
                elif now - r.t_ready > RESUME_TIMEOUT_S:
                    r.resume_s[name] = math.inf
            if r.done():
                self.log(
                    "actors streaming again",
                    after_s={k: round(v, 2) for k, v in r.resume_s.items()},
                    dropped=r.dropped,
                )

    def sample_memory(self, procs: dict, now: float, learner: dict[str, float]) -> None:
        """Resident memory of every process, from its own /metrics (process_resident_memory_bytes),
        else from /proc when its metrics do not answer."""
        for name in ["learner", *self.actors, "eval"]:
            p = procs.get(name)
            if not p or p["pid"] <= 0:
                continue
            m = learner if name == "learner" else self.scrape_actor(name)  # this tick's scrape
            mib = m.get("process_resident_memory_bytes", 0.0) / 2**20
            if not mib:
                try:
                    text = Path(f"/proc/{p['pid']}/status").read_text()
                except OSError:
                    continue
                rss = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
                if not rss:
                    continue
                mib = int(rss.group(1)) / 1024
            role = "actor" if name.startswith("actor-") else name
            age = self.running_for(procs, name)  # this life's age
            self.memory.setdefault(role, []).append((now, mib, age))

    # -- rogue -----------------------------------------------------------------------------

    @staticmethod
    def rejected_total(m: dict[str, float]) -> float:
        return sum(v for k, v in m.items() if k.startswith("mario_learner_messages_rejected_total"))

    def rogue_tick(self, rogue: Any, m: dict[str, float], next_fault_in: float, now: float) -> None:
        """Rogue rounds, one tick at a time (the soak's loop never blocks on them): a burst when
        nothing else can be rejected meanwhile, then, on later ticks, its accounting against the
        learner's reject counter in `m` (this tick's scrape)."""
        r = self.rogue_open
        if r is not None:  # a burst is out: account for it
            if not m:
                return
            if m.get("mario_learner_start_time_seconds") != r["life"]:
                self.rogue_rounds["interrupted"] += 1
                self.rogue_open = None
                return
            got = int(self.rejected_total(m) - r["r0"])
            if got < ROGUE_BURST and now - r["sent"] < ROGUE_SETTLE_S:
                return
            rogue.drain()
            self.rogue_open = None
            if got > ROGUE_BURST:
                self.rogue_rounds["noisy"] += 1
                return
            self.rogue_rounds["accounted"] += ROGUE_BURST
            self.rogue_rounds["rejected"] += got
            if got < ROGUE_BURST:
                self.rogue_unaccounted.append(r["names"])
                self.log("rogue messages not rejected", sent=r["names"], rejected=got)
            return
        if (
            not m
            or now - self.last_rogue < self.args.rogue_every_s
            or self.learner_start is None
            or now - self.learner_start < 10
            or any(not x.done() for x in self.restarts)
            or self.midwrite_armed.is_set()
            or next_fault_in < ROGUE_SETTLE_S + 1
        ):
            return
        self.last_rogue = now
        self.rogue_open = {
            "r0": self.rejected_total(m),
            "life": self.learner_start,
            "sent": now,
            "names": [rogue.send() for _ in range(ROGUE_BURST)],
        }

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from scripts.chaos.rogue import RoguePeer, real_traffic

        self.t0 = time.time()
        self.log("building the rogue's copies of real traffic")
        traffic = real_traffic(self.args.level, self.args.seed)
        self.log(
            "make up",
            run=str(self.run_dir),
            port=self.port,
            actors=len(self.actors),
            faults=len(self.faults),
        )
        self.deploy.up()
        watcher = threading.Thread(target=self.midwrite_watcher, name="midwrite", daemon=True)
        watcher.start()
        rogue = RoguePeer(f"127.0.0.1:{self.port}", traffic, self.args.seed)
        self.t0 = time.time()
        self.last_progress = self.t0
        pending = list(self.faults)
        last_memory = 0.0
        try:
            while (now := time.time()) - self.t0 < self.duration_s:
                procs = self.deploy.processes()
                m = self.scrape_learner()
                self.observe_learner(m, procs, now)
                self.observe_resumes(procs, now)
                while not self.midwrite_results.empty():
                    res = self.midwrite_results.get()
                    if res is None:
                        self.midwrite_no_write += 1
                        self.log("no checkpoint write within 60 s of arming")
                        continue
                    t_kill, version, torn = res
                    if torn:
                        self.midwrite_kills += 1
                    else:
                        self.midwrite_missed += 1  # the write finished before the kill landed
                    u = max(
                        version, int(self.learner_samples[-1][1]) if self.learner_samples else 0
                    )
                    self.learner_crashed("mid-write" if torn else "crash", t_kill, u, procs)
                if now - last_memory >= MEMORY_EVERY_S:
                    last_memory = now
                    self.sample_memory(procs, now, m)
                elapsed = now - self.t0
                if pending and elapsed >= pending[0].at_s and procs:
                    f = pending[0]
                    did = {
                        "actor": self.kill_actor,
                        "learner": self.kill_learner,
                        "learner_midwrite": self.arm_midwrite,
                    }[f.kind](procs)
                    if did:
                        pending.pop(0)
                    elif elapsed - f.at_s > 120:
                        pending.pop(0)
                        self.log("fault skipped: its target was never ready", kind=f.kind)
                next_in = (pending[0].at_s - elapsed) if pending else math.inf
                self.rogue_tick(rogue, m, next_in, now)
                time.sleep(TICK_S)
        finally:
            self.stop.set()
            self.midwrite_armed.clear()
            self.rogue_sent = dict(sorted(rogue.sent.items()))
            rogue.close()
            self.log("make down")
            try:
                self.deploy.down()
            finally:
                self.learner_start = None
        return self.summary()

    def summary(self) -> dict[str, Any]:
        stale = sorted(p.name for p in self.ckpt_dir.glob(".*.tmp-*"))
        self.check_checkpoints()  # the final one too, written on make down
        resumes = [v for r in self.restarts for v in r.resume_s.values()]
        crashes_log, kills_log = supervisord_exits(self.run_dir / "logs")
        # After the soak's warm-up, and within each life only once it is LIFE_WARMUP_S old: a
        # process killed every minute is mostly young, and each start's climb (imports, env
        # builds, the first update's buffers) would otherwise read as a slope of its own.
        mem_slopes = {}
        warm = min(WARMUP_S, self.duration_s / 3)
        for role, samples in sorted(self.memory.items()):
            after = [
                (t, v) for t, v, age in samples if t - self.t0 >= warm and age >= LIFE_WARMUP_S
            ]
            mem_slopes[role] = slope_per_minute(after)
        return {
            "duration_s": self.duration_s,
            "seed": self.args.seed,
            "actors": len(self.actors),
            "checkpoint_interval_s": self.args.checkpoint_interval_s,
            "faults": {
                "actor_kills": self.actor_kills,
                "learner_kills": self.plain_kills,
                "midwrite_kills": self.midwrite_kills,
                "midwrite_missed": self.midwrite_missed,
                "midwrite_no_write": self.midwrite_no_write,
                "kill9_exits_in_supervisord_log": kills_log,
            },
            "midwrite_kills": self.midwrite_kills,
            "hangs": len(self.hang_gaps) + int(self.gap_open),
            "longest_gap_without_update_s": round(self.longest_gap, 1),
            "learner_down_s": [
                round(r.t_ready - r.t_kill, 2) for r in self.restarts if r.t_ready is not None
            ],
            "resume_s": [round(v, 3) for v in resumes if math.isfinite(v)],
            "resume_timeouts": sum(1 for v in resumes if not math.isfinite(v)),
            "resume_p50_p99_max_s": [
                percentile(resumes, 50),
                percentile(resumes, 99),
                max(resumes, default=None),
            ],
            "learner_crashes": [
                {
                    "kind": r.kind,
                    "updates_at_kill": r.updates_at_kill,
                    "resumed_version": r.resumed_version,
                    "first_version_seen": r.first_version,
                    "lost_updates": r.updates_at_kill - r.resumed_version,
                    "lost_s": round(r.lost_s, 2),
                    "bound_s": round(r.bound_s, 2),
                    "within_interval": lost_within_interval(
                        r.updates_at_kill - r.resumed_version,
                        r.lost_s,
                        self.args.checkpoint_interval_s,
                        r.bound_s - self.args.checkpoint_interval_s,
                    ),
                }
                for r in self.restarts
            ],
            "checkpoints": {
                "checked": self.ckpt_checked,
                "loaded": self.ckpt_loaded,
                "errors": self.ckpt_errors,
                "stale_temp_files": len(stale),
                "stale": stale,
            },
            "memory_slope_mib_per_min": mem_slopes,
            "memory_mib_last": {
                role: round(s[-1][1], 1) for role, s in sorted(self.memory.items()) if s
            },
            "memory_samples": {  # [seconds from the start, MiB, age of the process's life]
                role: [[round(t - self.t0, 1), round(v, 1), round(a, 1)] for t, v, a in s]
                for role, s in sorted(self.memory.items())
            },
            "rogue": {
                **self.rogue_rounds,
                "unaccounted": self.rogue_unaccounted,
                "sent": self.rogue_sent,  # by message/mutation, accounted rounds or not
            },
            "crashes": crashes_log,
            "env_builds": env_builds(self.run_dir / "logs"),
            "events": self.events,
        }


def supervisord_exits(logs: Path) -> tuple[int, int]:
    """(unexpected exits other than kill -9, kill -9 exits) in supervisord's log: kill -9 is the
    soak's own; anything else (an exit status, another signal, a FATAL) is a crash."""
    crashes = kills = 0
    for path in sorted(logs.glob("supervisord.log*")):
        for line in path.read_text(errors="replace").splitlines():
            if "exited:" in line and "not expected" in line:
                if "terminated by SIGKILL" in line:
                    kills += 1
                else:
                    crashes += 1
            elif "gave up:" in line:
                crashes += 1
    return crashes, kills


def env_builds(logs: Path) -> dict[str, Any]:
    """Env builds and failed attempts, from the actors' and the eval actor's logs."""
    times, failures, watchdog = [], 0, 0
    for path in sorted([*logs.glob("actor-*.log*"), *logs.glob("eval.log*")]):
        for line in path.read_text(errors="replace").splitlines():
            if m := re.search(r"built env \d+/\d+ \(\S+\) in ([\d.]+) s", line):
                times.append(float(m.group(1)))
            elif "build attempt" in line and "failed" in line or "could not build env" in line:
                failures += 1
            elif "did not finish within its" in line:
                watchdog += 1
    return {
        "builds": len(times),
        "failures": failures + watchdog,
        "watchdog_exits": watchdog,
        "p50_s": percentile(times, 50),
        "p99_s": percentile(times, 99),
        "max_s": max(times, default=None),
    }


def print_summary(summary: dict[str, Any], checks: list[dict[str, Any]], verdict: str) -> None:
    f = summary["faults"]
    res = summary["resume_p50_p99_max_s"]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    print("\n==== soak summary " + "=" * 60)
    print(
        f"{summary['duration_s'] / 60:.1f} min, seed {summary['seed']}: {f['actor_kills']} actor "
        f"kills, {f['learner_kills']} learner kills, {f['midwrite_kills']} mid-checkpoint kills "
        f"({f['midwrite_missed']} writes finished first)"
    )
    print(
        f"learner down (kill to serving) s: p50 {fmt(percentile(summary['learner_down_s'], 50))}"
        f", max {fmt(max(summary['learner_down_s'], default=None))}; actors streaming again s: "
        f"p50 {fmt(res[0])}, p99 {fmt(res[1])}, max {fmt(res[2])}"
    )
    crashes = summary["learner_crashes"]
    print(
        f"updates lost per crash: {[c['lost_updates'] for c in crashes]}; work lost s: "
        f"{[c['lost_s'] for c in crashes]} (one interval + one update: "
        f"{[c['bound_s'] for c in crashes]})"
    )
    b = summary["env_builds"]
    print(
        f"env builds {b['builds']}, failures {b['failures']}; rogue {summary['rogue']['accounted']}"
        f" accounted, {summary['rogue']['rejected']} rejected, "
        f"{summary['rogue']['interrupted']} rounds interrupted, {summary['rogue']['noisy']} noisy"
    )
    for c in checks:
        mark = {True: "ok  ", False: "FAIL", None: "info"}[c["ok"]]
        print(f"  {mark} {c['check']}: {c['value']} (target {c['target']})")
    print(verdict)


# ---- env builds ---------------------------------------------------------------------------


def build_worker(count: int, level: str, timeout_s: float, retries: int) -> int:
    """Build `count` envs one after another; one JSON line per build on stdout."""
    from actor.config import ActorConfig
    from common.env import EnvBuildError, build_envs

    spec = ActorConfig(level=level).env_spec()  # the actors' env, as they build it
    for _ in range(count):
        start = time.perf_counter()
        try:
            env = build_envs(spec, 1, timeout_s=timeout_s, retries=retries)[0]
        except EnvBuildError as exc:
            print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
            continue
        env.close()
        print(json.dumps({"ok": True, "s": time.perf_counter() - start}), flush=True)
    return 0


def builds(args: argparse.Namespace) -> int:
    from actor.config import ActorConfig

    defaults = ActorConfig()
    times: list[float] = []
    failures: list[str] = []
    restarts = 0
    start = time.perf_counter()
    while len(times) + len(failures) < args.builds:
        left = args.builds - len(times) - len(failures)
        argv = [
            sys.executable,
            "-m",
            "scripts.chaos.soak",
            "--build-worker",
            str(left),
            "--level",
            args.level,
        ]
        argv += ["--build-timeout-s", str(defaults.build_timeout_s)]
        argv += ["--build-retries", str(defaults.build_retries)]
        with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True) as worker:
            assert worker.stdout is not None
            for line in worker.stdout:
                row = json.loads(line)
                if row["ok"]:
                    times.append(row["s"])
                else:
                    failures.append(row["error"])
                done = len(times) + len(failures)
                if done % 100 == 0:
                    print(f"{done}/{args.builds} builds, {len(failures)} failed", flush=True)
        if worker.returncode:
            restarts += 1
            failures.append(f"build worker exited {worker.returncode} (watchdog)")
    result = {
        "builds": args.builds,
        "failures": len(failures),
        "failure_messages": failures[:20],
        "worker_restarts": restarts,
        "p50_s": percentile(times, 50),
        "p90_s": percentile(times, 90),
        "p99_s": percentile(times, 99),
        "max_s": max(times, default=None),
        "wall_s": round(time.perf_counter() - start, 1),
        "timeout_s": defaults.build_timeout_s,
        "retries": defaults.build_retries,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    ok = not failures
    print("PASS" if ok else "FAIL", f"{args.builds} env builds, {len(failures)} failures")
    return 0 if ok else 1


# ---- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="soak length (default 30)")
    p.add_argument(
        "--run-dir", default="runs/soak", help="run dir; emptied first (default runs/soak)"
    )
    p.add_argument("--actors", type=int, default=2, help="training actors (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seeds the fault schedule and the rogue")
    p.add_argument("--level", default="1-1")
    p.add_argument("--device", default="cpu", help="learner device (default cpu)")
    p.add_argument("--checkpoint-interval-s", type=float, default=5.0)
    p.add_argument("--actor-kill-every-s", type=float, default=30.0)
    p.add_argument("--learner-kill-every-s", type=float, default=300.0)
    p.add_argument("--midwrite-kill-every-s", type=float, default=75.0)
    p.add_argument("--rogue-every-s", type=float, default=3.0, help="seconds between rogue bursts")
    p.add_argument("--learner-args", default="", help="more learner flags")
    p.add_argument("--actor-args", default="", help="more actor flags")
    p.add_argument("--builds", type=int, default=0, help="instead of a soak: build N envs")
    p.add_argument("--out", default="", help="--builds: also write the result here (JSON)")
    p.add_argument("--build-worker", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--build-timeout-s", type=float, default=60.0, help=argparse.SUPPRESS)
    p.add_argument("--build-retries", type=int, default=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    problems = []
    if args.minutes <= 0:
        problems.append("--minutes must be > 0")
    if args.actors < 1:
        problems.append("--actors must be >= 1")
    if args.checkpoint_interval_s <= 0:
        problems.append("--checkpoint-interval-s must be > 0")
    if problems:
        p.error("; ".join(problems))
    if args.build_worker:
        return build_worker(args.build_worker, args.level, args.build_timeout_s, args.build_retries)
    if args.builds:
        return builds(args)

    run_dir = Path(args.run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        if not (run_dir / "soak.json").exists() and not (run_dir / ".soak").exists():
            p.error(f"{run_dir} holds something other than a soak; pass another --run-dir")
        if (run_dir / "supervisord.pid").exists():
            p.error(f"{run_dir} has a running supervisord; make down RUN={run_dir} first")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / ".soak").touch()
    soak = Soak(args)
    summary = soak.run()
    checks = judge(summary, Targets())
    failed = [c["check"] for c in checks if c["ok"] is False]
    verdict = "PASS" if not failed else "FAIL: " + "; ".join(failed)
    summary["checks"] = checks
    summary["verdict"] = verdict
    (run_dir / "soak.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print_summary(summary, checks, verdict)
    print(f"written to {run_dir / 'soak.json'}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
