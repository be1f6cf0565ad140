"""The rehearsal's fault schedule: every kind in each round, seeded, spaced, inside the run."""

from __future__ import annotations

from scripts.dev.chaos.hosts.schedule import ACTOR_HOSTS, KINDS, fault_schedule


def test_rounds_hold_every_kind_spaced_by_their_lengths_and_the_gap():
    faults = fault_schedule(20 * 60, seed=0)
    assert faults == sorted(faults)
    first_round = faults[: len(KINDS)]
    assert sorted(f.kind for f in first_round) == sorted(KINDS)
    for a, b in zip(faults, faults[1:], strict=False):
        assert b.at_s == round(a.at_s + a.length_s + 45.0, 2)  # calm between them
    assert all(f.at_s + f.length_s <= 20 * 60 - 30 for f in faults)  # over before the settle
    lengths = {f.kind: f.length_s for f in faults}
    assert lengths == {"partition": 30.0, "host_death": 30.0, "learner_link": 20.0,
                       "broadcast_block": 30.0, "learner_kill": 0.0}  # fmt: skip
    for f in faults:
        expected = ACTOR_HOSTS if f.kind in ("partition", "host_death") else ("learner",)
        assert f.host in expected


def test_a_seed_gives_one_schedule_and_another_seed_another():
    assert fault_schedule(1200, seed=3) == fault_schedule(1200, seed=3)
    orders = {tuple(f.kind for f in fault_schedule(1200, seed=s)) for s in range(6)}
    assert len(orders) > 1


def test_a_short_run_takes_what_fits_and_a_run_too_short_for_one_fault_has_none():
    short = fault_schedule(120, 0, partition_s=8, learner_link_s=6, block_s=8, death_s=8,
                           gap_s=8, settle_s=20)  # fmt: skip
    assert sorted(f.kind for f in short[: len(KINDS)]) == sorted(KINDS)  # the CI form's round
    assert all(f.at_s + f.length_s <= 100 for f in short)
    assert fault_schedule(60, 0, settle_s=30) == []


def test_a_hosts_death_ends_each_round():
    for seed in range(5):
        faults = fault_schedule(20 * 60, seed)
        rounds = [faults[i : i + len(KINDS)] for i in range(0, len(faults), len(KINDS))]
        assert all(r[-1].kind == "host_death" for r in rounds if len(r) == len(KINDS))
