"""The soak's fault schedule: every fault at its period, seeded, none while settling."""

from __future__ import annotations

from scripts.dev.chaos.soak.schedule import fault_schedule


def test_a_30_minute_schedule_has_every_fault_at_its_period_and_none_while_settling():
    faults = fault_schedule(1800, seed=0)
    kinds = [f.kind for f in faults]
    assert kinds.count("actor") == 59  # every 30 s up to 1770 s
    assert kinds.count("learner") == 5  # every 5 minutes up to 1500 s
    assert kinds.count("learner_midwrite") == 23  # every 75 s (jittered) up to 1770 s
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    assert max(f.at_s for f in faults) <= 1800 - 30
    assert faults == fault_schedule(1800, seed=0)  # seeded
    assert faults != fault_schedule(1800, seed=1)


def test_a_2_minute_schedule_still_crashes_the_learner_both_ways():
    faults = fault_schedule(120, seed=0, settle_s=20)
    kinds = [f.kind for f in faults]
    assert kinds.count("learner") >= 1 and kinds.count("learner_midwrite") >= 2
    assert kinds.count("actor") == 3
    assert all(f.at_s <= 100 for f in faults)
