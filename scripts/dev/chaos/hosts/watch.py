"""What the rehearsal measures: each host's processes scraped from inside that host (so a host
cut off from the others is still seen), and one tracker per fault, fed every tick.

Every figure comes from the processes' own /metrics: an actor's steps, chunks sent and the time
the learner last acknowledged one of its chunks (`mario_actor_last_ack_timestamp_seconds`: the
learner received it, with a credit or owing one while its queue is full), the learner's policy
version and chunk counts."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

from common import status
from scripts.dev.chaos import netns

SCRAPE_S = 0.25
RESUME_TIMEOUT_S = 60.0

STEPS, SENT = "mario_actor_agent_steps_total", "mario_actor_chunks_sent_total"
ACK_TS = "mario_actor_last_ack_timestamp_seconds"
CREDIT_TS = "mario_actor_last_credit_timestamp_seconds"
REGISTERED_TS = "mario_actor_registered_timestamp_seconds"
SENT_TS = "mario_actor_last_chunk_timestamp_seconds"
VERSION = "mario_policy_version"
Scrapes = dict[str, dict[str, float]]  # process name -> flattened samples ({}: no answer)


class Scraper:
    """A thread inside one host's network namespace, scraping its processes every SCRAPE_S."""

    def __init__(self, host: netns.Host, urls: dict[str, str]):
        self.host, self.urls = host, urls
        self.latest: Scrapes = dict.fromkeys(urls, {})
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"scrape-{host.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with netns.inside(self.host):
            while not self.stopping.is_set():
                for name, url in self.urls.items():
                    self.latest[name] = status.scrape(url, timeout_s=0.5)
                self.stopping.wait(SCRAPE_S)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)


def streaming_again(
    into: dict[str, float],
    name: str,
    m: dict[str, float],
    since: float,
    now: float,
    timeout_s: float,
    stamp: str = ACK_TS,
) -> None:
    """Book once into `into[name]` how long after `since` the learner acknowledged a chunk of
    actor `name` (its scrape `m`), i.e. received it; inf once `timeout_s` passed without.
    `stamp`: another of the actor's timestamps instead (its registration, its chunk sent, the
    learner's next credit)."""
    if name in into:
        return
    if m.get(stamp, 0.0) >= since:
        into[name] = m[stamp] - since
    elif now - since > timeout_s:
        into[name] = math.inf


def chunks_received(m: dict[str, float]) -> float:
    """Every chunk the learner has received in this life: accepted, stale, rejected, duplicate."""
    return sum(v for k, v in m.items() if k.startswith("mario_learner_chunks_total{"))


@dataclass
class Tracker:
    """One fault: what the learner did meanwhile, and what it did to the actors it struck."""

    kind: str
    host: str
    t_start: float
    length_s: float
    actors: list[str]  # the actors it cuts off (or kills)
    version_at_start: int
    t_end: float | None = None  # when it was healed (link up, port open, replacement started)
    version_at_end: int | None = None
    longest_gap_s: float = 0.0  # without a learner update, while it lasted
    last_update: float = 0.0
    last_version: int = 0
    figures: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.last_update, self.last_version = self.t_start, self.version_at_start

    def during(self, now: float, learner: dict[str, float]) -> None:
        if learner and (v := int(learner.get(VERSION, 0))) != self.last_version:
            self.last_update, self.last_version = now, v
        self.longest_gap_s = max(self.longest_gap_s, now - self.last_update)

    def healed(self, now: float, version: int) -> None:
        self.t_end, self.version_at_end = now, version

    def observe(self, now: float, scrapes: Scrapes) -> None:
        if self.t_end is None:
            self.during(now, scrapes.get("learner", {}))

    def done(self, now: float) -> bool:
        """The next fault may strike."""
        return self.t_end is not None

    def complete(self, now: float) -> bool:
        """Every figure is in."""
        return self.done(now)

    def summary(self) -> dict[str, Any]:
        updates = (
            None if self.version_at_end is None else self.version_at_end - self.version_at_start
        )
        return {
            "kind": self.kind, "host": self.host, "at_s": self.t_start, "length_s": self.length_s,
            "actors": self.actors, "updates_during": updates,
            "longest_gap_without_update_s": round(self.longest_gap_s, 2), **self.figures,
        }  # fmt: skip


@dataclass
class Cut(Tracker):
    """A link down (an actor host's, or the learner host's): how much each cut-off actor made
    that it did not send (in chunks of one lane: `chunk_steps`), and how soon after the link's
    return the learner received its chunks again; on the way, when the learner welcomed it again
    and when it sent its first chunk, and after, when the learner next granted it a credit (its
    queue full, the train loop's pace), so a slow return shows which step took the time."""

    chunk_steps: int = 1
    base: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (steps, sent)
    held: dict[str, float] = field(default_factory=dict)
    sent: dict[str, float] = field(default_factory=dict)
    resume_s: dict[str, float] = field(default_factory=dict)
    registered_s: dict[str, float] = field(default_factory=dict)
    sent_s: dict[str, float] = field(default_factory=dict)
    credit_s: dict[str, float] = field(default_factory=dict)

    def start(self, scrapes: Scrapes) -> None:
        for name in self.actors:
            m = scrapes.get(name, {})
            if STEPS in m:
                self.base[name] = (m[STEPS], m.get(SENT, 0.0))

    def observe(self, now: float, scrapes: Scrapes) -> None:
        super().observe(now, scrapes)
        for name, (steps0, sent0) in self.base.items():
            m = scrapes.get(name, {})
            if STEPS not in m or m[STEPS] < steps0:
                continue  # not answering, or a new life
            if self.t_end is None:
                sent = m.get(SENT, 0.0) - sent0
                made_unsent = (m[STEPS] - steps0 - sent * self.chunk_steps) / self.chunk_steps
                self.held[name] = max(self.held.get(name, 0.0), made_unsent)
                self.sent[name] = sent
            else:
                streaming_again(self.resume_s, name, m, self.t_end, now, RESUME_TIMEOUT_S)
                for into, stamp in ((self.registered_s, REGISTERED_TS), (self.sent_s, SENT_TS),
                                    (self.credit_s, CREDIT_TS)):  # fmt: skip
                    streaming_again(into, name, m, self.t_end, now, RESUME_TIMEOUT_S, stamp)

    def done(self, now: float) -> bool:
        return self.t_end is not None and set(self.resume_s) >= set(self.base)

    def summary(self) -> dict[str, Any]:
        self.figures |= {
            "chunk_steps": self.chunk_steps,
            "most_chunks_held": round(max(self.held.values(), default=0.0), 2),
            "held_chunks": {k: round(v, 2) for k, v in self.held.items()},
            "sent_while_cut": self.sent,
            "streaming_again_s": {k: round(v, 2) for k, v in self.resume_s.items()},
            "registered_again_s": {k: round(v, 2) for k, v in self.registered_s.items()},
            "chunk_sent_again_s": {k: round(v, 2) for k, v in self.sent_s.items()},
            "credit_again_s": {k: round(v, 2) for k, v in self.credit_s.items()},
        }
        return super().summary()


@dataclass
class Block(Tracker):
    """The learner's broadcast port blocked: each actor's lag (learner version minus its own) while
    it lasts, and how soon after it ends every actor is within the lag limit."""

    max_lag: int = 50
    lags: dict[str, int] = field(default_factory=dict)
    fresh_s: dict[str, float] = field(default_factory=dict)
    counts_at_start: dict[str, float] = field(default_factory=dict)

    def start(self, scrapes: Scrapes) -> None:
        self.counts_at_start = _counts(scrapes, self.actors)

    def observe(self, now: float, scrapes: Scrapes) -> None:
        super().observe(now, scrapes)
        version = scrapes.get("learner", {}).get(VERSION)
        for name in self.actors:
            m = scrapes.get(name, {})
            if version is None or "mario_actor_policy_version" not in m:
                continue
            lag = int(version - m["mario_actor_policy_version"])
            if self.t_end is None:
                self.lags[name] = max(self.lags.get(name, 0), lag)
            elif name not in self.fresh_s:
                if lag <= self.max_lag:
                    self.fresh_s[name] = max(0.0, now - self.t_end)
                elif now - self.t_end > RESUME_TIMEOUT_S:
                    self.fresh_s[name] = math.inf
        if self.t_end is None:
            self.figures["counts_during"] = {
                k: v - self.counts_at_start.get(k, 0.0)
                for k, v in _counts(scrapes, self.actors).items()
            }

    def done(self, now: float) -> bool:
        return self.t_end is not None and set(self.fresh_s) >= set(self.actors)

    def summary(self) -> dict[str, Any]:
        self.figures |= {
            "max_lag_limit": self.max_lag,
            "most_versions_behind": max(self.lags.values(), default=None),
            "within_lag_limit_after_s": {k: round(v, 2) for k, v in self.fresh_s.items()},
        }
        return super().summary()


def _counts(scrapes: Scrapes, actors: list[str]) -> dict[str, float]:
    learner = scrapes.get("learner", {})
    return {
        "weights_requests": sum(
            scrapes.get(a, {}).get("mario_actor_weights_requests_total", 0.0) for a in actors
        ),
        "stale_chunks": learner.get("mario_learner_chunks_total{result=stale}", 0.0),
        "accepted_chunks": learner.get("mario_learner_chunks_total{result=accepted}", 0.0),
    }


@dataclass
class Death(Tracker):
    """An actor host killed outright: how soon the learner forgets its actors and their credits,
    and how soon its replacement's actors stream."""

    actor_timeout_s: float = 15.0
    connected_before: float = 0.0
    credits_before: float = 0.0
    forgotten_s: float | None = None
    replaced_s: dict[str, float] = field(default_factory=dict)

    def start(self, scrapes: Scrapes) -> None:
        learner = scrapes.get("learner", {})
        self.connected_before = learner.get("mario_actors_connected", 0.0)
        self.credits_before = learner.get("mario_learner_credits_outstanding", 0.0)

    def observe(self, now: float, scrapes: Scrapes) -> None:
        super().observe(now, scrapes)
        learner = scrapes.get("learner", {})
        connected = learner.get("mario_actors_connected")
        if self.forgotten_s is None and connected is not None:
            if connected <= self.connected_before - len(self.actors):
                self.forgotten_s = now - self.t_start
                self.figures["credits_outstanding"] = [
                    self.credits_before,
                    learner.get("mario_learner_credits_outstanding"),
                ]
            elif now - self.t_start > self.actor_timeout_s + RESUME_TIMEOUT_S:
                self.forgotten_s = math.inf
        if self.t_end is not None:
            for name in self.actors:
                m = scrapes.get(name, {})  # its env builds first, on a busy machine: 4x as long
                streaming_again(self.replaced_s, name, m, self.t_end, now, 4 * RESUME_TIMEOUT_S)

    def done(self, now: float) -> bool:
        """Forgotten and replaced; its replacement's actors may still be building their envs."""
        return self.forgotten_s is not None and self.t_end is not None

    def complete(self, now: float) -> bool:
        return self.done(now) and set(self.replaced_s) >= set(self.actors)

    def summary(self) -> dict[str, Any]:
        self.figures |= {
            "actor_timeout_s": self.actor_timeout_s,
            "forgotten_after_s": None if self.forgotten_s is None else round(self.forgotten_s, 2),
            "replacement_streaming_after_s": {k: round(v, 1) for k, v in self.replaced_s.items()},
        }
        return super().summary()


@dataclass
class Restart(Tracker):
    """The learner killed (SIGKILL) and started again on its host: its down time, and how soon
    after it serves each actor streams to it."""

    t_ready: float | None = None
    resume_s: dict[str, float] = field(default_factory=dict)
    old_start: float | None = None

    def start(self, scrapes: Scrapes) -> None:
        self.old_start = scrapes.get("learner", {}).get("mario_learner_start_time_seconds")

    def observe(self, now: float, scrapes: Scrapes) -> None:
        learner = scrapes.get("learner", {})
        start = learner.get("mario_learner_start_time_seconds")
        if self.t_ready is None and start is not None and start != self.old_start:
            self.t_ready = start
            self.figures["down_s"] = round(start - self.t_start, 2)
            self.figures["resumed_version"] = int(learner.get(VERSION, 0))
        if self.t_ready is None:
            return
        for name in self.actors:
            streaming_again(self.resume_s, name, scrapes.get(name, {}), self.t_ready, now,
                            RESUME_TIMEOUT_S)  # fmt: skip

    def done(self, now: float) -> bool:
        return self.t_ready is not None and set(self.resume_s) >= set(self.actors)

    def summary(self) -> dict[str, Any]:
        self.figures["streaming_again_s"] = {k: round(v, 2) for k, v in self.resume_s.items()}
        return super().summary()


class Lives:
    """Chunks counted on both ends, summed over every life of every process (a life is told by
    its process_start_time_seconds; counters only grow within one, so its highest value is its
    total): what the actors sent, and what the learner received and found duplicated."""

    def __init__(self) -> None:
        self.sent: dict[tuple[str, float], float] = {}
        self.received: dict[float, float] = {}
        self.duplicates: dict[float, float] = {}

    def observe(self, scrapes: Scrapes) -> None:
        for name, m in scrapes.items():
            life = m.get("process_start_time_seconds")
            if life is None:
                continue
            if name == "learner":
                self.received[life] = max(self.received.get(life, 0.0), chunks_received(m))
                dup = m.get("mario_learner_chunks_total{result=duplicate}", 0.0)
                self.duplicates[life] = max(self.duplicates.get(life, 0.0), dup)
            elif name.startswith("actor-") and SENT in m:
                self.sent[name, life] = max(self.sent.get((name, life), 0.0), m[SENT])

    def summary(self) -> dict[str, Any]:
        return {
            "chunks_sent_by_actors": int(sum(self.sent.values())),
            "chunks_received_by_learner": int(sum(self.received.values())),
            "duplicate_chunks": int(sum(self.duplicates.values())),
            "actor_lives": len(self.sent),
            "learner_lives": len(self.received),
        }
