"""The soak's verdict: a table of checks against docs/RELIABILITY.md's targets, each read from the
summary and tested by one loop; the statistics they use; the printed summary."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Targets:
    hangs: int = 0
    resume_p99_s: float = 5.0
    memory_slope_mib_per_min: float = 1.0
    memory_min_minutes: float = 10.0  # shorter soaks report the slope without judging it
    midwrite_kills_per_30_min: int = 20


def percentile(values: list[float], q: int) -> float | None:
    """The q-th percentile (1-99, linear interpolation); None for no values."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if values else None


def slope_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) samples, per minute; None for fewer than 3 or all
    at one time."""
    if len(samples) < 3:
        return None
    try:
        return 60.0 * statistics.linear_regression(*zip(*samples, strict=True)).slope
    except statistics.StatisticsError:
        return None


class Check(NamedTuple):
    name: str
    value: Callable[[dict], Any]  # what the summary says, as shown
    target: str
    ok: Callable[[dict], bool | None]  # None: reported, not judged


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _resume_p99(s: dict) -> float | None:
    return percentile(s["resume_s"], 99)


def _over_interval(s: dict) -> list[dict]:
    return [c for c in s["learner_crashes"] if not c["within_interval"]]


def _resumed_older(s: dict) -> list[dict]:
    return [
        c for c in s["learner_crashes"]
        if c.get("first_version_seen") is not None and c["first_version_seen"] < c["resumed_version"]
    ]  # fmt: skip


def _memory_check(role: str, t: Targets, judged: bool) -> Check:
    def ok(s: dict) -> bool | None:
        slope = s["memory_slope_mib_per_min"][role]
        return (slope is not None and abs(slope) < t.memory_slope_mib_per_min) if judged else None

    return Check(
        f"{role} resident memory slope after warm-up, MiB/min",
        lambda s: _rounded(s["memory_slope_mib_per_min"][role], 3),
        f"< {t.memory_slope_mib_per_min}" + ("" if judged else " (judged from 10 min)"),
        ok,
    )


def checks(summary: dict[str, Any], t: Targets) -> list[Check]:
    """The table: every figure the soak judges (or only reports), how it is read from the
    summary, its target and its test."""
    minutes = summary["duration_s"] / 60
    midwrites = max(1, math.floor(t.midwrite_kills_per_30_min * minutes / 30))
    memory_judged = minutes >= t.memory_min_minutes
    ck, builds, rogue = "checkpoints", "env_builds", "rogue"
    return [  # name, the value shown (read from the summary s), the target, the test of s
        Check("hangs", lambda s: s["hangs"], f"<= {t.hangs}", lambda s: s["hangs"] <= t.hangs),
        Check("actor streaming again after a learner restart, p99 s",
              lambda s: _rounded(_resume_p99(s), 2), f"<= {t.resume_p99_s}",
              lambda s: (p99 := _resume_p99(s)) is not None and p99 <= t.resume_p99_s
              and not s["resume_timeouts"]),
        Check("learner crashes that lost more than one checkpoint interval of updates",
              lambda s: f"{len(_over_interval(s))} of {len(s['learner_crashes'])} (most lost: "
              f"{max((c['lost_updates'] for c in s['learner_crashes']), default=0)} updates)",
              "0, at least one crash", lambda s: bool(s["learner_crashes"]) and not _over_interval(s)),
        Check("learner restarts that resumed from an older than the newest complete checkpoint",
              lambda s: len(_resumed_older(s)), "0", lambda s: not _resumed_older(s)),
        Check("learner killed mid-checkpoint-write", lambda s: s["midwrite_kills"],
              f">= {midwrites}", lambda s: s["midwrite_kills"] >= midwrites),
        Check("checkpoints that load", lambda s: f"{s[ck]['loaded']}/{s[ck]['checked']}", "all",
              lambda s: 0 < s[ck]["checked"] == s[ck]["loaded"]),
        Check("half-written checkpoint files left at the end",
              lambda s: s[ck]["stale_temp_files"], "0", lambda s: s[ck]["stale_temp_files"] == 0),
        *(_memory_check(role, t, memory_judged) for role in summary["memory_slope_mib_per_min"]),
        Check("rogue messages rejected (in accounted rounds)",
              lambda s: f"{s[rogue]['rejected']}/{s[rogue]['accounted']}", "all, at least one round",
              lambda s: 0 < s[rogue]["accounted"] == s[rogue]["rejected"]),
        Check("crashes (exits not caused by the soak)", lambda s: s["crashes"], "0",
              lambda s: s["crashes"] == 0),
        Check("env builds read from the actors' /metrics",
              lambda s: f"{s[builds]['builds']} in {s[builds]['actor_lives']} actor lives",
              "> 0 (none: the count cannot be read)", lambda s: bool(s[builds]["builds"])),
        Check("env build failures (failed attempts and watchdog exits)",
              lambda s: s[builds]["failures"], "0", lambda s: s[builds]["failures"] == 0),
    ]  # fmt: skip


def judge(summary: dict[str, Any], targets: Targets) -> list[dict[str, Any]]:
    """[{check, value, target, ok}] for the summary's figures; ok None: reported, not judged."""
    return [
        {"check": c.name, "value": c.value(summary), "target": c.target, "ok": c.ok(summary)}
        for c in checks(summary, targets)
    ]


def print_summary(summary: dict[str, Any], results: list[dict[str, Any]], verdict: str) -> None:
    """The fault counts and restart times, then every check and the verdict."""
    f, down, res = summary["faults"], summary["learner_down_s"], summary["resume_p50_p99_max_s"]
    p50, most, *resume = ("-" if v is None else f"{v:.2f}" for v in
                          [percentile(down, 50), max(down, default=None), *res])  # fmt: skip
    print("\n==== soak summary " + "=" * 60)
    print(f"{summary['duration_s'] / 60:.1f} min, seed {summary['seed']}: {f['actor_kills']} actor "
          f"kills, {f['learner_kills']} learner kills, {f['midwrite_kills']} mid-checkpoint kills "
          f"({f['midwrite_missed']} writes finished first); learner down (kill to serving) s: p50 "
          f"{p50}, max {most}; actors streaming again s: p50 {resume[0]}, p99 {resume[1]}, max "
          f"{resume[2]}")  # fmt: skip
    for c in results:
        mark = {True: "ok  ", False: "FAIL", None: "info"}[c["ok"]]
        print(f"  {mark} {c['check']}: {c['value']} (target {c['target']})")
    print(verdict)
