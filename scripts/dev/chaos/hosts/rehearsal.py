"""The rehearsal's loop: the hosts built, every tick the scrapes into the trackers, the next fault
fired once the previous one is over (healed, and every actor it struck accounted for), healed
when its time is up; then Prometheus asked what it saw, and the summary."""

from __future__ import annotations

import argparse
import json
import math
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from scripts.dev.chaos import netns
from scripts.dev.chaos.hosts import layout, watch
from scripts.dev.chaos.hosts.cluster import Cluster
from scripts.dev.chaos.hosts.schedule import Fault, planned
from scripts.dev.chaos.soak import measure
from scripts.dev.chaos.soak.schedule import settle_s
from scripts.service.host import local_processes, one_lane

TICK_S = 0.25
WARM_TIMEOUT_S = 600.0
MEMORY_EVERY_S = 5.0
WARMUP_S = 300.0
FINISH_S = 120.0


class Rehearsal:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.run_dir = Path(args.run_dir).resolve()
        self.duration_s = args.minutes * 60
        self.settle_s = settle_s(self.duration_s)
        self.faults = planned(args, self.duration_s, layout.actor_host_labels(layout.read()))
        self.trackers: list[watch.Tracker] = []
        self.lives = watch.Lives()
        self.memory = measure.Memory()
        self.events: list[dict[str, Any]] = []
        self.scrapers: dict[str, watch.Scraper] = {}
        self.t0 = time.time()
        self.learner_kills = 0
        self.crashes: list[str] = []
        self.last_memory = 0.0

    def log(self, event: str, **kw: Any) -> None:
        t = time.time() - self.t0
        self.events.append({"t": round(t, 2), "event": event, **kw})
        print(f"[hosts {t:7.1f} s] {event}", *(f"{k}={v}" for k, v in kw.items()), flush=True)

    # -- the hosts -----------------------------------------------------------------------------

    def scrape_host(self, label: str) -> None:
        if (old := self.scrapers.pop(label, None)) is not None:
            old.stop()
        host = self.cluster.hosts[label]
        self.scrapers[label] = watch.Scraper(host, self.cluster.metrics_urls(label))

    def scrapes(self) -> watch.Scrapes:
        out: watch.Scrapes = {}
        for s in self.scrapers.values():
            out |= s.latest
        return out

    def actors(self) -> list[str]:
        """The actors on the actor hosts alive now: those across the learner's link."""
        c = self.cluster
        return [a for label in c.actor_hosts if label in c.hosts for a in c.actors_on(label)]

    def all_actors(self) -> list[str]:
        """Those and the learner host's own."""
        return self.cluster.actors_on("learner") + self.actors()

    @property
    def chunk_steps(self) -> int:
        """Agent steps in one chunk of one lane: T x the lane's envs."""
        return self.args.unroll_length * self.args.num_envs // self.lanes

    @property
    def lanes(self) -> int:
        h = self.cluster.settings[self.cluster.actor_hosts[0]]
        return min(self.args.num_envs, 1 if one_lane(h.n, local_processes(h), h.cores) else 2)

    # -- faults --------------------------------------------------------------------------------

    def fire(self, fault: Fault, now: float, scrapes: watch.Scrapes) -> None:
        c, learner = self.cluster, scrapes.get("learner", {})
        version = int(learner.get(watch.VERSION, 0))
        if fault.kind in ("partition", "host_death"):
            actors = c.actors_on(fault.host)
        elif fault.kind == "learner_link":
            actors = self.actors()  # the learner host's own actors are not cut off
        else:
            actors = self.all_actors()
        base = dict(kind=fault.kind, host=fault.host, t_start=now, length_s=fault.length_s,
                    actors=actors, version_at_start=version)  # fmt: skip
        if fault.kind in ("partition", "learner_link"):
            tracker: watch.Tracker = watch.Cut(**base, chunk_steps=self.chunk_steps)
            tracker.figures["address"] = c.hosts[fault.host].address
            c.net.link(c.hosts[fault.host], up=False)
        elif fault.kind == "broadcast_block":
            tracker = watch.Block(**base, max_lag=self.args.max_policy_lag)
            c.net.block(c.hosts["learner"], c.port + 1)
        elif fault.kind == "host_death":
            # timed from the kill itself; its scraper stops after (it may be mid-scrape for a
            # second or two, which would otherwise count as the learner's)
            base["t_start"] = time.time()
            c.kill_host(fault.host)
            self.scrapers.pop(fault.host).stop()
            tracker = watch.Death(**base, actor_timeout_s=self.args.actor_timeout_s)
        else:
            tracker = watch.Restart(**base)
            tracker.start(scrapes)
            c.kill_learner()  # supervisord starts it again
            self.learner_kills += 1
            tracker.healed(now, version)
        if not isinstance(tracker, watch.Restart):
            tracker.start(scrapes)  # type: ignore[attr-defined]
        self.trackers.append(tracker)
        self.log(f"{fault.kind} of {fault.host}", length_s=fault.length_s, version=version)

    def heal(self, t: watch.Tracker, now: float, scrapes: watch.Scrapes) -> None:
        c = self.cluster
        version = int(scrapes.get("learner", {}).get(watch.VERSION, t.last_version))
        if t.kind in ("partition", "learner_link"):
            c.net.link(c.hosts[t.host], up=True)
        elif t.kind == "broadcast_block":
            c.net.unblock(c.hosts["learner"])
        elif t.kind == "host_death":
            self.log(f"a new machine replaces {t.host}: make up there")
            c.replace_host(t.host)
            self.scrape_host(t.host)
        t.healed(time.time() if t.kind == "host_death" else now, version)
        self.log(f"{t.kind} of {t.host} healed", updates_during=version - t.version_at_start)

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        a = self.args
        learner_args = (
            f"--checkpoint-interval-s {a.checkpoint_interval_s:g} --actor-timeout-s "
            f"{a.actor_timeout_s:g} --unroll-length {a.unroll_length} --max-policy-lag "
            f"{a.max_policy_lag} {a.learner_args}"
        )
        actor_args = f"--num-envs {a.num_envs} {a.actor_args}"
        with netns.Network() as net:
            self.cluster = Cluster(self.run_dir, net, levels=a.levels, device=a.device,
                                   learner_args=learner_args, actor_args=actor_args)  # fmt: skip
            try:
                self.log("building the hosts", run=self.run_dir, faults=len(self.faults))
                self.cluster.build()
                for label in self.cluster.hosts:
                    self.scrape_host(label)
                self.warm_up()
                self.loop()
                prometheus = self.ask_prometheus()
            finally:
                self.log("stopping every host")
                for s in self.scrapers.values():
                    s.stop()
                exits = self.actor_host_exits()
                self.cluster.stop()
        return self.summary(prometheus, exits)

    def warm_up(self) -> None:
        """Until every actor has had a chunk received and the learner has updated."""
        deadline = time.monotonic() + WARM_TIMEOUT_S
        while time.monotonic() < deadline:
            s = self.scrapes()
            everyone = self.all_actors()
            streaming = [a for a in everyone if s.get(a, {}).get(watch.ACK_TS, 0) > 0]
            if len(streaming) == len(everyone) and s["learner"].get(watch.VERSION, 0) >= 1:
                self.t0 = time.time()
                self.log("every actor streaming; faults start", actors=len(streaming))
                return
            time.sleep(1.0)
        raise RuntimeError(f"not every actor streamed within {WARM_TIMEOUT_S:.0f} s: see "
                           f"{self.run_dir}/*/logs")  # fmt: skip

    def loop(self) -> None:
        """Faults for the run's length (none fired in the last `settle` seconds), then ticks
        until the last fault's figures are in (at most FINISH_S more)."""
        self.pending = list(self.faults)
        self.watch = measure.LearnerWatch(last_progress=self.t0)
        self.free_at = self.t0  # when the previous fault was over
        while (now := time.time()) - self.t0 < self.duration_s:
            self.tick(now, fire=now - self.t0 <= self.duration_s - self.settle_s)
            time.sleep(TICK_S)
        deadline = time.time() + FINISH_S
        while (now := time.time()) < deadline and any(not t.complete(now) for t in self.trackers):
            self.tick(now, fire=False)
            time.sleep(TICK_S)
        self.not_reached = [f"{f.kind} of {f.host}" for f in self.pending]

    def tick(self, now: float, fire: bool) -> None:
        scrapes = self.scrapes()
        self.lives.observe(scrapes)
        self.watch.observe(scrapes.get("learner", {}), now, actor_up=True)
        self.sample_memory(scrapes, now)
        for t in self.trackers:
            t.observe(now, scrapes)
            if t.t_end is None and now - t.t_start >= t.length_s:
                self.heal(t, now, scrapes)
        busy = [t for t in self.trackers if not t.done(now)]
        if not busy and self.trackers and self.free_at < self.trackers[-1].t_start:
            self.free_at = now
        due = fire and self.pending and now - self.t0 >= self.pending[0].at_s
        if (
            due
            and not busy
            and now - self.free_at >= self.args.gap_s / 2
            and self.ready(scrapes, now)
        ):
            self.fire(self.pending.pop(0), now, scrapes)
        for name, code in self.cluster.unexpected_exits().items():
            self.crashes.append(f"{name} exited {code}")
            self.log("CRASH", process=name, status=code)
            self.cluster.procs.pop(name)

    def ready(self, scrapes: watch.Scrapes, now: float) -> bool:
        """Every actor streams in its present life (a replacement host's have built their envs
        and had a chunk received), so the next fault strikes actors that are at work; and the
        learner has served for `gap_s`: a learner just restarted works through every actor's
        registration and held chunks, and its late reading of them would count as the fault's."""
        started = scrapes.get("learner", {}).get("mario_learner_start_time_seconds", math.inf)
        if now - started < self.args.gap_s:
            return False
        for name in self.all_actors():
            m = scrapes.get(name, {})
            if m.get(watch.ACK_TS, 0.0) < m.get("process_start_time_seconds", math.inf):
                return False
        return True

    def sample_memory(self, scrapes: watch.Scrapes, now: float) -> None:
        if now - self.last_memory < MEMORY_EVERY_S:
            return
        self.last_memory = now
        for name, m in scrapes.items():
            role = name.split("-")[0]
            if (start := m.get("process_start_time_seconds")) is not None:
                self.memory.sample(role, m, now, now - start)

    def actor_host_exits(self) -> list[str]:
        """Exits supervisord logged on the hosts alive now, other than make down's and the
        learner kills the rehearsal made."""
        out = []
        for label in ("learner", *self.cluster.actor_hosts):
            if label in self.cluster.hosts and label in self.cluster.settings:
                sup = self.cluster.supervisor(label)
                exits = [e for e in sup.exits() if not e.expected]
                kills = [e for e in exits if e.name == "learner" and "SIGKILL" in e.how]
                exits = [e for e in exits if e not in kills[: self.learner_kills]]
                out += [f"{label}: {e.name} {e}" for e in exits]
        return out

    def ask_prometheus(self) -> dict[str, Any]:
        """What the wall showed: every target scraped at some point, and each partitioned host's
        targets down while it was cut off."""
        url = self.cluster.prometheus_url
        span = f"{math.ceil(time.time() - self.t0)}s"
        ever = {
            f"{r['metric'].get('job')} {r['metric'].get('instance')}": float(r["value"][1])
            for r in _query(url, f"max_over_time(up[{span}])")
        }
        partitions = []
        for t in self.trackers:
            if t.kind != "partition" or t.t_end is None:
                continue
            address = t.figures["address"]
            rng = f"{max(1, int(t.t_end - t.t_start) - 1)}s"
            seen = _query(url, f'min_over_time(up{{instance=~"{address}:.*"}}[{rng}])', t.t_end)
            partitions.append({"host": t.host, "at_s": round(t.t_start - self.t0, 1),
                               "up_min": {r["metric"]["instance"]: float(r["value"][1])
                                          for r in seen}})  # fmt: skip
        fired = sorted(
            {
                r["metric"]["alertname"]
                for r in _query(url, f"max_over_time(ALERTS{{alertstate='firing'}}[{span}])")
            }
        )
        return {"targets_ever_up": ever, "partitions_seen": partitions, "alerts_fired": fired}

    def summary(self, prometheus: dict[str, Any], exits: list[str]) -> dict[str, Any]:
        return {
            "duration_s": self.duration_s,
            "seed": self.args.seed,
            "lanes": self.lanes,
            "actor_timeout_s": self.args.actor_timeout_s,
            "heartbeat_interval_s": 1.0,
            "faults": [
                t.summary() | {"at_s": round(t.t_start - self.t0, 1)} for t in self.trackers
            ],
            "faults_not_reached": self.not_reached,
            "hangs": self.watch.hangs,
            "longest_gap_without_update_s": round(self.watch.longest_gap, 1),
            "chunks": self.lives.summary(),
            **self.memory.summary(self.t0, min(WARMUP_S, self.duration_s / 3)),
            "crashes": self.crashes + exits,
            "prometheus": prometheus,
            "events": self.events,
        }


def _query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
    with urllib.request.urlopen(
        f"{base}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10
    ) as r:
        return json.loads(r.read())["data"]["result"]
