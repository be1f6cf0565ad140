"""Learner + 2 Mario actor processes: training, broadcasts, checkpoints, crashes and restarts."""

from __future__ import annotations

import json

import pytest

from common.rundir import RunDir
from learner import checkpoint
from tests import procs

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal, pytest.mark.integration]

LEARNER_ARGS = [
    "--unroll-length",
    "16",
    "--batch-chunks",
    "2",
    "--checkpoint-interval-s",
    "3",
    "--heartbeat-interval-s",
    "0.5",
    "--actor-timeout-s",
    "4",
]
ACTOR_ARGS = ["--num-envs", "2", "--reconnect-backoff-max-s", "2"]  # heartbeats: the learner's


def test_train_survive_actor_kill_and_resume_after_learner_restart(tmp_path):
    port, lport = procs.free_port(2), procs.free_port()
    aports = [procs.free_port(), procs.free_port()]
    run = tmp_path / "run"
    learner = procs.learner(run, port, lport, *LEARNER_ARGS)
    actors = [procs.actor(tmp_path, port, i, aports[i], *ACTOR_ARGS) for i in range(2)]
    started = [learner, *actors]
    lm = lambda: procs.scrape(lport)  # noqa: E731
    try:
        # -- training through the real path -------------------------------------------------
        procs.wait_until(
            "10 updates", lambda: lm().get("mario_learner_updates_total", 0) >= 10, 180, started
        )
        for i, ap in enumerate(aports):  # each actor plays a policy the learner broadcast
            procs.wait_until(
                f"actor {i} on a broadcast policy",
                lambda ap=ap: procs.scrape(ap).get("mario_actor_policy_version", 0) >= 1,
                30,
                started,
            )
        procs.wait_until(
            "a checkpoint",
            lambda: checkpoint.latest_path(RunDir(run)) is not None,
            30,
            started,
        )
        resolved = json.loads(RunDir(run).config.read_text())
        assert resolved["frontier_starts"] == 0.25  # unset: what a run of one level uses

        # -- kill -9 one actor: the learner trains on with the other ------------------------
        actors[0].kill9()
        procs.wait_until(
            "the learner to forget the dead actor",
            lambda: lm().get("mario_actors_connected", 2) == 1,
            30,
            [learner, actors[1]],
        )
        before = lm()["mario_learner_updates_total"]
        procs.wait_until(
            "updates from the surviving actor",
            lambda: lm().get("mario_learner_updates_total", 0) >= before + 5,
            60,
            [learner, actors[1]],
        )

        # -- stop the learner, start it again on the same run dir -----------------------------
        assert learner.stop() == 0, learner.output()[-2000:]
        saved = checkpoint.load(checkpoint.latest_path(RunDir(run)))
        version = saved["policy_version"]
        assert version >= before + 5
        sent_before = procs.scrape(aports[1])["mario_actor_chunks_sent_total"]
        learner = procs.learner(run, port, lport, *LEARNER_ARGS)
        started = [learner, actors[1]]
        procs.wait_until("the restarted learner's metrics", lambda: bool(lm()), 60, started)
        assert lm()["mario_policy_version"] >= version  # resumed, not restarted from zero
        # its counters count its own work from 0 (no false reset for rate()); the gauges resume
        assert lm()["mario_learner_updates_total"] <= lm()["mario_policy_version"] - version
        assert lm()["mario_learner_run_env_frames"] >= saved["env_frames"]
        assert "resumed from" in learner.output()
        procs.wait_until(
            "the surviving actor to reconnect and stream",
            lambda: lm().get("mario_policy_version", 0) >= version + 5,
            90,
            started,
        )
        am = procs.scrape(aports[1])
        assert am["mario_actor_reconnects_total"] >= 1
        assert am["mario_actor_chunks_sent_total"] > sent_before
        # the standard process metrics (the soak's memory figures) on both sides
        assert am["process_resident_memory_bytes"] > 0
        assert lm()["process_resident_memory_bytes"] > 0
        # it registered with the restarted learner, then streamed (what the soak times)
        registered = am["mario_actor_registered_timestamp_seconds"]
        assert registered >= lm()["mario_learner_start_time_seconds"]
        assert am["mario_actor_last_chunk_timestamp_seconds"] >= registered
        assert lm()["mario_actors_connected"] == 1
    finally:
        for p in started:
            p.stop()


def test_a_recurrent_learner_trains_its_actors_network_and_keeps_its_core_on_resume(tmp_path):
    """--core lstm on the learner alone: the actor builds the core it is welcomed with and
    streams chunks with its state, none rejected; the checkpoint refuses a learner without it."""
    port, lport, aport = procs.free_port(2), procs.free_port(), procs.free_port()
    run = tmp_path / "run"
    learner = procs.learner(run, port, lport, *LEARNER_ARGS, "--core", "lstm")
    actor = procs.actor(tmp_path, port, 0, aport, *ACTOR_ARGS)
    started = [learner, actor]
    lm = lambda: procs.scrape(lport)  # noqa: E731
    try:
        procs.wait_until(
            "5 updates", lambda: lm().get("mario_learner_updates_total", 0) >= 5, 180, started
        )
        procs.wait_until(
            "the actor on a broadcast policy",
            lambda: procs.scrape(aport).get("mario_actor_policy_version", 0) >= 1,
            30,
            started,
        )
        metrics = lm()
        assert metrics["mario_learner_chunks_total{result=accepted}"] >= 10
        assert metrics.get("mario_learner_chunks_total{result=rejected}", 0) == 0
        assert learner.stop() == 0, learner.output()[-2000:]
        saved = checkpoint.load(checkpoint.latest_path(RunDir(run)))
        assert saved["model_spec"]["core"] == "lstm" and "core.weight_hh" in saved["model"]
        refused = procs.learner(run, port, lport, *LEARNER_ARGS)
        started.append(refused)
        assert refused.popen.wait(60) != 0
        assert "core is 'lstm' there, 'none' here (--core lstm)" in refused.output()
    finally:
        for p in started:
            p.stop()
