"""The soak's pure parts: its fault schedule, statistics, judgement and log parsing."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.chaos.soak import loop as soak


def test_a_30_minute_schedule_has_every_fault_at_its_period_and_none_while_settling():
    faults = soak.fault_schedule(1800, seed=0)
    kinds = [f.kind for f in faults]
    assert kinds.count("actor") == 59  # every 30 s up to 1770 s
    assert kinds.count("learner") == 5  # every 5 minutes up to 1500 s
    assert kinds.count("learner_midwrite") == 23  # every 75 s (jittered) up to 1770 s
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    assert max(f.at_s for f in faults) <= 1800 - 30
    assert faults == soak.fault_schedule(1800, seed=0)  # seeded
    assert faults != soak.fault_schedule(1800, seed=1)


def test_a_2_minute_schedule_still_crashes_the_learner_both_ways():
    faults = soak.fault_schedule(120, seed=0, settle_s=20)
    kinds = [f.kind for f in faults]
    assert kinds.count("learner") >= 1 and kinds.count("learner_midwrite") >= 2
    assert kinds.count("actor") == 3
    assert all(f.at_s <= 100 for f in faults)


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy(q):
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    assert soak.percentile(xs, q) == pytest.approx(np.percentile(xs, q))
    assert soak.percentile([], q) is None


def test_slope_per_minute_matches_a_least_squares_fit():
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 600, 50))
    v = 100 + 0.5 * t / 60 + rng.normal(0, 0.1, 50)  # 0.5 per minute
    got = soak.slope_per_minute(list(zip(t.tolist(), v.tolist(), strict=True)))
    assert got == pytest.approx(np.polyfit(t, v, 1)[0] * 60)
    assert got == pytest.approx(0.5, abs=0.05)
    assert soak.slope_per_minute([(0.0, 1.0), (1.0, 2.0)]) is None


def test_a_crash_may_lose_one_interval_and_the_update_across_its_end():
    assert soak.lost_within_interval(3, lost_s=6.9, interval_s=5.0, longest_update_s=2.0)
    assert not soak.lost_within_interval(3, lost_s=7.1, interval_s=5.0, longest_update_s=2.0)
    assert soak.lost_within_interval(0, lost_s=60.0, interval_s=5.0, longest_update_s=2.0)


def good_summary(minutes: float = 30.0) -> dict:
    return {
        "duration_s": minutes * 60,
        "hangs": 0,
        "resume_s": [0.1, 0.3, 0.2],
        "resume_timeouts": 0,
        "learner_crashes": [{"lost_updates": 2, "within_interval": True}],
        "midwrite_kills": 24,
        "checkpoints": {"checked": 10, "loaded": 10, "stale_temp_files": 0},
        "memory_slope_mib_per_min": {"learner": 0.1, "actor": -0.2, "eval": 0.0},
        "rogue": {"accounted": 30, "rejected": 30},
        "crashes": 0,
        "env_builds": {"failures": 0},
    }


def test_judge_passes_a_good_soak_and_names_each_failure():
    checks = soak.judge(good_summary(), soak.Targets())
    assert all(c["ok"] for c in checks), checks

    bad = good_summary()
    bad["resume_s"] = [0.1] * 99 + [7.0, 7.0]
    bad["midwrite_kills"] = 19
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
    failed = {c["check"] for c in soak.judge(bad, soak.Targets()) if c["ok"] is False}
    assert failed == {
        "actor streaming again after a learner restart, p99 s",
        "learner killed mid-checkpoint-write",
        "actor resident memory slope after warm-up, MiB/min",
        "rogue messages rejected (in accounted rounds)",
        "learner crashes that lost more than one checkpoint interval of updates",
        "learner restarts that resumed from an older than the newest complete checkpoint",
    }


def test_a_short_soak_reports_memory_without_judging_it_and_needs_fewer_midwrite_kills():
    summary = good_summary(minutes=2)
    summary["midwrite_kills"] = 1
    summary["memory_slope_mib_per_min"]["learner"] = 9.0  # warm-up dominates 2 minutes
    checks = {c["check"]: c["ok"] for c in soak.judge(summary, soak.Targets())}
    assert checks["learner resident memory slope after warm-up, MiB/min"] is None
    assert checks["learner killed mid-checkpoint-write"] is True
    assert all(ok is not False for ok in checks.values())


def test_a_resume_that_never_came_fails_even_when_the_others_were_fast():
    summary = good_summary()
    summary["resume_timeouts"] = 1
    failed = [c["check"] for c in soak.judge(summary, soak.Targets()) if c["ok"] is False]
    assert failed == ["actor streaming again after a learner restart, p99 s"]


def test_supervisord_exits_tell_the_soaks_kills_from_crashes(tmp_path):
    (tmp_path / "supervisord.log").write_text(
        "2026-11-26 12:45:51,213 WARN exited: actor-1 (terminated by SIGKILL; not expected)\n"
        "2026-11-26 12:46:13,256 WARN exited: learner (terminated by SIGKILL; not expected)\n"
        "2026-11-26 12:46:14,000 INFO exited: actor-0 (exit status 0; expected)\n"
        "2026-11-26 12:46:15,000 WARN exited: actor-0 (exit status 3; not expected)\n"
        "2026-11-26 12:46:16,000 WARN exited: eval (terminated by SIGSEGV (core dumped); not "
        "expected)\n"
        "2026-11-26 12:46:17,000 INFO gave up: actor-0 entered FATAL state, too many start retries\n"
    )
    assert soak.supervisord_exits(tmp_path) == (3, 2)


def test_env_builds_are_counted_from_the_actor_logs(tmp_path):
    (tmp_path / "actor-0.log").write_text(
        "2026-11-26 12:45:25,986 actor[0] INFO built env 1/4 (1-1) in 0.30 s\n"
        "2026-11-26 12:45:26,400 actor[0] INFO built env 2/4 (1-1) in 0.41 s\n"
        "2026-11-26 12:45:26,500 actor[0] WARNING env 2 build attempt 1 failed (OSError: x); "
        "retrying in 0.5 s\n"
    )
    (tmp_path / "eval.log").write_text(
        "2026-11-26 12:45:25,986 actor[2] INFO built env 1/1 (1-1) in 0.50 s\n"
    )
    got = soak.env_builds(tmp_path)
    assert (got["builds"], got["failures"], got["max_s"]) == (3, 1, 0.5)
