"""The soak's loop: every tick it reads supervisord and every process's /metrics, feeds the
trackers, fires the next fault when its target is ready, runs a rogue round; then the summary."""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from common.env import WATCHDOG_EXIT_CODE
from common.rundir import RunDir
from scripts.dev.chaos.rogue import RoguePeer, real_traffic
from scripts.dev.chaos.soak import measure
from scripts.dev.chaos.soak.deployment import STARTSECS, Deployment, running_for
from scripts.dev.chaos.soak.faults import MidwriteKill, MidwriteKiller, Restart
from scripts.dev.chaos.soak.judge import percentile
from scripts.dev.chaos.soak.schedule import (
    Fault,
    learner_faults_end_s,
    memory_from_s,
    planned,
    settle_s,
)

RESUME_TIMEOUT_S = 60.0
ACTOR_SCRAPE_S = 1.0  # and every tick while a learner restart is timed
MEMORY_EVERY_S = 5.0
TICK_S = 0.2


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.run_dir = Path(args.run_dir).resolve()
        self.duration_s = args.minutes * 60
        self.rng = random.Random(args.seed)  # which actor to kill
        settings = {"levels": args.levels, "device": args.device, "actor_args": args.actor_args}
        flags = f"--checkpoint-interval-s {args.checkpoint_interval_s:g} {args.learner_args}"
        self.deploy = Deployment(self.run_dir, args.actors, learner_args=flags, **settings)
        self.actors = self.deploy.actors
        self.faults = planned(args, self.duration_s)
        self.checkpoints = measure.Checkpoints(RunDir(self.run_dir))
        self.lives = measure.ActorLives()
        self.memory = measure.Memory()
        self.restarts: list[Restart] = []
        self.kills = dict.fromkeys(["actor_kills", "learner_kills", "midwrite_kills"], 0)
        self.kills |= {"midwrite_missed": 0, "midwrite_no_write": 0}
        self.events: list[dict[str, Any]] = []
        # pids the soak killed: supervisord reports one RUNNING until it has reaped it, which on
        # a loaded box can take longer than a tick, and such a process is no target any more
        self.killed: set[int] = set()
        self.t0 = time.time()  # again when the deployment is up
        self.last_actor_scrape = self.last_memory = 0.0
        self.watch: measure.LearnerWatch  # started once the deployment is up
        self.midwrite = MidwriteKiller(RunDir(self.run_dir).checkpoints)  # idle until armed

    def log(self, event: str, **kw: Any) -> None:
        t = time.time() - self.t0
        self.events.append({"t": round(t, 2), "event": event, **kw})
        print(f"[soak {t:7.1f} s] {event}", *(f"{k}={v}" for k, v in kw.items()), flush=True)

    def timing_a_restart(self) -> bool:
        """A learner restart is being timed, or about to be: no other fault, no rogue round."""
        return any(not r.done() for r in self.restarts) or self.midwrite.armed.is_set()

    # -- faults ----------------------------------------------------------------------------

    def learner_crashed(self, kind: str, t_kill: float, updates: int, procs: dict) -> None:
        """Book one learner kill (the learner is dead when this runs: nothing moves on disk)."""
        resumed = self.checkpoints.newest_version()
        saved = self.checkpoints.check()
        # since the resumed checkpoint, or this life's start if later: the time before it is lost
        # to the previous crash
        lost_s = t_kill - max(saved.get(resumed, t_kill), self.watch.start or 0.0)
        # the longest update spacing seen, plus two ticks: an update is seen at the next scrape
        bound_s = self.args.checkpoint_interval_s + self.watch.longest_spacing + 2 * TICK_S
        alive = {a: procs[a]["pid"] for a in self.actors if self.running_for(procs, a) >= 0}
        self.restarts.append(Restart(kind, t_kill, updates, resumed, lost_s, bound_s, alive))
        self.log("learner killed", kind=kind, updates=updates, resumes_from=resumed,
                 lost=updates - resumed, lost_s=round(lost_s, 2), bound_s=round(bound_s, 2))  # fmt: skip

    def running_for(self, procs: dict, name: str) -> float:
        """Seconds `name` has been RUNNING; -1 if it is not, or is a process the soak killed."""
        return -1.0 if procs.get(name, {}).get("pid") in self.killed else running_for(procs, name)

    def kill(self, pid: int) -> bool:
        """kill -9 `pid`; False if it had already exited on its own (supervisord not told yet)."""
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.killed.add(pid)
        return True

    def fire(self, fault: Fault, procs: dict) -> bool:
        """Fire `fault` if its target is ready; False: try again on a later tick."""
        if fault.kind == "actor":
            # no actor killed while a restart is timed: the resume is of actors that lived through it
            ready = [a for a in self.actors if self.running_for(procs, a) >= STARTSECS]
            if self.timing_a_restart() or not ready:
                return False
            name = self.rng.choice(ready)
            if not self.kill(procs[name]["pid"]):
                return False
            self.kills["actor_kills"] += 1
            self.log("actor killed", actor=name)
            return True
        midwrite = self.midwrite.armed.is_set() or not self.midwrite.results.empty()
        if self.running_for(procs, "learner") < STARTSECS or midwrite:
            return False
        if fault.kind == "learner_midwrite":
            self.midwrite.armed.set()
            self.log("armed: kill the learner at its next checkpoint write")
            return True
        version = int(self.deploy.scrape("learner").get("mario_policy_version", 0))
        if not self.kill(procs["learner"]["pid"]):
            return False
        self.kills["learner_kills"] += 1
        self.learner_crashed("crash", time.time(), version, procs)
        return True

    def fire_due(self, pending: list[Fault], procs: dict, elapsed: float) -> None:
        """Fire the first of `pending` once it is due and its target ready, and pop it. One held
        back into the closing calm is dropped: the last seconds stay calm so that the last
        faults' effects (a new actor life, a restart) are measured."""
        if not pending or elapsed < pending[0].at_s or not procs:
            return
        if elapsed >= self.duration_s - settle_s(self.duration_s):
            self.log("fault skipped: due in the closing calm", kind=pending.pop(0).kind)
        elif self.fire(pending[0], procs):
            pending.pop(0)
        elif elapsed - pending[0].at_s > 120:
            self.log("fault skipped: its target was never ready", kind=pending.pop(0).kind)

    def midwrite_done(self, kill: MidwriteKill | None, procs: dict) -> None:
        if kill is None:
            self.kills["midwrite_no_write"] += 1
            self.log("no checkpoint write within 60 s of arming")
            return
        self.killed.add(kill.pid)
        # a write that finished before the kill landed makes it a plain crash
        self.kills["midwrite_kills" if kill.torn else "midwrite_missed"] += 1
        kind = "mid-write" if kill.torn else "crash"
        self.learner_crashed(kind, kill.t_kill, max(kill.version, self.watch.version), procs)

    # -- measurement -----------------------------------------------------------------------

    def observe(self, procs: dict, now: float) -> dict[str, float]:
        """One tick's scrapes into the trackers; the learner's scrape."""
        m = self.deploy.scrape("learner")
        actor_up = any(self.running_for(procs, a) >= 0 for a in self.actors)
        hangs = self.watch.hangs
        if self.watch.observe(m, now, actor_up):
            for r in self.restarts:
                if r.t_ready is None and self.watch.start and self.watch.start >= r.t_kill:
                    r.t_ready, r.first_version = self.watch.start, self.watch.version
                    down_s = round(r.t_ready - r.t_kill, 2)
                    self.log("learner serving again", down_s=down_s, version=r.first_version)
        if self.watch.hangs > hangs:
            self.log("HANG: no learner update", seconds=round(now - self.watch.last_progress, 1))
        timing = [r for r in self.restarts if not r.done()]
        memory_due = now - self.last_memory >= MEMORY_EVERY_S
        if not (memory_due or timing or now - self.last_actor_scrape >= ACTOR_SCRAPE_S):
            return m
        self.last_actor_scrape = now
        scrapes = {"learner": m} | {n: self.deploy.scrape(n) for n in [*self.actors, "eval"]}
        for name in self.actors:
            self.lives.observe(name, scrapes[name])
        for r in timing:
            for name in r.actors:
                r.observe(name, procs.get(name, {}).get("pid"), scrapes[name], RESUME_TIMEOUT_S)
            if r.done():
                after_s = {k: round(v, 2) for k, v in r.resume_s.items()}
                self.log("actors streaming again", dropped=r.dropped, after_s=after_s)
        if memory_due:
            self.last_memory = now
            for name, samples in scrapes.items():
                role = "actor" if name.startswith("actor-") else name
                self.memory.sample(role, samples, now, self.running_for(procs, name))
        return m

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.log("building the rogue's copies of real traffic")
        traffic = real_traffic(self.args.levels, self.args.seed)
        port, pending = self.deploy.host.port, list(self.faults)
        self.log(
            "make up", run=self.run_dir, port=port, actors=len(self.actors), faults=len(pending)
        )
        self.deploy.make("up")  # returns once supervisord answers
        peer = RoguePeer(f"127.0.0.1:{port}", traffic, self.args.seed)
        rogue = measure.RogueRounds(peer, self.args.rogue_every_s)
        self.t0 = time.time()
        self.watch = measure.LearnerWatch(last_progress=self.t0)
        try:
            while (now := time.time()) - self.t0 < self.duration_s:
                procs = self.deploy.processes()
                m = self.observe(procs, now)
                while not self.midwrite.results.empty():
                    self.midwrite_done(self.midwrite.results.get(), procs)
                elapsed = now - self.t0
                self.fire_due(pending, procs, elapsed)
                next_fault_s = pending[0].at_s - elapsed if pending else math.inf
                settled = now - (self.watch.start or now) >= 10 and not self.timing_a_restart()
                quiet = settled and next_fault_s >= measure.ROGUE_SETTLE_S + 1
                if (names := rogue.tick(m, now, quiet)) is not None:
                    self.log("rogue messages not rejected", sent=names)
                time.sleep(TICK_S)
        finally:
            self.midwrite.stop()
            peer.close()
            self.log("make down")
            self.deploy.down()
        return self.summary(rogue)

    def last_words(self, name: str) -> str:
        """The end of program `name`'s log (its last traceback, if it has one); "" for none."""
        try:
            return measure.last_words((RunDir(self.run_dir).logs / f"{name}.log").read_text())
        except OSError:
            return ""

    def summary(self, rogue: measure.RogueRounds) -> dict[str, Any]:
        resumes = [v for r in self.restarts for v in r.resume_s.values()]
        finite = [v for v in resumes if math.isfinite(v)]
        p50, p99 = percentile(finite, 50), percentile(finite, 99)
        down_s = [round(r.t_ready - r.t_kill, 2) for r in self.restarts if r.t_ready is not None]
        exits = self.deploy.supervisor.exits()
        kill9 = sum(e.how == "terminated by SIGKILL" for e in exits)  # the soak's own kills
        actor_exits = [e.how for e in exits if e.name.startswith(("actor-", "eval"))]
        watchdog = actor_exits.count(f"exit status {WATCHDOG_EXIT_CODE}")
        share = self.args.learner_faults_share
        crashed = [e for e in exits if not e.expected and e.how != "terminated by SIGKILL"]
        return {
            "duration_s": self.duration_s,
            "seed": self.args.seed,
            "actors": len(self.actors),
            "checkpoint_interval_s": self.args.checkpoint_interval_s,
            "faults": self.kills | {"kill9_exits_in_supervisord_log": kill9},
            "midwrite_kills": self.kills["midwrite_kills"],
            "learner_faults_end_s": learner_faults_end_s(self.duration_s, share),
            "hangs": self.watch.hangs,
            "longest_gap_without_update_s": round(self.watch.longest_gap, 1),
            "learner_down_s": down_s,
            "resume_s": [round(v, 3) for v in finite],
            "resume_timeouts": len(resumes) - len(finite),
            "resume_p50_p99_max_s": [p50, p99, max(finite, default=None)],
            "learner_crashes": [r.summary() for r in self.restarts],
            "checkpoints": self.checkpoints.summary(),
            "memory_from_s": memory_from_s(self.duration_s, share),
            **self.memory.summary(self.t0, memory_from_s(self.duration_s, share)),
            "rogue": rogue.summary(),
            # exits other than the soak's own kill -9: an exit status, another signal, a FATAL
            "crashes": len(crashed),
            "crashed": [
                {"name": e.name, "how": e.how, "log": self.last_words(e.name)} for e in crashed
            ],
            "env_builds": self.lives.summary(watchdog),
            "events": self.events,
        }
