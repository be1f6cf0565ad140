"""The weight publisher: the IO thread gets the newest snapshot as it was when offered; snapshots
that a newer offer replaced while the thread was busy are never sent."""

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
    publisher = Publisher(send, model.spec.to_wire(), "float16", spent=costs.append)
    try:
        publisher.offer(1, model)
        assert sending.wait(30)  # version 1 is on its way; the next offers queue up
        for version in (2, 3, 4):
            with torch.no_grad():
                model.policy.bias.fill_(version)
            publisher.offer(version, model)
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
    assert [w.policy_version for w in sent] == [1, 4]
    bias = sent[1].tensors["policy.bias"]
    assert bias.dtype == np.float16 and (bias == 4).all()
    assert sent[1].model_spec == model.spec.to_wire()
    assert not publisher.thread.is_alive()
    assert len(costs) == 2 and all(c > 0 for c in costs)  # each message's preparation, timed


def test_float16_weights_keep_the_input_normalisers_moments_and_count_in_float32():
    sent: list[wire.Weights] = []
    model = ActorCritic(ModelSpec())
    with torch.no_grad():
        model.input_count.fill_(1e6)  # a frame count no float16 holds
        model.input_var.fill_(1e5)
    publisher = Publisher(
        lambda frames: sent.append(wire.decode(frames)), model.spec.to_wire(), "float16"
    )
    try:
        publisher.offer(1, model)
        deadline = time.monotonic() + 30
        while not sent:
            assert time.monotonic() < deadline, "nothing was published"
            time.sleep(0.01)
    finally:
        publisher.stop()
    tensors = sent[0].tensors
    assert tensors["input_count"].dtype == np.float32 and float(tensors["input_count"]) == 1e6
    assert tensors["input_var"].dtype == np.float32 and (tensors["input_var"] == 1e5).all()
    assert tensors["trunk.fc.weight"].dtype == np.float16  # the parameters travel in float16
