"""One more chunk array is one line in the layout plus the actor code that fills it: a layout
with an extra array goes through actor buffers -> wire -> the learner's host copies -> collate ->
select -> replay storage with no other change (common/chunk.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actor.config import ActorConfig
from actor.main import to_wire_chunk
from actor.rollout import Lane
from common import chunk, wire
from common.env import FrameEnv
from common.env_spec import EnvSpec
from learner.batching import (
    collate,
    from_sequences,
    select,
    sequence_example,
    to_host,
    to_sequences,
)

EXTRA_ID = chunk.ChunkArray("extra_id", "uint8", ("T", "K"), device_dtype="int64")
LAYOUT = (*chunk.LAYOUT, EXTRA_ID)
T, K = 4, 2


def finished_chunks(lanes: int) -> list:
    """A chunk from each of `lanes` lanes of K Corridor envs; the producer of the extra array
    writes lane i's env k as 10 i + k at every step."""
    spec = EnvSpec(level="tests.fakes:Corridor-v0", frame_skip=1, no_progress_steps=5)
    rng = np.random.default_rng(0)
    out = []
    for i in range(lanes):
        lane = Lane([FrameEnv(spec) for _ in range(K)], T, 7, LAYOUT)
        for _ in range(T):
            lane.act(rng.integers(0, 7, size=K), np.zeros((K, 7), np.float32), 0)
            lane.arrays["extra_id"][lane.t] = [10 * i + k for k in range(K)]  # the producer
            lane.step()
        out += lane.take_finished()
    return out


def test_an_extra_array_travels_from_the_actor_to_replay():
    cfg = ActorConfig()
    finished = finished_chunks(2)
    sent = [to_wire_chunk(cfg, "inst", i, c, LAYOUT) for i, c in enumerate(finished)]
    received = [wire.decode(wire.encode(m), layout=LAYOUT) for m in sent]
    assert received == sent
    batch = collate([to_host(m, 1, pin=False) for m in received], torch.device("cpu"), LAYOUT)
    assert batch.extra_id.dtype == torch.int64  # its device dtype, as declared
    assert batch.extra_id.tolist() == [[0, 1, 10, 11]] * T  # [T, N]: the chunks' envs side by side
    index = torch.tensor([3, 0])
    sub = select(batch, index, LAYOUT)
    assert sub.extra_id.tolist() == [[11, 0]] * T
    torch.testing.assert_close(sub.frames, batch.frames[:, index])  # the other arrays alike
    stored = to_sequences(sub, LAYOUT)  # replay's form: [N, ...]
    assert stored["extra_id"].tolist() == [[11] * T, [0] * T]
    back = from_sequences(stored, sub.weights, LAYOUT)
    for name, tensor in vars(sub).items():
        torch.testing.assert_close(getattr(back, name), tensor, rtol=0, atol=0)
    example = sequence_example({"T": T, "H": 84, "W": 84, "A": 7, "C": 0}, LAYOUT)
    assert example["extra_id"].shape == (T,) and example["extra_id"].dtype == torch.int64


def test_the_real_layout_refuses_the_extra_array_on_both_sides():
    cfg = ActorConfig()
    (finished,) = finished_chunks(1)
    with pytest.raises(wire.ProtocolError, match=r"unexpected \['extra_id'\]"):
        to_wire_chunk(cfg, "inst", 0, finished)  # the sender's check
    frames = wire.encode(to_wire_chunk(cfg, "inst", 0, finished, LAYOUT))
    with pytest.raises(wire.ProtocolError, match="chunk.extra_id is not a chunk array"):
        wire.decode(frames)  # the receiver's
