"""The weight publisher: the IO thread gets the newest snapshot as it was when offered, with the
run's env frames at its version; snapshots that a newer offer replaced while the thread was busy
are never sent."""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from common import wire
from common.model import ActorCritic, ModelSpec
from learner.publisher import Publisher


def test_the_newest_snapshot_is_sent_and_the_older_waiting_ones_dropped():
    sent: list[wire.Weights] = []
    sending, release = threading.Event(), threading.Event()

    def send(frames) -> None:  # the IO thread's side, as slow as it pleases
        sent.append(wire.decode(frames))
        sending.set()
        release.wait(30)

    model = ActorCritic(ModelSpec())
    costs: list[float] = []
    publisher = Publisher(send, model.spec.to_wire(), spent=costs.append)
    try:
        publisher.offer(1, model, env_frames=1_024)
        assert sending.wait(30)  # version 1 is on its way; the next offers queue up
        for version in (2, 3, 4):
            with torch.no_grad():
                model.policy.bias.fill_(version)
            publisher.offer(version, model, env_frames=1_024 * version)
        with torch.no_grad():
            model.policy.bias.fill_(99.0)  # a change after the offer is not in its snapshot
        release.set()
        deadline = time.monotonic() + 30
        while len(sent) < 2:
            assert time.monotonic() < deadline, "the newest snapshot was not sent"
            time.sleep(0.01)
    finally:
        release.set()
        publisher.stop()
    assert [(w.policy_version, w.env_frames) for w in sent] == [(1, 1_024), (4, 4_096)]
    bias = sent[1].tensors["policy.bias"]
    assert bias.dtype == np.float32 and (bias == 4).all()
    assert sent[1].model_spec == model.spec.to_wire()
    assert not publisher.thread.is_alive()
    assert len(costs) == 2 and all(c > 0 for c in costs)  # each message's preparation, timed
