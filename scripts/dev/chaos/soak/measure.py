"""What the soak measures as it goes, one small tracker per figure, each fed by the soak's loop
from the processes' /metrics (flattened samples, `common.status.scrape`) or the run directory."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, NamedTuple

from common.rundir import RunDir, temp_files
from learner import checkpoint
from scripts.dev.chaos.soak.judge import slope_per_minute, slope_se_per_minute

HANG_S = 60.0
CRASH_LOG_LINES = 25  # of a crashed program's log, in the summary
LIFE_WARMUP_S = 20.0  # a process's memory counts once it is this old (imports, envs, buffers)
ROGUE_BURST = 3
ROGUE_SETTLE_S = 5.0
REJECTED = "mario_learner_messages_rejected_total"


@dataclass
class LearnerWatch:
    """The learner's lives and progress: a new life when mario_learner_start_time_seconds
    changes, an update when mario_policy_version (the run's updates, resumed) grows, a hang when
    no update came for HANG_S while an actor ran (learner down time counts)."""

    last_progress: float  # when an update was last seen (at first: the soak's start)
    start: float | None = None  # this life's serving time
    version: int = 0
    last_update: float | None = None  # when this life's latest update was seen
    longest_spacing: float = 0.0  # between two updates of one life, over the soak so far
    longest_gap: float = 0.0
    hangs: int = 0
    gap_open: bool = False

    def observe(self, m: dict[str, float], now: float, actor_up: bool) -> bool:
        """Take one scrape `m` ({} when the learner did not answer); True when a new life began."""
        new_life = False
        if m:
            version = int(m.get("mario_policy_version", 0.0))
            start = m.get("mario_learner_start_time_seconds")
            if start != self.start:
                self.start, self.last_update, new_life = start, None, True
            elif version > self.version:
                if self.last_update is not None:
                    self.longest_spacing = max(self.longest_spacing, now - self.last_update)
                self.last_update = self.last_progress = now
                self.gap_open = False
            self.version = version
        gap = now - self.last_progress
        self.longest_gap = max(self.longest_gap, gap)
        if gap > HANG_S and actor_up and not self.gap_open:
            self.gap_open = True
            self.hangs += 1
        return new_life


class ActorLives:
    """Env builds and failed build attempts of every actor life, from its own /metrics
    (mario_actor_env_build_seconds observes each env built, mario_actor_env_build_failures_total
    counts each failed attempt). A life is one process, told apart by process_start_time_seconds;
    its counters only grow, so the highest values scraped are its totals."""

    def __init__(self) -> None:
        self.lives: defaultdict[tuple[str, float], Counter[str]] = defaultdict(Counter)

    def observe(self, name: str, m: dict[str, float]) -> None:
        start = m.get("process_start_time_seconds")
        if start is None or "mario_actor_env_build_seconds_count" not in m:
            return  # not answering, or not a training actor
        self.lives[name, start] |= Counter(  # | keeps the higher of each count
            builds=m["mario_actor_env_build_seconds_count"],
            seconds=m.get("mario_actor_env_build_seconds_sum", 0.0),
            failures=m.get("mario_actor_env_build_failures_total", 0.0),
        )

    def summary(self, watchdog_exits: int) -> dict[str, Any]:
        """builds None when no actor life exposed the count; failures add the build watchdog's
        exits (the process ends before its metrics could say so)."""
        total = sum(self.lives.values(), Counter())
        return {
            "actor_lives": len(self.lives),
            "builds": int(total["builds"]) if self.lives else None,
            "failures": int(total["failures"]) + watchdog_exits,
            "watchdog_exits": watchdog_exits,
            "mean_s": total["seconds"] / total["builds"] if total["builds"] else None,
        }


class Memory:
    """Resident memory per role (learner, actor, eval) over every life of its processes, and the
    C heap its live allocations hold (`mario_process_heap_in_use_bytes`, common/heap.py): resident
    memory that grows while the heap in use stays flat is the allocator keeping freed memory."""

    def __init__(self) -> None:
        # role: [(time, resident MiB, age of the process's life, heap in use MiB or NaN)]
        self.samples: defaultdict[str, list[tuple[float, float, float, float]]] = defaultdict(list)

    def sample(self, role: str, m: dict[str, float], now: float, age: float) -> None:
        if mib := m.get("process_resident_memory_bytes", 0.0) / 2**20:
            heap = m.get("mario_process_heap_in_use_bytes", math.nan) / 2**20
            self.samples[role].append((now, mib, age, heap))

    def summary(self, t0: float, warm_s: float) -> dict[str, Any]:
        """The slope per role counts samples after `warm_s` of the soak, and within each life only
        once it is LIFE_WARMUP_S old: a process killed every minute is mostly young, and each
        start's climb (imports, env builds, the first update's buffers) would read as a slope."""
        roles = sorted(self.samples.items())
        judged = {
            role: [(t, v, h) for t, v, age, h in s if t - t0 >= warm_s and age >= LIFE_WARMUP_S]
            for role, s in roles
        }
        resident = {role: [(t, v) for t, v, _ in s] for role, s in judged.items()}
        heap = {role: [(t, h) for t, _, h in s if math.isfinite(h)] for role, s in judged.items()}
        return {
            "memory_slope_mib_per_min": {r: slope_per_minute(s) for r, s in resident.items()},
            "memory_slope_se_mib_per_min": {r: slope_se_per_minute(s) for r, s in resident.items()},
            "heap_slope_mib_per_min": {r: slope_per_minute(s) for r, s in heap.items()},
            "heap_slope_se_mib_per_min": {r: slope_se_per_minute(s) for r, s in heap.items()},
            "memory_mib_last": {role: round(s[-1][1], 1) for role, s in roles},
            "memory_samples": {  # [seconds from the start, MiB, age of the life, heap in use MiB]
                role: [
                    [round(t - t0, 1), round(v, 1), round(a, 1), round(h, 1)] for t, v, a, h in s
                ]
                for role, s in roles
            },
        }


class Checkpoints:
    """Every complete checkpoint on disk loads, each time it is checked."""

    def __init__(self, run: RunDir):
        self.run = run
        self.checked = 0
        self.errors: list[str] = []

    def check(self) -> dict[int, float]:
        """Load every complete checkpoint now; {policy version: when its state was taken} of
        those that load."""
        saved = {}
        for path in sorted(self.run.checkpoints.glob("ckpt-*.pt")):
            try:
                state = checkpoint.load(path)
            except FileNotFoundError:
                continue  # pruned between the listing and the load
            except Exception as exc:  # anything else is the finding
                self.errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
            else:
                saved[int(state["policy_version"])] = float(state["saved_at"])
            self.checked += 1
        return saved

    def newest_version(self) -> int:
        path = checkpoint.latest_path(self.run)
        return int(path.name[5:-3]) if path else 0

    def summary(self) -> dict[str, Any]:
        stale = [p.name for p in temp_files(self.run.checkpoints)]
        self.check()  # the final one too, written on make down
        return {
            "checked": self.checked,
            "loaded": self.checked - len(self.errors),
            "errors": self.errors,
            "stale_temp_files": len(stale),
            "stale": stale,
        }


class Burst(NamedTuple):
    rejected_before: float  # the learner's rejections before it was sent
    life: float | None  # the learner life it was sent to
    sent_at: float
    names: list[str]


class RogueRounds:
    """Rogue bursts sent while nothing else can be rejected, each accounted on later ticks against
    the learner's reject counter, so the soak's loop never blocks on them."""

    def __init__(self, peer: Any, every_s: float):
        self.peer, self.every_s = peer, every_s
        self.rounds = {"accounted": 0, "rejected": 0, "interrupted": 0, "noisy": 0}
        self.unaccounted: list[list[str]] = []
        self.open: Burst | None = None
        self.last = 0.0

    def summary(self) -> dict[str, Any]:
        sent = dict(sorted(self.peer.sent.items()))  # by message/mutation, in any round
        return self.rounds | {"unaccounted": self.unaccounted, "sent": sent}

    def tick(self, m: dict[str, float], now: float, quiet: bool) -> list[str] | None:
        """Account for the open burst, or send one when `quiet` (no fault near, the learner up a
        while); the names of a burst not wholly rejected, else None."""
        if not m:
            return None
        rejected = sum(v for k, v in m.items() if k.startswith(REJECTED))
        life = m.get("mario_learner_start_time_seconds")
        if (burst := self.open) is None:
            if quiet and now - self.last >= self.every_s:
                self.last = now
                names = [self.peer.send() for _ in range(ROGUE_BURST)]
                self.open = Burst(rejected, life, now, names)
            return None
        got = int(rejected - burst.rejected_before)
        if life == burst.life and got < ROGUE_BURST and now - burst.sent_at < ROGUE_SETTLE_S:
            return None  # still arriving
        self.peer.drain()
        self.open = None
        if life != burst.life:
            self.rounds["interrupted"] += 1
        elif got > ROGUE_BURST:
            self.rounds["noisy"] += 1
        else:
            self.rounds["accounted"] += ROGUE_BURST
            self.rounds["rejected"] += got
            if got < ROGUE_BURST:
                self.unaccounted.append(burst.names)
                return burst.names
        return None


def last_words(log: str, lines: int = CRASH_LOG_LINES) -> str:
    """What a crashed program last said: its log from its last traceback on (up to `lines`
    lines), or else the log's last `lines` lines."""
    rows = log.splitlines()
    starts = [i for i, row in enumerate(rows) if row.startswith("Traceback (most recent call")]
    return "\n".join(rows[starts[-1] :][:lines] if starts else rows[-lines:])
