"""The rehearsal's fault schedule: every kind in each round, seeded, spaced, inside the run."""

from __future__ import annotations

import pytest

from scripts.dev.chaos.hosts.__main__ import main, parse_args
from scripts.dev.chaos.hosts.schedule import ACTOR_HOSTS, KINDS, fault_schedule, planned
from scripts.dev.chaos.soak.schedule import shortest_minutes


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


def test_the_shortest_rehearsal_is_the_first_length_whose_schedule_holds_every_kind():
    args = parse_args(["--minutes", "20", "--run-dir", "unused"])
    kinds_in = lambda d: {f.kind for f in planned(args, d)}  # noqa: E731
    # one round: 45 s of calm before each of 5 faults (30+30+20+30+0 s), then 30 s of calm
    assert 45 * 5 + 110 + 30 == 365
    assert shortest_minutes(kinds_in, KINDS) == 6.1  # 366 s holds the round, 360 s does not
    assert kinds_in(6.1 * 60) == set(KINDS) and kinds_in(6.0 * 60) != set(KINDS)
    # the CI form (2 minutes of short faults) is long enough for its round
    short = ["--partition-s", "8", "--learner-link-s", "6", "--block-s", "8", "--death-s", "8"]
    ci = parse_args([*short, "--gap-s", "8", "--actor-timeout-s", "4", "--run-dir", "unused"])
    assert shortest_minutes(lambda d: {f.kind for f in planned(ci, d)}, KINDS) <= 2


def test_a_rehearsal_too_short_for_every_kind_refuses_to_start_naming_the_minimum(tmp_path, capsys):
    run = tmp_path / "hosts"
    with pytest.raises(SystemExit) as refused:
        main(["--minutes", "3", "--run-dir", str(run)])  # before root, namespaces or Prometheus
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--minutes 3 (make hosts MINUTES=3) is too short" in err
    assert "pass MINUTES=6.1 or more" in err
    assert not run.exists()  # nothing started, nothing emptied
    # a longer gap needs a longer run, and the minimum says so
    with pytest.raises(SystemExit):
        main(["--minutes", "6.1", "--gap-s", "60", "--run-dir", str(run)])
    assert "pass MINUTES=7.4 or more" in capsys.readouterr().err  # 60 x 5 + 110 + 30 = 440 s
