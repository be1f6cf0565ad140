"""The launcher's actor command lines: one lane per actor once actors fill every core."""

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


def argv_for(n: int, extra: list[str]) -> list[str]:
    args = argparse.Namespace(n=n, learner="127.0.0.1:5555", metrics_base_port=9100)
    return launcher().actor_argv(0, args, extra)


def lanes(argv: list[str]) -> str | None:
    """The value the actor's parser ends up with: the last --lanes wins."""
    values = [argv[i + 1] for i, a in enumerate(argv) if a == "--lanes"]
    return values[-1] if values else None


def test_actors_filling_every_core_get_one_lane():
    cores = os.process_cpu_count() or 1
    assert lanes(argv_for(cores, [])) == "1"
    assert lanes(argv_for(cores + 3, ["--level", "1-2"])) == "1"


def test_actors_with_a_core_to_spare_keep_the_default():
    cores = os.process_cpu_count() or 1
    if cores > 1:
        assert lanes(argv_for(cores - 1, [])) is None


def test_flags_after_double_dash_override_the_choice():
    cores = os.process_cpu_count() or 1
    argv = argv_for(cores, ["--lanes", "2"])
    assert lanes(argv) == "2"
    assert argv.index("--metrics-port") < argv.index("--lanes")


def test_the_learner_beside_local_actors_runs_one_torch_thread_unless_told_otherwise():
    def threads(learner_args: str) -> str:
        args = argparse.Namespace(learner_metrics_port=9000, learner_args=learner_args)
        argv = launcher().learner_argv(args, Path("runs/x"), "127.0.0.1", "5555")
        return [argv[i + 1] for i, a in enumerate(argv) if a == "--torch-threads"][-1]

    assert threads("--device auto") == "1"
    assert threads("--device auto --torch-threads 2") == "2"  # LEARNER_ARGS win
