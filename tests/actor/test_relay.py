"""The weight relay forwards the learner's weights and nothing else."""

from __future__ import annotations

import threading
import time

import numpy as np
import zmq

from actor.relay import Relay, RelayConfig
from common import wire
from common.metrics import RelayMetrics
from scripts.ports import free_ports


def test_weights_are_forwarded_byte_for_byte_and_anything_else_is_dropped_and_counted():
    ctx = zmq.Context()
    port, relay_port = free_ports(2), free_ports()
    learner = ctx.socket(zmq.PUB)  # the learner's broadcast socket, on PORT+1
    learner.bind(f"tcp://127.0.0.1:{port + 1}")
    metrics = RelayMetrics()
    cfg = RelayConfig(learner=f"127.0.0.1:{port}", bind=f"127.0.0.1:{relay_port}")
    relay = Relay(cfg, metrics, ctx)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    actor = ctx.socket(zmq.SUB)
    actor.setsockopt(zmq.SUBSCRIBE, b"")
    actor.connect(f"tcp://127.0.0.1:{relay_port}")
    weights = wire.Weights(
        policy_version=7,
        env_frames=7_168,
        tensors={"w": np.arange(6, dtype=np.float32)},
        model_spec={},
    )
    frames = wire.encode(weights)
    try:
        received = None
        deadline = time.monotonic() + 30
        while received is None:  # PUB/SUB joins take a moment: publish until one arrives
            assert time.monotonic() < deadline, "no weights came through the relay"
            learner.send_multipart([b"\xc1 not msgpack"])  # malformed
            learner.send_multipart(wire.encode(wire.Heartbeat(sent_time=1.0, policy_version=7)))
            learner.send_multipart(frames)
            if actor.poll(200):
                received = actor.recv_multipart()
    finally:
        relay.stop()
        thread.join(10)
        for sock in (learner, actor):
            sock.close(linger=0)
        ctx.term()
    assert received == [bytes(f) for f in frames]  # the learner's frames, undecoded
    assert metrics.weights._value.get() >= 1 and metrics.policy_version._value.get() == 7
    assert metrics.dropped._value.get() >= 2  # the malformed message and the heartbeat
    assert metrics.weights_bytes._value.get() >= sum(len(f) for f in frames)
