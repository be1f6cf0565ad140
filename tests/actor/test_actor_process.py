"""The actor process as a user meets it: bad config, failing env builds, SIGTERM, no learner."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests import procs

pytestmark = pytest.mark.integration


def run_actor(
    *args: str, timeout: float = 60, env: dict | None = None
) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "actor", *args],
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_bad_config_lists_every_problem():
    r = run_actor("--num-envs", "0", "--learner", "nohost", "--lanes", "x", "--seed", "-1")
    assert r.returncode == 2
    for name in (
        "--num-envs: must be >= 1",
        "learner must be HOST:PORT",
        "--lanes: expected an integer",
        "--seed: must be >= 0",
    ):
        assert name in r.stderr


def test_settings_the_learner_owns_are_refused_with_where_to_set_them(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(
        "[learner]\nunroll_length = 16\n[actor]\nunroll_length = 16\nsticky_actions = 0.25\n"
    )
    r = run_actor(
        *("--arch", "nature", "--no-last-action", "--config", str(config), "--level", "1-2"),
        *("--frame-skip", "2", "--reward-scale", "0.1", "--frontier-starts", "0.5"),
    )
    assert r.returncode == 2
    env = "the actor takes its env settings from the learner at registration; set"
    for line in (
        f"{config}: [actor] unroll_length: the actor takes the unroll length from the learner at "
        "registration; set --unroll-length on the learner and remove it here",
        f"{config}: [actor] sticky_actions: {env} --sticky-actions on the learner and remove it "
        "here",
        f"--level: {env} --level on the learner and remove it here",
        f"--frame-skip: {env} --frame-skip on the learner and remove it here",
        f"--frontier-starts: {env} --frontier-starts on the learner and remove it here",
        "--reward-scale: the learner scales and clips rewards in its loss: set "
        "--loss-reward-scale there, remove it here",
        "--arch: the actor takes its network from the learner at registration; set --arch on "
        "the learner and remove it here",
        "--last-action: the network always takes the previous action now: remove it here",
    ):
        assert f"  - {line}\n" in r.stderr


def test_heartbeat_timing_is_the_learners_and_refused_on_the_actors(tmp_path):
    """A learner at --heartbeat-interval-s 6 and actors timing out at 5 s of their own would start
    a new session every few seconds: the timing has one owner, whose Welcome carries it."""
    config = tmp_path / "run.toml"
    config.write_text("[actor]\nlearner_timeout_s = 10\n[actor.eval]\nheartbeat_interval_s = 6\n")
    fix = "set --heartbeat-interval-s on the learner and remove it here"
    for module, args, lines in (
        ("actor", ("--heartbeat-interval-s", "6", "--config", str(config)), (
            f"--heartbeat-interval-s: the actor takes its heartbeat interval from the learner at "
            f"registration; {fix}",
            f"{config}: [actor] learner_timeout_s: an actor starts a new session after 5 of the "
            f"learner's heartbeat intervals without word: {fix}",
        )),
        ("actor.eval", ("--learner-timeout-s", "5", "--config", str(config)), (
            f"--learner-timeout-s: an actor starts a new session after 5 of the learner's "
            f"heartbeat intervals without word: {fix}",
            f"{config}: [actor.eval] heartbeat_interval_s: the actor takes its heartbeat interval "
            f"from the learner at registration; {fix}",
        )),
    ):  # fmt: skip
        r = subprocess.run([sys.executable, "-m", module, *args], cwd=procs.ROOT,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 2, r.stderr
        for line in lines:
            assert f"  - {line}\n" in r.stderr, r.stderr


@contextlib.contextmanager
def learner_of(tmp_path, *args: str) -> Iterator[str]:
    """A learner running with these flags while the block runs; its HOST:PORT."""
    port = procs.free_port(2)
    learner = procs.learner(tmp_path / "run", port, procs.free_port(), *args)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        learner.stop()


def test_every_env_setting_flag_of_the_learner_is_refused_on_the_actor():
    from actor.config import ActorConfig
    from common.env_spec import EnvSpec
    from learner.config import LearnerConfig

    learner_flags = {f.name for f in dataclasses.fields(LearnerConfig)}
    for f in dataclasses.fields(EnvSpec):
        assert f.name in learner_flags and f.name in ActorConfig.RETIRED, f.name
        assert f"--{f.name.replace('_', '-')} on the learner" in ActorConfig.RETIRED[f.name]


def test_env_build_failure_exits_nonzero_with_a_clear_message(tmp_path):
    with learner_of(tmp_path, "--level", "tests.fakes:FlakyBuild-v0") as address:
        r = run_actor(
            *("--learner", address, "--num-envs", "1", "--build-retries", "1"),
            env={"FLAKY_FAILURES": "99"},
        )
    assert r.returncode == 1
    assert (
        "could not build env 0 for level 'tests.fakes:FlakyBuild-v0' after 2 attempts" in r.stderr
    )


def test_a_metrics_port_in_use_is_refused_with_the_flag_to_change():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_actor("--metrics-port", str(port), "--num-envs", "1")
    assert r.returncode == 1, r.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in r.stderr
    assert "pass another --metrics-port" in r.stderr and "Traceback" not in r.stderr


def test_hung_env_build_exits_instead_of_hanging(tmp_path):
    with learner_of(tmp_path, "--level", "tests.fakes:HangingBuild-v0") as address:
        r = run_actor("--learner", address, "--num-envs", "1", "--build-timeout-s", "2")
    assert r.returncode != 0
    assert "did not finish within its 2 s budget" in r.stderr


@pytest.mark.slow
def test_sigterm_stops_an_actor_waiting_for_a_learner(tmp_path):
    """No learner listens: the actor waits for weights, then exits cleanly on SIGTERM."""
    port = procs.free_port(2)
    p = procs.actor(tmp_path, port, 0, procs.free_port(), "--num-envs", "2")
    procs.wait_until(
        "the actor to wait for weights",
        lambda: "waiting for the first weights" in p.output(),
        60,
        [p],
    )
    p.popen.send_signal(signal.SIGTERM)
    assert p.popen.wait(20) == 0  # within the actor program's stopwaitsecs


@pytest.mark.slow
def test_sigterm_stops_a_playing_actor_cleanly_before_its_supervisor_would_kill_it(tmp_path):
    port, lport = procs.free_port(2), procs.free_port()
    learner = procs.learner(
        tmp_path / "run", port, lport, "--unroll-length", "8", "--batch-chunks", "1"
    )
    aport = procs.free_port()
    a = procs.actor(tmp_path, port, 0, aport, "--num-envs", "2")
    try:
        procs.wait_until(
            "chunks from the actor",
            lambda: procs.scrape(aport).get("mario_actor_chunks_sent_total", 0) >= 2,
            90,
            [learner, a],
        )
        a.popen.send_signal(signal.SIGTERM)
        # supervisord sends SIGKILL after the actor program's stopwaitsecs (20 s); on an idle
        # 2-core box it exits in well under a second (a timed target would fail under load)
        assert a.popen.wait(20) == 0
        assert "stopped" in a.output()
    finally:
        a.stop()
        learner.stop()
