"""CURVE with real processes: keys from `make keys` (python -m scripts.service keys); an actor with an unknown key pair gets no
weights and lands no chunk, while an authorised one trains; an open non-loopback bind is refused
unless --insecure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import procs

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LEARNER_ARGS = ["--unroll-length", "16", "--batch-chunks", "2", "--replay-capacity", "0"]
ACTOR_ARGS = ["--num-envs", "1"]


def keys_script(keys: Path, n: int) -> None:
    """`make keys`'s command: key pairs for the learner and actors 0..n-1 in `keys`."""
    env = {**os.environ, "MARIO_KEYS": str(keys), "MARIO_N": str(n), "MARIO_EVAL": "false"}
    argv = [sys.executable, "-m", "scripts.service", "keys"]
    subprocess.run(argv, cwd=procs.ROOT, env=env, check=True, capture_output=True, timeout=60)


def total(metrics: dict[str, float], name: str) -> float:
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


@pytest.mark.rehearsal
def test_only_the_authorised_actor_reaches_the_learner(tmp_path):
    keys, other = tmp_path / "keys", tmp_path / "other"
    keys_script(keys, 1)  # the learner and actor 0
    keys_script(other, 2)  # key pairs the learner never saw
    rogue_keys = other / "actor-1"  # knows the learner's real public key, is not authorised
    shutil.copyfile(keys / "learner/learner.key", rogue_keys / "learner.key")
    port, lport, good_port, rogue_port = (procs.free_port(2), *(procs.free_port() for _ in "abc"))
    learner = procs.learner(
        tmp_path / "run", port, lport, *LEARNER_ARGS, "--curve-dir", keys / "learner"
    )
    rogue = procs.actor(tmp_path, port, 1, rogue_port, *ACTOR_ARGS, "--curve-dir", str(rogue_keys))
    started = [learner, rogue]
    lm = lambda: procs.scrape(lport)  # noqa: E731
    try:
        # -- the unknown key alone: it knocks, and nothing gets through either way -----------
        procs.wait_until(
            "the unknown actor to try the learner",
            lambda: bool(lm()) and "registering with learner" in rogue.output(),
            120,
            started,
        )
        assert "CURVE on: 1 authorised actor keys" in learner.output()
        time.sleep(10)
        m, r = lm(), procs.scrape(rogue_port)
        assert total(m, "mario_learner_chunks_total") == 0
        assert total(m, "mario_learner_messages_rejected_total") == 0  # not even decoded
        assert m["mario_actors_connected"] == 0 and m["mario_learner_updates_total"] == 0
        assert r.get("mario_actor_policy_version", 0) == 0  # no weights
        assert r.get("mario_actor_connected", 0) == 0
        assert r.get("mario_actor_chunks_sent_total", 0) == 0

        # -- the authorised actor trains ----------------------------------------------------
        good = procs.actor(
            tmp_path, port, 0, good_port, *ACTOR_ARGS, "--curve-dir", str(keys / "actor-0")
        )
        started.append(good)
        procs.wait_until(
            "3 updates from the authorised actor",
            lambda: lm().get("mario_learner_updates_total", 0) >= 3,
            120,
            started,
        )
        procs.wait_until(
            "the authorised actor on a broadcast policy",
            lambda: procs.scrape(good_port).get("mario_actor_policy_version", 0) >= 1,
            30,
            started,
        )
        m, g, r = lm(), procs.scrape(good_port), procs.scrape(rogue_port)
        assert m["mario_actors_connected"] == 1
        assert g["mario_actor_connected"] == 1
        # every chunk the learner counted came from the authorised actor
        assert 0 < total(m, "mario_learner_chunks_total") <= g["mario_actor_chunks_sent_total"]
        assert r.get("mario_actor_policy_version", 0) == 0
        assert r.get("mario_actor_connected", 0) == 0
        assert r.get("mario_actor_chunks_sent_total", 0) == 0
        assert "actor 1 registered" not in learner.output()
    finally:
        for p in started:
            p.stop()


def test_an_open_bind_needs_keys_or_insecure(tmp_path):
    port, lport = procs.free_port(2), procs.free_port()
    refused = procs.learner(tmp_path / "refused", port, lport, "--host", "0.0.0.0")
    try:
        assert refused.popen.wait(60) == 2
    finally:
        refused.stop()
    assert (
        "host 0.0.0.0 is not loopback: set --curve-dir (make keys) so only authorised actors "
        "can connect, or pass --insecure"
    ) in refused.output()
    assert not (tmp_path / "refused/config.json").exists()  # refused before touching the run

    insecure = procs.learner(tmp_path / "open", port, lport, "--host", "0.0.0.0", "--insecure")
    try:
        procs.wait_until(
            "the --insecure learner listening on 0.0.0.0",
            lambda: "listening on 0.0.0.0" in insecure.output(),
            90,
            [insecure],
        )
    finally:
        assert insecure.stop() == 0, insecure.output()[-2000:]
