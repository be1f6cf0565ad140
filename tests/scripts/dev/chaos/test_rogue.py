"""The soak's rogue peer against a real learner ingest: every mutated copy of real traffic is
rejected, each exactly once, and the ingest keeps serving real actors."""

from __future__ import annotations

import dataclasses
import random
import time

import pytest

from common import wire
from common.metrics import REJECT_REASONS, LearnerMetrics
from learner.config import LearnerConfig
from learner.ingest import Ingest, IngestSettings
from scripts.dev.chaos import rogue
from tests.learner.test_ingest import Client
from tests.procs import free_port

pytestmark = pytest.mark.slow  # plays a real Mario env for its chunk


@pytest.fixture(scope="module")
def traffic():
    return rogue.real_traffic("1-1", seed=0)


def rejected(ing: Ingest) -> float:
    reg = ing.metrics.registry
    return sum(
        reg.get_sample_value("mario_learner_messages_rejected_total", {"reason": r}) or 0.0
        for r in REJECT_REASONS
    )


def wait_for(check, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_every_mutation_of_every_message_decodes_or_raises_protocol_error(traffic):
    rng = random.Random(1)
    for message in traffic:
        for mutation, fn in rogue.MUTATIONS.items():
            for _ in range(30):
                frames = fn(traffic[message], rng)
                try:
                    msg = wire.decode(frames)
                except wire.ProtocolError:
                    continue
                # a registration that still decodes names a run no learner runs: refused
                run_id = msg.run_id if isinstance(msg, wire.Register) else None
                assert run_id != LearnerConfig().run_id, mutation


def test_an_ingest_rejects_each_rogue_message_exactly_once_and_serves_a_real_actor(traffic):
    cfg = LearnerConfig()
    settings = IngestSettings(
        run_id=cfg.run_id,
        env_spec=cfg.env_spec(),
        model_spec=cfg.model_spec().to_wire(),
        unroll_length=cfg.unroll_length,
        credits_per_actor=2,
        queue_chunks=8,
        max_policy_lag=cfg.max_policy_lag,
        heartbeat_interval_s=0.5,
        actor_timeout_s=30,
    )
    port = free_port(2)
    ing = Ingest(settings, LearnerMetrics(), lambda: 0, host="127.0.0.1", port=port)
    ing.start()
    peer = rogue.RoguePeer(f"127.0.0.1:{port}", traffic, seed=0)
    try:
        n = 400
        for _ in range(n):
            peer.send()
        wait_for(lambda: rejected(ing) >= n, f"{n} rejections")
        sentinel = wire.Heartbeat(sent_time=1.0, policy_version=0)  # from an unknown peer too
        peer.sock.send_multipart(wire.encode(sentinel))
        wait_for(lambda: rejected(ing) >= n + 1, "the sentinel's rejection")
        assert rejected(ing) == n + 1  # FIFO per peer: each of the n counted once, before it
        assert ing.actors == {} and len(ing.queue) == 0
        assert len(set(peer.sent)) > 30  # many message x mutation kinds were tried
        assert ing.thread.is_alive()

        # a real actor registers and is served as usual afterwards
        actor = Client(port)
        real = wire.decode(traffic["register"])
        actor.send(dataclasses.replace(real, run_id=cfg.run_id, actor_id=0))
        assert isinstance(actor.recv(), wire.Welcome)
    finally:
        peer.close()
        ing.stop()
