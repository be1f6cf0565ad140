"""common.wire: every message round-trips, and decode raises ProtocolError, and only that, on
anything malformed, naming what is wrong (the fuzzer: test_wire_fuzz.py; a chunk's arrays:
test_chunk.py)."""

import dataclasses
import math
import tracemalloc

import msgpack
import numpy as np
import pytest

from common import chunk
from common.wire import (
    PROTOCOL_VERSION,
    Chunk,
    Credit,
    Heartbeat,
    Limits,
    ProtocolError,
    Refuse,
    Weights,
    WeightsRequest,
    decode,
    encode,
    with_seq,
)
from tests.common.frames import (
    array_slot,
    as_bytes,
    header_of,
    rejects,
    sample_messages,
    with_header,
)
from tests.fakes import make_chunk

# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("msg", sample_messages(), ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("buffer", [bytes, bytearray, memoryview, lambda f: f])
def test_round_trip(msg, buffer):
    frames = [buffer(f) for f in encode(msg)]
    decoded = decode(frames)
    assert type(decoded) is type(msg)
    assert decoded == msg
    if isinstance(msg, Weights):
        assert list(decoded.tensors) == list(msg.tensors)  # frame order = dict order
        for name, tensor in msg.tensors.items():
            assert decoded.tensors[name].dtype == tensor.dtype
            assert decoded.tensors[name].shape == tensor.shape
            np.testing.assert_array_equal(decoded.tensors[name], tensor)
    if isinstance(msg, Chunk):
        assert list(decoded.arrays) == [a.name for a in chunk.LAYOUT]
        for name, want in msg.arrays.items():
            got = decoded.arrays[name]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            assert not got.flags.writeable  # callers copy before mutating
        assert decoded.episodes == msg.episodes


def test_chunk_properties():
    msg = make_chunk(2, T=8, K=4, H=3, W=4, A=12)
    assert (msg.unroll_length, msg.num_envs, msg.num_actions) == (8, 4, 12)
    assert msg.frame_shape == (3, 4)
    assert msg.payload_bytes == sum(a.nbytes for a in msg.arrays.values())


def test_frames_cross_zero_copy_both_ways():
    msg = make_chunk(3, T=16, K=8, H=84, W=84)
    frames = encode(msg)
    slot = array_slot(frames, "frames")
    assert np.shares_memory(np.frombuffer(frames[slot], np.uint8), msg.arrays["frames"])
    received = as_bytes(frames)  # what the socket hands over
    decoded = decode(received)
    assert np.shares_memory(decoded.arrays["frames"], np.frombuffer(received[slot], np.uint8))


def test_non_contiguous_arrays_encode_correctly():
    msg = make_chunk(4, T=4, K=3, H=5, W=5)
    frames = msg.arrays["frames"]
    transposed = np.ascontiguousarray(frames.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert not transposed.flags.c_contiguous
    view = dataclasses.replace(msg, arrays={**msg.arrays, "frames": transposed})
    np.testing.assert_array_equal(decode(encode(view)).arrays["frames"], frames)


def test_encode_refuses_non_messages():
    with pytest.raises(TypeError):
        encode({"type": "credit"})


# ---------------------------------------------------------------------------------------------
# Named rejections: the message says what is wrong
# ---------------------------------------------------------------------------------------------


def test_version_mismatch_names_both_versions():
    frames = encode(Credit(credits=1, policy_version=0))
    header = header_of(frames)
    header["v"] = PROTOCOL_VERSION + 1
    rejects(
        with_header(frames, header), "version", f"v{PROTOCOL_VERSION + 1}", f"v{PROTOCOL_VERSION}"
    )


def test_unknown_type_missing_and_extra_fields():
    frames = encode(Credit(credits=1, policy_version=0))
    header = header_of(frames)
    rejects(with_header(frames, {**header, "type": "teleport"}), "unknown message type", "teleport")
    rejects(with_header(frames, {**header, "f": {"credits": 1}}), "missing ['policy_version']")
    extra = {**header, "f": {**header["f"], "bonus": 1}}
    rejects(with_header(frames, extra), "unexpected ['bonus']")
    rejects(with_header(frames, {**header, "x": 0}), "header", "unexpected ['x']")


def test_bool_is_not_int_and_int_is_not_bool():
    frames = encode(Credit(credits=1, policy_version=0))
    header = header_of(frames)
    header["f"]["credits"] = True
    rejects(with_header(frames, header), "credit.credits", "must be an int", "bool")
    frames = encode(Refuse(reason="x", fatal=False))
    header = header_of(frames)
    header["f"]["fatal"] = 0
    rejects(with_header(frames, header), "refuse.fatal", "must be a bool")


def test_weights_travel_as_float32_only():
    """Nothing sends float16 weights: a message of them is refused on either side, by name."""
    half = {"conv.bias": np.ones(2, dtype=np.float16)}
    with pytest.raises(ProtocolError, match=r"weights.tensors\['conv.bias'\] must be a float32"):
        Weights(policy_version=1, env_frames=0, tensors=half, model_spec={})
    full = Weights(
        policy_version=1, env_frames=0, tensors={"conv.bias": np.ones(2, np.float32)}, model_spec={}
    )
    frames = as_bytes(encode(full))
    header = header_of(frames)
    header["a"][0][1] = "float16"
    frames[1] = np.ones(2, np.float16).tobytes()
    rejects(with_header(frames, header), "weights.tensors['conv.bias'] dtype 'float16' not allowed")


def test_weights_carry_the_runs_env_frames():
    w = Weights(policy_version=3, env_frames=4_096, tensors={}, model_spec={})
    assert decode(encode(w)).env_frames == 4_096
    header = header_of(encode(w))
    header["f"]["env_frames"] = -1
    rejects([msgpack.packb(header)], "weights.env_frames", "out of range")
    del header["f"]["env_frames"]
    rejects([msgpack.packb(header)], "missing ['env_frames']")


def test_weights_naming_the_removed_level_weights_are_refused():
    """Level sampling was removed (protocol 11): a learner of a release that sent the actors its
    draw weights with the weights is refused by its version, and such a field by its name."""
    header = header_of(encode(Weights(policy_version=3, env_frames=0, tensors={}, model_spec={})))
    header["f"]["level_weights"] = {"1-2": 0.5}
    rejects([msgpack.packb(header)], "weights fields", "unexpected ['level_weights']")
    header["v"] = 10
    rejects([msgpack.packb(header)], "peer speaks v10", f"this side speaks v{PROTOCOL_VERSION}")


def test_weights_naming_the_removed_frontier_shares_are_refused():
    """Frontier starts by stall rate was removed (protocol 12): a learner of a release that sent
    each level's share of frontier starts with the weights is refused by its version, and such a
    field by its name."""
    header = header_of(encode(Weights(policy_version=3, env_frames=0, tensors={}, model_spec={})))
    header["f"]["frontier_shares"] = {"1-2": 0.5}
    rejects([msgpack.packb(header)], "weights fields", "unexpected ['frontier_shares']")
    header["v"] = 11
    rejects([msgpack.packb(header)], "peer speaks v11", f"this side speaks v{PROTOCOL_VERSION}")


def test_nan_and_negative_scalars():
    frames = encode(Heartbeat(sent_time=1.0, policy_version=0))
    header = header_of(frames)
    header["f"]["sent_time"] = math.nan
    rejects(with_header(frames, header), "heartbeat.sent_time", "finite")
    header = header_of(encode(WeightsRequest(have_version=0)))
    header["f"]["have_version"] = -2
    rejects([msgpack.packb(header)], "weights_request.have_version", "out of range")


def test_specs_must_be_flat():
    frames = encode(sample_messages()[1])
    header = header_of(frames)
    header["f"]["env_spec"] = {"level": {"world": 1}}
    rejects(with_header(frames, header), "welcome.env_spec['level']", "dict")
    header = header_of(frames)
    header["f"]["model_spec"] = {"arch": [1]}
    rejects(with_header(frames, header), "welcome.model_spec['arch']", "list")


def test_frame_count_and_frame_size():
    frames = as_bytes(encode(make_chunk()))
    n = len(frames)  # the header and one frame per array of the layout
    assert n == 1 + len(chunk.LAYOUT)
    rejects(frames[:-1], f"expected {n} frames, got {n - 1}")
    rejects([*frames, b""], f"expected {n} frames, got {n + 1}")
    rejects([], "non-empty")
    slot = array_slot(frames, "rewards")
    short = [*frames[:slot], frames[slot][:-1], *frames[slot + 1 :]]
    rejects(short, "chunk.rewards frame is 23 bytes", "needs 24")


def test_array_declarations():
    frames = as_bytes(encode(make_chunk()))
    header = header_of(frames)
    slot = array_slot(frames, "rewards")
    header["a"][slot - 1][1] = "float64"
    rejects(with_header(frames, header), "chunk.rewards dtype 'float64' not allowed")
    header = header_of(frames)
    header["a"][slot - 1][0] = "frames"
    rejects(with_header(frames, header), "chunk.frames appears twice")
    header = header_of(frames)
    header["a"][slot - 1][0] = "values"
    rejects(with_header(frames, header), "chunk.values is not a chunk array")
    header = header_of(frames)
    header["a"][slot - 1][2] = [-3, 2]
    rejects(with_header(frames, header), "chunk.rewards shape", "-3")
    weights = encode(sample_messages()[8])
    header = header_of(weights)
    header["a"][0][1] = "float64"
    rejects(with_header(weights, header), "weights.tensors['conv.weight'] dtype 'float64'")
    credit = encode(Credit(credits=1, policy_version=0))
    header = {**header_of(credit), "a": [["x", "uint8", [1]]]}
    rejects([msgpack.packb(header), b"\0"], "credit carries no arrays")


def test_shape_consistency_is_checked():
    frames = as_bytes(encode(make_chunk(5, T=4, K=3)))
    header = header_of(frames)
    slot = array_slot(frames, "behaviour_logits")
    header["a"][slot - 1][2] = [3, 4, 7]  # T and K swapped: same byte count
    rejects(
        with_header(frames, header),
        "chunk.behaviour_logits has shape [3, 4, 7], expected [T, K, A] = [4, 3, ?]",
    )


@pytest.mark.parametrize(
    ("limit", "value", "fragment"),
    [
        ("max_array_bytes", 100, "over max_array_bytes=100"),
        ("max_total_bytes", 300, "over max_total_bytes=300"),
        ("max_arrays", 8, "over max_arrays=8"),
        ("max_dim", 5, "max_dim=5"),
        ("max_header_bytes", 200, "over max_header_bytes=200"),
        ("max_episodes_per_chunk", 1, "over max_episodes_per_chunk=1"),
    ],
)
def test_limits(limit, value, fragment):
    frames = encode(make_chunk(6, T=4, K=2, H=6, W=6))
    decode(frames)
    rejects(frames, fragment, limits=Limits(**{limit: value}))


def test_absurd_declared_shape_is_refused_without_allocating():
    frames = as_bytes(encode(make_chunk()))
    header = header_of(frames)
    slot = array_slot(frames, "frames")
    header["a"][slot - 1][2] = [2**40, 2**40]
    absurd = with_header(frames, header)
    huge = Limits(max_dim=2**62, max_array_bytes=2**100, max_total_bytes=2**101)
    tracemalloc.start()
    try:
        rejects(absurd, "max_dim")
        rejects(absurd, "chunk.frames frame is", limits=huge)  # the frame is what it is
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 1 << 20


def test_bad_episode_stats():
    frames = as_bytes(encode(make_chunk()))
    header = header_of(frames)
    header["f"]["episodes"][0]["outcome"] = "timeout"
    rejects(with_header(frames, header), "chunk.episodes[0]", "episode.outcome")
    header = header_of(frames)
    header["f"]["episodes"][1]["flag"] = False
    rejects(with_header(frames, header), "chunk.episodes[1]", "contradicts")
    header = header_of(frames)
    header["f"]["episodes"][0]["length"] = 0
    rejects(with_header(frames, header), "episode.length=0 is out of range")
    header = header_of(frames)
    del header["f"]["episodes"][0]["max_x"]
    rejects(with_header(frames, header), "chunk.episodes[0]: missing ['max_x']")
    header = header_of(frames)
    header["f"]["episodes"][0]["start_x"] = -2  # -1: the level's start, else a snapshot's x
    rejects(with_header(frames, header), "episode.start_x=-2 is out of range")
    header["f"]["episodes"][0]["start_x"] = 2900
    assert decode(with_header(frames, header)).episodes[0].start_x == 2900


def test_not_msgpack_and_not_buffers():
    rejects([b"\xc1"], "not valid msgpack")
    rejects([b"\x93\x01\x02\x03"], "must be a msgpack map")
    rejects([msgpack.packb({"v": 1}) + b"\x00"], "not valid msgpack")  # trailing data
    rejects(["not bytes"], "header frame is not a bytes-like buffer")
    rejects(None, "non-empty sequence")
    strided = memoryview(bytes(64))[::2]
    rejects([strided], "not a contiguous buffer")


def test_with_seq_changes_only_an_encoded_chunks_seq_and_shares_its_arrays():
    msg = make_chunk(T=4, K=2, H=84, W=84, A=7, seq=0)
    frames = encode(msg)
    again = with_seq(frames, 41)
    assert decode(again) == dataclasses.replace(msg, seq=41)
    assert all(a is b for a, b in zip(again[1:], frames[1:], strict=True))
    with pytest.raises(ProtocolError):
        with_seq(frames, -1)
    with pytest.raises(ValueError, match="encoded chunk"):
        with_seq(encode(WeightsRequest(have_version=1)), 1)
