"""The host's settings and rules: the lane rule, the learner's torch threads (the targets files:
test_targets.py)."""

from __future__ import annotations

import os
import socket

import pytest

from common import config as config_io
from learner.config import LearnerConfig
from scripts.service import host as hosts
from scripts.service.host import Host


def lanes(argv: list[str]) -> str | None:
    """The value the actor's parser ends up with: the last --lanes wins."""
    values = [argv[i + 1] for i, a in enumerate(argv) if a == "--lanes"]
    return values[-1] if values else None


def threads(argv: list[str]) -> str | None:
    values = [argv[i + 1] for i, a in enumerate(argv) if a == "--torch-threads"]
    return values[-1] if values else None


def test_one_lane_once_the_processes_fill_every_core():
    one_lane = hosts.one_lane
    assert one_lane(16, 16, 16) and one_lane(15, 17, 16) and one_lane(2, 2, 2)
    assert not one_lane(15, 15, 16) and not one_lane(2, 3, 4)


def test_a_lone_actor_keeps_two_lanes():
    assert not hosts.one_lane(1, 3, 2)  # make train on 2 cores: actor, learner, eval actor
    assert not hosts.one_lane(1, 1, 1)


def test_the_lane_rule_counts_the_learner_and_the_eval_actor_that_run_here():
    def actor_lanes(**settings: object) -> str | None:
        return lanes(hosts.actor_argv(Host(cores=16, **settings).resolved(), 0))

    assert actor_lanes(n=14) == "1"  # 14 actors + learner + eval actor = 16 processes
    assert actor_lanes(n=14, eval=False) is None
    assert actor_lanes(n=15, learner_autostart=False, eval=False) is None
    assert actor_lanes(n=16, learner_autostart=False, eval=False) == "1"
    assert actor_lanes(n=1) is None  # a lone actor
    assert actor_lanes(n=16, actor_args="--lanes 2") == "2"  # ACTOR_ARGS come last: they win


def test_the_learner_gets_the_cores_its_neighbours_leave():
    assert threads(hosts.learner_argv(Host(cores=2, n=1).resolved())) == "1"  # make train, 2 cores
    assert threads(hosts.learner_argv(Host(cores=16, n=15).resolved())) == "1"
    assert threads(hosts.learner_argv(Host(cores=64, n=16).resolved())) == "47"
    beside_one = Host(cores=16, n=1, eval=False).resolved()
    assert threads(hosts.learner_argv(beside_one)) == "15"
    told = Host(cores=2, n=1, learner_args="--torch-threads 2").resolved()
    assert threads(hosts.learner_argv(told)) == "2"  # LEARNER_ARGS come last: they win


def learner_config(h: Host) -> LearnerConfig:
    """The learner's config as its own parser reads `h`'s command line."""
    argv = hosts.learner_argv(h)
    assert argv[1:3] == ["-m", "learner"]
    return config_io.load(LearnerConfig, argv[3:], prog="learner", description="")


def test_frames_plan_the_run_length_and_anneal_the_rate_over_it():
    endless = learner_config(Host(cores=2).resolved())  # falls to a tenth over 1.5 M, holds
    assert (endless.train_frames, endless.lr_anneal_frames) == (0, 1_500_000)
    assert endless.lr_final_fraction == 0.1
    planned = learner_config(Host.from_env({"MARIO_FRAMES": "2000000", "MARIO_CORES": "2"}))
    assert (planned.train_frames, planned.lr_anneal_frames) == (2_000_000, 2_000_000)
    assert planned.lr_final_fraction == 0
    flat = Host(cores=2, frames=2_000_000, learner_args="--lr-anneal-frames 0").resolved()
    assert (learner_config(flat).train_frames, learner_config(flat).lr_anneal_frames) == (
        2_000_000,
        0,
    )  # LEARNER_ARGS come last: they win
    tenth = Host(cores=2, frames=2_000_000, learner_args="--lr-final-fraction 0.1").resolved()
    assert learner_config(tenth).lr_final_fraction == 0.1
    assert Host(frames=-1).resolved().problems() == [
        "FRAMES must be >= 0 (0 = train until stopped), got -1"
    ]


def test_defaults_and_settings_from_the_environment():
    h = Host.from_env({"MARIO_CORES": "8"})
    assert (h.n, h.learner) == (7, "127.0.0.1:5555")  # one actor per core but one
    assert (h.eval_id, h.eval_metrics_port) == (hosts.EVAL_ACTOR_ID, 9107)  # after the actors'
    assert hosts.EVAL_ACTOR_ID not in h.actor_ids
    h = Host.from_env({"MARIO_CORES": "1", "MARIO_PORT": "6000", "MARIO_EVAL": "false"})
    assert (h.n, h.learner, h.eval) == (1, "127.0.0.1:6000", False)
    assert Host.from_env(h.environ()) == h  # what supervisord passes on reads back the same
    with pytest.raises(ValueError) as e:
        Host.from_env({"MARIO_N": "many", "MARIO_EVAL": "yes"})
    assert "MARIO_N='many': expected an integer" in str(e.value)
    assert "MARIO_EVAL='yes': expected true or false" in str(e.value)
    for quoted in ({"actor_args": "--seed '1'"}, {"eval_actor_args": "--seed '1'"}):
        assert Host(**quoted).resolved().problems() == [
            "LEARNER_ARGS, ACTOR_ARGS and EVAL_ACTOR_ARGS take no single quotes"
        ]


def test_make_actors_runs_the_actors_alone():
    h = hosts.host_for("actors", {"MARIO_N": "2"})
    assert sorted(hosts.commands(h)) == ["actor-0", "actor-1"]
    h = hosts.host_for("train", {"MARIO_N": "2"})
    assert sorted(hosts.commands(h)) == ["actor-0", "actor-1", "eval", "learner"]
    # the eval actor goes with the learner unless told otherwise
    h = hosts.host_for("up", {"MARIO_N": "2", "MARIO_LEARNER_AUTOSTART": "false"})
    assert sorted(hosts.commands(h)) == ["actor-0", "actor-1"]


def test_a_run_dir_too_deep_for_supervisords_socket_is_refused_with_the_room_there_is(tmp_path):
    """supervisord's control socket lives in RUN; a Unix socket's path holds at most 107 bytes,
    and past that supervisord only says "AF_UNIX path too long". The rule names RUN and how long
    it may be, and that length is exactly the one that fits."""
    deep = tmp_path / ("d" * 200)
    (problem,) = Host(run=str(deep)).resolved().problems()
    assert problem.startswith(f"RUN={str(deep)!r} is too long") and "107" in problem
    room = int(problem.rsplit("at most ", 1)[1].split()[0])
    fits = "/" + "r" * (room - 1)  # an absolute RUN of exactly `room` bytes
    assert Host(run=fits).resolved().problems() == []
    assert Host(run=fits + "r").resolved().problems() != []
    assert len(os.fsencode(fits + "/supervisor.sock")) == hosts.SOCKET_PATH_MAX
    assert Host(run="runs/default").resolved().problems() == []


def test_the_socket_path_limit_is_the_kernels(tmp_path):
    """A Unix socket binds at SOCKET_PATH_MAX bytes of path and not one byte more."""
    pad = hosts.SOCKET_PATH_MAX - len(os.fsencode(str(tmp_path))) - 1
    for extra, binds in ((0, True), (1, False)):
        path = tmp_path / ("s" * (pad + extra))
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.bind(str(path))
            except OSError:
                assert not binds, f"{len(os.fsencode(str(path)))} bytes should bind"
            else:
                assert binds, f"{len(os.fsencode(str(path)))} bytes bound"
