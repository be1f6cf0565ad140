"""Helpers for the wire tests: sample messages, and frames taken apart and put back together."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from common.wire import (
    DEFAULT_LIMITS,
    Credit,
    Heartbeat,
    Limits,
    ProtocolError,
    Refuse,
    Register,
    Weights,
    WeightsRequest,
    Welcome,
    decode,
)
from tests.fakes import make_chunk

SPEC = {"level": "1-1", "frame_skip": 4, "gamma": 0.99, "color": False}


def sample_messages() -> list:
    return [
        Register(run_id="run-7", actor_id=3, instance_id="a1b2", num_envs=16),
        Welcome(
            credits=2,
            policy_version=5,
            unroll_length=64,
            model_spec={"arch": "impala_cnn"},
            env_spec=SPEC,
            heartbeat_interval_s=1.0,
        ),
        Credit(credits=4, policy_version=0),
        Refuse(reason="env_spec mismatch: frame_skip 4 != 2", fatal=True),
        Refuse(reason="", fatal=False),
        Heartbeat(sent_time=1.7e9, policy_version=12),
        Heartbeat(sent_time=0, policy_version=0),  # an int time is taken as a float
        WeightsRequest(have_version=-1),
        Weights(
            policy_version=9,
            env_frames=36_864,
            tensors={
                "conv.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2),
                "conv.bias": np.ones(2, dtype=np.float32),
                "scale": np.array(0.5, dtype=np.float32),  # 0-d
                "empty": np.zeros((0, 4), dtype=np.float32),
            },
            model_spec={"arch": "impala_cnn"},
        ),
        Weights(policy_version=0, env_frames=0, tensors={}, model_spec={}),
        make_chunk(0),
        make_chunk(1, T=1, K=1, A=1),
        make_chunk(2, T=8, K=4, H=3, W=4, A=12),
    ]


def as_bytes(frames) -> list[bytes]:
    return [bytes(f) for f in frames]


def header_of(frames) -> dict:
    return msgpack.unpackb(bytes(frames[0]), raw=False)


def with_header(frames, header) -> list:
    return [msgpack.packb(header, use_bin_type=True), *frames[1:]]


def array_slot(frames, name: str) -> int:
    """Index of the frame that carries array `name`."""
    names = [spec[0] for spec in header_of(frames)["a"]]
    return 1 + names.index(name)


def with_array(frames, name: str, array: np.ndarray) -> list[bytes]:
    """The frames with array `name`'s bytes replaced by `array`'s."""
    frames = as_bytes(frames)
    frames[array_slot(frames, name)] = array.tobytes()
    return frames


def rejects(frames, *fragments: str, limits: Limits = DEFAULT_LIMITS) -> str:
    with pytest.raises(ProtocolError) as info:
        decode(frames, limits)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message
