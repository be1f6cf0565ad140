"""The launcher's actor command lines: one lane per actor once its processes (actors, learner, eval
actor) fill every core."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def launcher():
    spec = importlib.util.spec_from_file_location("launch", ROOT / "scripts" / "launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def argv_for(n: int, extra: list[str], mode: str = "actors", eval_actor: bool = True) -> list[str]:
    args = argparse.Namespace(
        n=n, learner="127.0.0.1:5555", metrics_base_port=9100, mode=mode, eval=eval_actor
    )
    return launcher().actor_argv(0, args, extra)


def lanes(argv: list[str]) -> str | None:
    """The value the actor's parser ends up with: the last --lanes wins."""
    values = [argv[i + 1] for i, a in enumerate(argv) if a == "--lanes"]
    return values[-1] if values else None


def test_one_lane_once_the_processes_fill_every_core():
    one_lane = launcher().one_lane
    assert one_lane(16, 16, 16) and one_lane(15, 17, 16) and one_lane(2, 2, 2)
    assert not one_lane(15, 15, 16) and not one_lane(2, 3, 4)


def test_a_lone_actor_keeps_two_lanes():
    one_lane = launcher().one_lane
    assert not one_lane(1, 3, 2)  # make train on 2 cores: actor, learner, eval actor
    assert not one_lane(1, 1, 1)


def test_the_processes_counted_are_the_actors_the_learner_and_the_eval_actor():
    count = launcher().local_processes
    assert count(15, learner=True, eval_actor=True) == 17
    assert count(15, learner=True, eval_actor=False) == 16
    assert count(15, learner=False, eval_actor=False) == 15
    flag = launcher().lanes_flag
    assert flag(14, count(14, learner=True, eval_actor=True), cores=16) == ["--lanes", "1"]
    assert flag(14, count(14, learner=True, eval_actor=False), cores=16) == []


def test_actors_filling_every_core_get_one_lane():
    cores = os.process_cpu_count() or 1
    assert lanes(argv_for(max(cores, 2), [])) == "1"
    assert lanes(argv_for(cores + 3, ["--level", "1-2"])) == "1"


def test_actors_with_a_core_to_spare_keep_the_default():
    cores = os.process_cpu_count() or 1
    if cores > 1:
        assert lanes(argv_for(cores - 1, [])) is None


def test_train_counts_the_learner_and_the_eval_actor_beside_the_actors():
    cores = os.process_cpu_count() or 1
    assert lanes(argv_for(1, [], mode="train")) is None  # a lone actor, whatever the cores
    if cores > 3:
        # the default N = cores - 1 leaves no core spare once the learner runs
        assert lanes(argv_for(cores - 1, [], mode="train", eval_actor=False)) == "1"
        assert lanes(argv_for(cores - 2, [], mode="train", eval_actor=False)) is None
        assert lanes(argv_for(cores - 2, [], mode="train")) == "1"  # + the eval actor
    if cores > 3:
        assert lanes(argv_for(cores - 3, [], mode="train")) is None


def test_flags_after_double_dash_override_the_choice():
    cores = os.process_cpu_count() or 1
    argv = argv_for(cores, ["--lanes", "2"])
    assert lanes(argv) == "2"
    assert argv.index("--metrics-port") < argv.index("--lanes")
    assert lanes(argv_for(1, ["--lanes", "2"], mode="train")) == "2"


def test_lanes_mode_prints_the_flag_for_make_up(capsys):
    cores = os.process_cpu_count() or 1

    def printed(*argv: str) -> str:
        assert launcher().main(["lanes", *argv]) == 0
        return capsys.readouterr().out.strip()

    assert printed("--n", str(max(2, cores))) == "--lanes 1"
    assert printed("--n", "1", "--with-learner", "--with-eval") == ""  # a lone actor
    if cores > 2:
        assert printed("--n", str(cores - 1), "--with-learner") == "--lanes 1"
        assert printed("--n", str(cores - 1), "--with-eval") == "--lanes 1"
        assert printed("--n", str(cores - 1)) == ""
    if cores > 3:
        assert printed("--n", str(cores - 2), "--with-learner") == ""


def test_the_learner_beside_local_actors_runs_one_torch_thread_unless_told_otherwise():
    def threads(learner_args: str) -> str:
        args = argparse.Namespace(learner_metrics_port=9000, learner_args=learner_args)
        argv = launcher().learner_argv(args, Path("runs/x"), "127.0.0.1", "5555")
        return [argv[i + 1] for i, a in enumerate(argv) if a == "--torch-threads"][-1]

    assert threads("--device auto") == "1"
    assert threads("--device auto --torch-threads 2") == "2"  # LEARNER_ARGS win
