"""The soak's verdict: every check against docs/RELIABILITY.md's targets, read from the summary,
and the statistics they use."""

from __future__ import annotations

import math
import statistics
from typing import Any, NamedTuple

RESUME_P99_S = 5.0
MEMORY_SLOPE_MIB_PER_MIN = 1.0
MEMORY_MIN_MINUTES = 8.0  # of samples judged (a 30-minute soak's); fewer: reported, not judged
MIDWRITE_KILLS_PER_20_MIN = 13  # of the span the learner is killed in


def percentile(values: list[float], q: int) -> float | None:
    """The q-th percentile (1-99, linear interpolation); None for no values."""
    if len(values) < 2:  # statistics.quantiles wants two before Python 3.13
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _fit(samples: list[tuple[float, float]]) -> statistics.LinearRegression | None:
    """The least-squares line through (seconds, value) samples; None for fewer than 3 or all at
    one time."""
    if len(samples) < 3:
        return None
    try:
        return statistics.linear_regression(*zip(*samples, strict=True))
    except statistics.StatisticsError:
        return None


def slope_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) samples, per minute; None for fewer than 3 or all
    at one time."""
    fit = _fit(samples)
    return None if fit is None else 60.0 * fit.slope


def slope_se_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """The standard error of `slope_per_minute`'s slope, from the fit's residuals (samples taken
    apart enough to be independent); None where the slope is."""
    fit = _fit(samples)
    if fit is None:
        return None
    mean_t = statistics.fmean(t for t, _ in samples)
    residuals = sum((v - fit.intercept - fit.slope * t) ** 2 for t, v in samples)
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    return 60.0 * math.sqrt(residuals / (len(samples) - 2) / spread)


class Check(NamedTuple):
    value: Any  # what the summary says, as shown
    target: str
    ok: bool | None  # None: reported, not judged


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def judge(s: dict[str, Any]) -> list[dict[str, Any]]:
    """[{check, value, target, ok}] for the summary's figures."""
    learner_minutes = s["learner_faults_end_s"] / 60
    midwrites = max(1, int(MIDWRITE_KILLS_PER_20_MIN * learner_minutes / 20))
    p99 = percentile(s["resume_s"], 99)
    resumed = p99 is not None and p99 <= RESUME_P99_S and not s["resume_timeouts"]
    crashes = s["learner_crashes"]
    over = [c for c in crashes if not c["within_interval"]]
    most_lost = max((c["lost_updates"] for c in crashes), default=0)
    lost = f"{len(over)} of {len(crashes)} (most lost: {most_lost} updates)"
    older = [  # restarts that served an older version than the newest complete checkpoint's
        c
        for c in crashes
        if c["first_version_seen"] is not None and c["first_version_seen"] < c["resumed_version"]
    ]
    ck, builds, rogue = s["checkpoints"], s["env_builds"], s["rogue"]
    memory_minutes = (s["duration_s"] - s["memory_from_s"]) / 60
    memory_judged = memory_minutes >= MEMORY_MIN_MINUTES
    memory_target = f"< {MEMORY_SLOPE_MIB_PER_MIN}, less 2 SE"
    if not memory_judged:
        memory_target += f" (judged over {MEMORY_MIN_MINUTES:g} min: a 30-minute soak's last third)"
    checks = {
        "hangs": Check(s["hangs"], "<= 0", s["hangs"] == 0),
        "actor streaming again after a learner restart, p99 s": Check(
            _rounded(p99, 2), f"<= {RESUME_P99_S}", resumed
        ),
        "learner crashes that lost more than one checkpoint interval of updates": Check(
            lost, "0, at least one crash", bool(crashes) and not over
        ),
        "learner restarts that resumed from an older than the newest complete checkpoint": Check(
            len(older), "0", not older
        ),
        "learner killed mid-checkpoint-write": Check(
            s["midwrite_kills"], f">= {midwrites}", s["midwrite_kills"] >= midwrites
        ),
        "checkpoints that load": Check(
            f"{ck['loaded']}/{ck['checked']}", "all", 0 < ck["checked"] == ck["loaded"]
        ),
        "half-written checkpoint files left at the end": Check(
            ck["stale_temp_files"], "0", ck["stale_temp_files"] == 0
        ),
        **{
            f"{role} resident memory slope (± 2 SE), last learner life, MiB/min": memory_check(
                slope, s["memory_slope_se_mib_per_min"].get(role), memory_target, memory_judged
            )
            for role, slope in s["memory_slope_mib_per_min"].items()
        },
        **{  # what live allocations hold: flat while resident memory grows is the allocator
            f"{role} C heap in use slope (± 2 SE), last learner life, MiB/min": heap_info(
                slope, s.get("heap_slope_se_mib_per_min", {}).get(role)
            )
            for role, slope in s.get("heap_slope_mib_per_min", {}).items()
        },
        "rogue messages rejected (in accounted rounds)": Check(
            f"{rogue['rejected']}/{rogue['accounted']}",
            "all, at least one round",
            0 < rogue["accounted"] == rogue["rejected"],
        ),
        "crashes (exits not caused by the soak)": Check(s["crashes"], "0", s["crashes"] == 0),
        "env builds read from the actors' /metrics": Check(
            f"{builds['builds']} in {builds['actor_lives']} actor lives",
            "> 0 (none: the count cannot be read)",
            bool(builds["builds"]),
        ),
        "env build failures (failed attempts and watchdog exits)": Check(
            builds["failures"], "0", builds["failures"] == 0
        ),
    }
    return [{"check": name, **check._asdict()} for name, check in checks.items()]


def _slope_shown(slope: float, se: float) -> str:
    """A slope with its two standard errors, as the checks show it: "+0.72 ± 0.57"."""
    return f"{slope:+.2f} ± {2 * se:.2f}"


def memory_check(slope: float | None, se: float | None, target: str, judged: bool) -> Check:
    """Growth fails the check only where it is shown: the slope less two standard errors above
    the target. A learner's memory swings by ~150 MiB with each update's buffers, so 8 minutes
    resolve its slope to some ±4 MiB/min; a process that grows for good shows at any length."""
    if slope is None or se is None:
        return Check(None, target, False if judged else None)
    shown = _slope_shown(slope, se)
    return Check(shown, target, slope - 2 * se < MEMORY_SLOPE_MIB_PER_MIN if judged else None)


def heap_info(slope: float | None, se: float | None) -> Check:
    """The heap in use's slope, reported beside resident memory's, never judged."""
    shown = None if slope is None or se is None else _slope_shown(slope, se)
    return Check(shown, "info: flat where resident memory grows is the allocator's keeping", None)


def verdict(checks: list[dict[str, Any]]) -> tuple[str, bool]:
    """("PASS" or "FAIL: <the failed checks>", passed) for judged checks."""
    failed = [c["check"] for c in checks if c["ok"] is False]
    return ("PASS" if not failed else "FAIL: " + "; ".join(failed)), not failed


def print_checks(checks: list[dict[str, Any]]) -> None:
    for c in checks:
        mark = {True: "ok  ", False: "FAIL", None: "info"}[c["ok"]]
        print(f"  {mark} {c['check']}: {c['value']} (target {c['target']})")
