"""The soak's judgement: its statistics, and the table of checks a summary passes or fails."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.dev.chaos.soak.judge import judge, percentile, slope_per_minute, slope_se_per_minute


@pytest.mark.parametrize("q", [1, 10, 50, 90, 99])
def test_percentile_matches_numpy(q):
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    assert percentile(xs, q) == pytest.approx(np.percentile(xs, q))
    assert percentile([2.5], q) == 2.5
    assert percentile([], q) is None


def test_slope_per_minute_matches_a_least_squares_fit():
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 600, 50))
    v = 100 + 0.5 * t / 60 + rng.normal(0, 0.1, 50)  # 0.5 per minute
    got = slope_per_minute(list(zip(t.tolist(), v.tolist(), strict=True)))
    assert got == pytest.approx(np.polyfit(t, v, 1)[0] * 60)
    assert got == pytest.approx(0.5, abs=0.05)
    assert slope_per_minute([(0.0, 1.0), (1.0, 2.0)]) is None
    assert slope_per_minute([(5.0, 1.0), (5.0, 2.0), (5.0, 3.0)]) is None  # no time passed


def test_the_slopes_standard_error_matches_numpys_fit():
    rng = np.random.default_rng(1)
    t = np.sort(rng.uniform(0, 480, 96))
    v = 900 + 0.3 * t / 60 + rng.normal(0, 45, 96)  # a learner's swing about a flat line
    samples = list(zip(t.tolist(), v.tolist(), strict=True))
    _, cov = np.polyfit(t, v, 1, cov="unscaled")
    residuals = v - np.polyval(np.polyfit(t, v, 1), t)
    want = 60 * np.sqrt(cov[0, 0] * (residuals @ residuals) / (len(t) - 2))
    assert slope_se_per_minute(samples) == pytest.approx(want)
    assert 1.0 < slope_se_per_minute(samples) < 3.0  # 8 minutes resolve it to a few MiB/min
    assert slope_se_per_minute([(0.0, 1.0), (1.0, 2.0)]) is None


def good_summary(minutes: float = 30.0) -> dict:
    return {
        "duration_s": minutes * 60,
        "learner_faults_end_s": minutes * 40,  # its first two thirds
        "memory_from_s": minutes * 40 + 120,
        "hangs": 0,
        "resume_s": [0.1, 0.3, 0.2],
        "resume_timeouts": 0,
        "learner_crashes": [
            {
                "lost_updates": 2,
                "within_interval": True,
                "resumed_version": 5,
                "first_version_seen": 5,
            }
        ],
        "midwrite_kills": 24,
        "checkpoints": {"checked": 10, "loaded": 10, "stale_temp_files": 0},
        "memory_slope_mib_per_min": {"learner": 0.1, "actor": -0.2, "eval": 0.0},
        "memory_slope_se_mib_per_min": {"learner": 1.5, "actor": 0.1, "eval": 0.5},
        "rogue": {"accounted": 30, "rejected": 30},
        "crashes": 0,
        "env_builds": {"builds": 40, "actor_lives": 10, "failures": 0},
    }


def failed(summary: dict) -> list[str]:
    return [c["check"] for c in judge(summary) if c["ok"] is False]


def test_judge_passes_a_good_soak_and_names_each_failure():
    checks = judge(good_summary())
    assert all(c["ok"] for c in checks), checks
    assert {"check", "value", "target", "ok"} == set(checks[0])

    bad = good_summary()
    bad["resume_s"] = [0.1] * 99 + [7.0, 7.0]
    bad["midwrite_kills"] = 12  # of at least 13 in the 20 minutes the learner is killed in
    bad["memory_slope_mib_per_min"]["actor"] = 1.5
    bad["rogue"]["rejected"] = 29
    bad["learner_crashes"].append(
        {
            "lost_updates": 5,
            "within_interval": False,
            "resumed_version": 10,
            "first_version_seen": 8,
        }
    )
    bad["checkpoints"]["loaded"] = 9
    bad["crashes"] = 1
    assert set(failed(bad)) == {
        "actor streaming again after a learner restart, p99 s",
        "learner killed mid-checkpoint-write",
        "actor resident memory slope (± 2 SE), last learner life, MiB/min",
        "rogue messages rejected (in accounted rounds)",
        "learner crashes that lost more than one checkpoint interval of updates",
        "learner restarts that resumed from an older than the newest complete checkpoint",
        "checkpoints that load",
        "crashes (exits not caused by the soak)",
    }


@pytest.mark.parametrize("minutes", [2, 15, 29])
def test_a_short_soak_reports_memory_without_judging_it_and_needs_fewer_midwrite_kills(minutes):
    summary = good_summary(minutes=minutes)
    summary["midwrite_kills"] = max(1, int(13 * minutes / 30))
    summary["memory_slope_mib_per_min"]["learner"] = 9.0  # too few minutes to tell
    checks = {c["check"]: c["ok"] for c in judge(summary)}
    assert checks["learner resident memory slope (± 2 SE), last learner life, MiB/min"] is None
    assert checks["learner killed mid-checkpoint-write"] is True
    assert all(ok is not False for ok in checks.values())
    summary["midwrite_kills"] -= 1
    assert failed(summary) == ["learner killed mid-checkpoint-write"]


def test_a_30_minute_soak_fails_memory_only_where_growth_is_shown():
    summary = good_summary()
    summary["memory_slope_mib_per_min"]["learner"] = 3.5  # within its noise: 2 SE is 3.0
    assert failed(summary) == []
    summary["memory_slope_mib_per_min"]["learner"] = 4.1
    assert failed(summary) == ["learner resident memory slope (± 2 SE), last learner life, MiB/min"]
    summary["memory_slope_se_mib_per_min"]["learner"] = None  # too few samples to fit
    assert failed(summary) == ["learner resident memory slope (± 2 SE), last learner life, MiB/min"]
    checks = {c["check"]: c["value"] for c in judge(good_summary())}
    assert (
        checks["eval resident memory slope (± 2 SE), last learner life, MiB/min"] == "+0.00 ± 1.00"
    )


def test_a_resume_that_never_came_fails_even_when_the_others_were_fast():
    summary = good_summary()
    summary["resume_timeouts"] = 1
    assert failed(summary) == ["actor streaming again after a learner restart, p99 s"]


@pytest.mark.parametrize(
    "builds", [{"builds": None, "actor_lives": 0}, {"builds": 0, "actor_lives": 7}]
)
def test_a_soak_whose_env_builds_cannot_be_read_fails_saying_so(builds):
    summary = good_summary()
    summary["env_builds"] |= builds  # no actor life exposed the count, or it read 0
    assert failed(summary) == ["env builds read from the actors' /metrics"]


def test_a_failed_build_attempt_or_a_watchdog_exit_fails_the_soak():
    summary = good_summary()
    summary["env_builds"]["failures"] = 1
    assert failed(summary) == ["env build failures (failed attempts and watchdog exits)"]
