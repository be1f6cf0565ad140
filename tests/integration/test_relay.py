"""An actor host's weight relay, with real processes: the actor plays the weights the learner
broadcast through the relay, and when the relay dies it asks the learner for them instead."""

from __future__ import annotations

import sys

import pytest

from tests import procs
from tests.integration.test_mario_processes import ACTOR_ARGS, LEARNER_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal, pytest.mark.integration]


def relay(log_dir, port: int, relay_port: int, metrics_port: int) -> procs.Proc:
    argv = [sys.executable, "-m", "actor.relay", "--learner", f"127.0.0.1:{port}",
            "--bind", f"127.0.0.1:{relay_port}", "--metrics-port", str(metrics_port)]  # fmt: skip
    return procs.Proc(argv, log_dir / "relay.log")


def test_an_actor_takes_weights_from_its_relay_and_from_the_learner_while_the_relay_is_down(
    tmp_path,
):
    port, lport, aport = procs.free_port(2), procs.free_port(), procs.free_port()
    rport, rmport = procs.free_port(), procs.free_port()
    learner = procs.learner(tmp_path / "run", port, lport, *LEARNER_ARGS)
    relays = [relay(tmp_path, port, rport, rmport)]
    actor = procs.actor(
        tmp_path, port, 0, aport, *ACTOR_ARGS, "--weights-from", f"127.0.0.1:{rport}"
    )
    version = lambda: procs.scrape(aport).get("mario_actor_policy_version", -1)  # noqa: E731
    forwarded = lambda: procs.scrape(rmport).get("mario_relay_weights_total", 0)  # noqa: E731
    try:
        procs.wait_until("weights through the relay", lambda: forwarded() >= 3, 180,
                         [learner, relays[0], actor])  # fmt: skip
        procs.wait_until("the actor on a relayed policy", lambda: version() >= 1, 60,
                         [learner, relays[0], actor])  # fmt: skip
        assert "asking the learner" not in actor.output()  # the broadcast path works

        relays[0].kill9()  # the relay is gone: the actor's SUB hears nothing more
        before = version()
        procs.wait_until("newer weights from the learner itself", lambda: version() >= before + 2,
                         120, [learner, actor])  # fmt: skip
        assert "no weight broadcast for 3 s; asking the learner" in actor.output()

        relays.append(relay(tmp_path, port, rport, rmport))  # back, as supervisord would
        procs.wait_until("weights through the new relay", lambda: forwarded() >= 2, 60,
                         [learner, relays[1], actor])  # fmt: skip
        after = version()
        procs.wait_until("the actor following the relay again", lambda: version() >= after + 2, 60,
                         [learner, relays[1], actor])  # fmt: skip
    finally:
        for p in (actor, *relays, learner):
            p.stop()
