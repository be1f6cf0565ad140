"""Prometheus targets (scripts/service/targets.py): each run its own file_sd lists in the TARGETS
directory, so two runs on one machine never overwrite each other's; the learner's among them (a
second run's learner listens on another port); a stopped run's removed, only its own; the
former TARGETS file refused; `exec learner` (make learner) lists the learner before it starts.
That Prometheus reads them: tests/deploy/test_prometheus_targets.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scripts.checkout import ROOT
from scripts.service import targets
from scripts.service.host import Host


def entries(path) -> list[tuple[str, dict[str, str]]]:
    return [(e["targets"][0], e["labels"]) for e in json.loads(path.read_text())]


def test_a_run_lists_its_learner_actors_eval_actor_and_relay_each_in_its_own_file(tmp_path):
    h = Host(
        run=str(tmp_path / "runs" / "a"), n=2, first_actor=4, metrics_host="0.0.0.0",
        targets=str(tmp_path / "t"), relay=True,
    ).resolved()  # fmt: skip
    name = targets.run_name(h)
    assert name.startswith("a-") and len(name) == len("a-") + 8
    written = targets.write_targets(h)
    assert written == [tmp_path / "t" / f"{role}-{name}.json" for role in targets.ROLES]
    learner, actors, evaluator, relay = map(entries, written)
    assert learner == [("127.0.0.1:9000", {"job": "mario-learner", "run": "a"})]
    assert actors == [
        ("127.0.0.1:9104", {"job": "mario-actor", "run": "a", "actor_id": "4"}),
        ("127.0.0.1:9105", {"job": "mario-actor", "run": "a", "actor_id": "5"}),
    ]
    assert evaluator == [
        ("127.0.0.1:9106", {"job": "mario-eval", "run": "a", "actor_id": "1000000"})
    ]
    assert relay == [("127.0.0.1:9107", {"job": "mario-relay", "run": "a", "first_actor": "4"})]
    # what a host does not run, or what serves no metrics, is not listed
    alone = Host(run=str(tmp_path / "b"), targets=str(tmp_path / "t"), learner_autostart=False)
    assert [p.name.split("-")[0] for p in targets.write_targets(alone.resolved())] == ["actors"]
    quiet = Host(run=str(tmp_path / "c"), targets=str(tmp_path / "t"), actor_metrics_base=0)
    assert [p.name.split("-")[0] for p in targets.write_targets(quiet.resolved())] == ["learner"]


def test_two_runs_on_one_machine_keep_their_own_lists(tmp_path):
    """The second run (its own RUN and ports) used to overwrite the first's actors.json, and its
    learner was never listed; two run directories of one name are two runs too."""
    shared = str(tmp_path / "targets")
    first = Host(run=str(tmp_path / "runs" / "x"), n=1, targets=shared).resolved()
    second = Host(
        run=str(tmp_path / "other" / "x"), n=1, port=5600, learner_metrics_port=9001,
        actor_metrics_base=9200, targets=shared,
    ).resolved()  # fmt: skip
    a, b = targets.write_targets(first), targets.write_targets(second)
    assert not set(a) & set(b)
    assert {entries(p)[0][0] for p in a} == {"127.0.0.1:9000", "127.0.0.1:9100", "127.0.0.1:9101"}
    assert {entries(p)[0][0] for p in b} == {"127.0.0.1:9001", "127.0.0.1:9200", "127.0.0.1:9201"}
    assert sorted(os.listdir(shared)) == sorted(p.name for p in a + b)

    assert targets.remove_targets(first) == a  # a stopped run takes only its own lists away
    assert sorted(os.listdir(shared)) == sorted(p.name for p in b)
    assert targets.remove_targets(first) == []


def test_stopping_the_actors_keeps_the_learner_of_the_same_run(tmp_path):
    """`make learner` and `make actors` on one run directory: Ctrl-C on the actors removes theirs."""
    settings = {"run": str(tmp_path / "run"), "targets": str(tmp_path / "t"), "n": 1}
    learner = Host(**settings).resolved()
    actors = Host(**settings, learner_autostart=False, eval=False).resolved()
    (listed,) = targets.write_targets(learner, roles=("learner",))
    targets.write_targets(actors)
    assert targets.remove_targets(actors) == [targets.paths(actors)["actors"]]
    assert listed.is_file()


def test_targets_naming_a_file_is_refused_naming_its_directory():
    problems = Host(targets="/var/lib/mario-impala/targets/actors.json").resolved().problems()
    assert any(
        "TARGETS='/var/lib/mario-impala/targets/actors.json' names a file" in p
        and "pass TARGETS='/var/lib/mario-impala/targets'" in p
        for p in problems
    ), problems


def test_exec_learner_lists_the_learner_before_it_starts(tmp_path):
    """`make learner` (python -m scripts.service exec learner) becomes the learner: the learner's
    targets file is written first, so Prometheus finds a learner started alone too. The learner
    here is refused at once (a bad flag): the file was written before."""
    run, listed = tmp_path / "run", tmp_path / "targets"
    env = {
        "PATH": os.environ["PATH"], "MARIO_RUN": str(run), "MARIO_TARGETS": str(listed),
        "MARIO_LEARNER_METRICS_PORT": "9003", "MARIO_LEARNER_ARGS": "--no-such-flag",
    }  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "scripts.service", "exec", "learner"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "--no-such-flag" in out.stderr
    (path,) = listed.iterdir()
    assert path.name.startswith("learner-run-")
    assert entries(path) == [("127.0.0.1:9003", {"job": "mario-learner", "run": "run"})]
