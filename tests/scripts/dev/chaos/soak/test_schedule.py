"""The soak's fault schedule: every fault at its period, seeded, none while settling."""

from __future__ import annotations

import pytest

from scripts.dev.chaos.soak.__main__ import main, parse_args
from scripts.dev.chaos.soak.schedule import (
    KINDS,
    fault_schedule,
    learner_faults_end_s,
    memory_from_s,
    planned,
    shortest_minutes,
)


def test_a_30_minute_schedule_has_every_fault_at_its_period_and_none_while_settling():
    faults = fault_schedule(1800, seed=0)
    kinds = [f.kind for f in faults]
    assert kinds.count("actor") == 59  # every 30 s up to 1770 s
    assert kinds.count("learner") == 4  # every 5 minutes up to 1200 s
    assert kinds.count("learner_midwrite") == 16  # every 75 s (jittered) up to 1200 s
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    assert max(f.at_s for f in faults) <= 1800 - 30
    # the last third: one learner life, judged for memory once warm, while actors still die
    learner = [f.at_s for f in faults if f.kind != "actor"]
    assert max(learner) == learner_faults_end_s(1800) == 1200
    assert memory_from_s(1800) == 1320
    assert sum(f.kind == "actor" and f.at_s > 1200 for f in faults) == 19
    assert faults == fault_schedule(1800, seed=0)  # seeded
    assert faults != fault_schedule(1800, seed=1)


def test_a_2_minute_schedule_still_crashes_the_learner_both_ways():
    faults = fault_schedule(120, seed=0, settle_s=20)
    kinds = [f.kind for f in faults]
    assert kinds.count("learner") >= 1 and kinds.count("learner_midwrite") >= 2
    assert kinds.count("actor") == 3
    assert all(f.at_s <= 100 for f in faults)
    assert all(f.at_s <= 80 for f in faults if f.kind != "actor")  # its first two thirds


def test_the_shortest_soak_is_the_first_length_whose_schedule_holds_every_kind():
    args = parse_args(["--run-dir", "unused"])
    kinds_in = lambda d: {f.kind for f in planned(args, d)}  # noqa: E731
    # the learner's faults scale with the soak; the first actor kill comes at 30 s, before the
    # closing calm of a sixth of the soak: 36 s
    assert shortest_minutes(kinds_in, KINDS) == 0.6
    assert kinds_in(36) == set(KINDS) and kinds_in(30) == {"learner", "learner_midwrite"}
    assert shortest_minutes(lambda d: {"x"} if d >= 90 else set(), ["x"]) == 1.5
    with pytest.raises(ValueError, match="no run of up to"):
        shortest_minutes(lambda d: set(), ["x"])


def test_a_soak_too_short_for_every_kind_refuses_to_start_naming_the_minimum(tmp_path, capsys):
    run = tmp_path / "soak"
    with pytest.raises(SystemExit) as refused:
        main(["--minutes", "0.5", "--run-dir", str(run)])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--minutes 0.5 (make soak MINUTES=0.5) is too short" in err
    assert "pass MINUTES=0.6 or more" in err
    assert not run.exists()
    with pytest.raises(SystemExit):
        main(["--minutes", "2", "--actor-kill-every-s", "120", "--run-dir", str(run)])
    assert "pass MINUTES=2.4 or more" in capsys.readouterr().err  # 120 s + a sixth of 144 s


def test_a_longer_last_learner_life_is_a_smaller_share_of_learner_faults():
    faults = fault_schedule(3600, seed=0, learner_share=0.5)
    learner = [f.at_s for f in faults if f.kind != "actor"]
    assert learner and max(learner) <= learner_faults_end_s(3600, 0.5) == 1800
    assert memory_from_s(3600, 0.5) == 1920
    assert max(f.at_s for f in faults if f.kind == "actor") > 3000  # actors still die to the end
