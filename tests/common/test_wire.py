"""common.wire: every message round-trips, and decode raises ProtocolError, and only that, on
anything malformed (named cases first, then a seeded fuzzer over >= 10,000 inputs)."""

import dataclasses
import math
import random
import tracemalloc

import msgpack
import numpy as np
import pytest

from common.wire import (
    DEFAULT_LIMITS,
    PROTOCOL_VERSION,
    Chunk,
    Credit,
    EpisodeStats,
    Heartbeat,
    Limits,
    ProtocolError,
    Refuse,
    Register,
    Weights,
    WeightsRequest,
    decode,
    encode,
)

# ---------------------------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------------------------


def make_chunk(seed: int = 0, T: int = 3, K: int = 2, H: int = 6, W: int = 5, A: int = 7) -> Chunk:
    """A random valid chunk: some steps terminated, some truncated (never both)."""
    rng = np.random.default_rng(seed)
    ends = rng.integers(0, 5, size=(T, K))  # 0: terminated, 1: truncated, else: goes on
    terminated, truncated = ends == 0, ends == 1
    first = rng.random((T + 4, K)) < 0.3  # [T+4, K]; first[0:4] is free
    first[4:] = terminated | truncated  # frames[3+t+1] starts an episode iff step t ended one
    final_index = np.argwhere(truncated).astype(np.int32)  # [n, 2]
    return Chunk(
        actor_id=int(rng.integers(0, 100)),
        instance_id="3f2a9c",
        seq=int(rng.integers(0, 1000)),
        level="1-1",
        policy_version=int(rng.integers(0, 50)),
        send_time=1.7e9 + float(rng.random()),
        episodes=(
            EpisodeStats(
                level="1-1", episode_return=12.5, length=33, max_x=410, flag=False, outcome="death"
            ),
            EpisodeStats(
                level="1-2", episode_return=-1.0, length=1, max_x=0, flag=True, outcome="flag"
            ),
        ),
        frames=rng.integers(0, 256, size=(T + 4, K, H, W), dtype=np.uint8),
        first=first,
        actions=rng.integers(0, A, size=(T, K), dtype=np.uint8),
        rewards=rng.standard_normal((T, K), dtype=np.float32),
        terminated=terminated,
        truncated=truncated,
        logits=rng.standard_normal((T, K, A), dtype=np.float32),
        final_frames=rng.integers(0, 256, size=(len(final_index), H, W), dtype=np.uint8),
        final_index=final_index,
        last_actions=np.where(first[3], A, rng.integers(0, A, size=K)).astype(np.uint8),
    )


SPEC = {"level": "1-1", "frame_skip": 4, "gamma": 0.99, "color": False}


def sample_messages() -> list:
    return [
        Register(
            run_id="run-7",
            actor_id=3,
            instance_id="a1b2",
            env_spec=SPEC,
            model_spec={"arch": "impala_cnn", "width": 32},
            num_envs=16,
            unroll_length=64,
        ),
        Credit(credits=4, policy_version=0),
        Refuse(reason="env_spec mismatch: frame_skip 4 != 2", fatal=True),
        Refuse(reason="", fatal=False),
        Heartbeat(sent_time=1.7e9, policy_version=12),
        Heartbeat(sent_time=0, policy_version=0),  # an int time is taken as a float
        WeightsRequest(have_version=-1),
        Weights(
            policy_version=9,
            tensors={
                "conv.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2),
                "conv.bias": np.ones(2, dtype=np.float16),
                "scale": np.array(0.5, dtype=np.float32),  # 0-d
                "empty": np.zeros((0, 4), dtype=np.float32),
            },
            model_spec={"arch": "impala_cnn"},
        ),
        Weights(policy_version=0, tensors={}, model_spec={}),
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


def rejects(frames, *fragments: str, limits: Limits = DEFAULT_LIMITS) -> str:
    with pytest.raises(ProtocolError) as info:
        decode(frames, limits)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


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
        for name in Chunk.ARRAYS:
            got, want = getattr(decoded, name), getattr(msg, name)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            assert not got.flags.writeable  # callers copy before mutating
        assert decoded.episodes == msg.episodes


def test_chunk_properties():
    chunk = make_chunk(2, T=8, K=4, H=3, W=4, A=12)
    assert (chunk.unroll_length, chunk.num_envs, chunk.num_actions) == (8, 4, 12)
    assert chunk.frame_shape == (3, 4)
    assert chunk.payload_bytes == sum(getattr(chunk, n).nbytes for n in Chunk.ARRAYS)


def test_frames_cross_zero_copy_both_ways():
    chunk = make_chunk(3, T=16, K=8, H=84, W=84)
    frames = encode(chunk)
    slot = array_slot(frames, "frames")
    assert np.shares_memory(np.frombuffer(frames[slot], np.uint8), chunk.frames)
    received = as_bytes(frames)  # what the socket hands over
    decoded = decode(received)
    assert np.shares_memory(decoded.frames, np.frombuffer(received[slot], np.uint8))


def test_non_contiguous_arrays_encode_correctly():
    chunk = make_chunk(4, T=4, K=3, H=5, W=5)
    transposed = np.ascontiguousarray(chunk.frames.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert not transposed.flags.c_contiguous
    view = dataclasses.replace(chunk, frames=transposed)
    np.testing.assert_array_equal(decode(encode(view)).frames, chunk.frames)


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


def test_nan_and_negative_scalars():
    frames = encode(Heartbeat(sent_time=1.0, policy_version=0))
    header = header_of(frames)
    header["f"]["sent_time"] = math.nan
    rejects(with_header(frames, header), "heartbeat.sent_time", "finite")
    header = header_of(encode(WeightsRequest(have_version=0)))
    header["f"]["have_version"] = -2
    rejects([msgpack.packb(header)], "weights_request.have_version", "out of range")


def test_register_specs_must_be_flat():
    frames = encode(sample_messages()[0])
    header = header_of(frames)
    header["f"]["env_spec"] = {"level": {"world": 1}}
    rejects(with_header(frames, header), "register.env_spec['level']", "dict")


def test_frame_count_and_frame_size():
    frames = as_bytes(encode(make_chunk()))
    rejects(frames[:-1], "expected 11 frames, got 10")
    rejects([*frames, b""], "expected 11 frames, got 12")
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
    weights = encode(sample_messages()[7])
    header = header_of(weights)
    header["a"][0][1] = "float64"
    rejects(with_header(weights, header), "weights.tensors['conv.weight'] dtype 'float64'")
    credit = encode(Credit(credits=1, policy_version=0))
    header = {**header_of(credit), "a": [["x", "uint8", [1]]]}
    rejects([msgpack.packb(header), b"\0"], "credit carries no arrays")


def test_shape_consistency_is_checked():
    chunk = make_chunk(5, T=4, K=3)
    frames = as_bytes(encode(chunk))
    header = header_of(frames)
    slot = array_slot(frames, "logits")
    header["a"][slot - 1][2] = [3, 4, 7]  # T and K swapped: same byte count
    rejects(with_header(frames, header), "chunk.logits has shape [3, 4, 7], expected [4, 3, ?]")


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


def test_bad_chunk_semantics():
    chunk = make_chunk(7, T=6, K=3)
    assert chunk.truncated.any() and not chunk.truncated.all()

    def bad(**changes):
        frames = as_bytes(encode(chunk))
        for name, array in changes.items():
            frames[array_slot(frames, name)] = array.tobytes()
        return frames

    t, k = np.argwhere(~chunk.truncated)[0]
    final_index = chunk.final_index.copy()
    final_index[0] = (t, k)
    rejects(bad(final_index=final_index), "chunk.final_index[0]", "not a truncated step")
    final_index[0] = (chunk.unroll_length, 0)
    rejects(bad(final_index=final_index), "chunk.final_index[0]", "outside")
    rewards = chunk.rewards.copy()
    rewards[1, 2] = np.nan
    rejects(bad(rewards=rewards), "chunk.rewards holds NaN or inf")
    logits = chunk.logits.copy()
    logits[0, 0, 0] = -np.inf
    rejects(bad(logits=logits), "chunk.logits holds NaN or inf")
    actions = chunk.actions.copy()
    actions[0, 0] = chunk.num_actions
    rejects(bad(actions=actions), "chunk.actions holds 7, not below num_actions=7")
    first = chunk.first.copy()
    first[5, 1] = ~first[5, 1]
    rejects(bad(first=first), "chunk.first[5, 1] must equal terminated[1, 1] | truncated[1, 1]")
    terminated = chunk.terminated | chunk.truncated  # same episode ends, some now both ways
    rejects(bad(terminated=terminated), "chunk.terminated and chunk.truncated are both set")
    last = chunk.last_actions.copy()
    last[0] = chunk.num_actions + 1
    rejects(bad(last_actions=last), "chunk.last_actions holds 8, above num_actions=7")
    starts, mid = np.flatnonzero(chunk.first[3]), np.flatnonzero(~chunk.first[3])
    assert len(starts) and len(mid)  # seed 7 has both kinds at step 0
    last = chunk.last_actions.copy()
    last[starts[0]] = 0
    rejects(bad(last_actions=last), f"chunk.last_actions[{starts[0]}] = 0, but step 0 starts")
    last = chunk.last_actions.copy()
    last[mid[0]] = chunk.num_actions  # none mid-episode is allowed (e.g. a fresh actor's carry)
    decode(bad(last_actions=last))
    twos = chunk.first.view(np.uint8).copy()
    twos[0, 0] = 2
    rejects(bad(first=twos), "chunk.first holds bytes other than 0 and 1")
    with pytest.raises(ProtocolError, match="chunk.final_frames has shape"):
        dataclasses.replace(chunk, final_frames=chunk.final_frames[:0])  # the sender fails too
    with pytest.raises(ProtocolError, match="chunk.actions must have dtype uint8, got int64"):
        dataclasses.replace(chunk, actions=chunk.actions.astype(np.int64))


def test_bad_episode_stats():
    chunk = make_chunk()
    frames = as_bytes(encode(chunk))
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


def test_not_msgpack_and_not_buffers():
    rejects([b"\xc1"], "not valid msgpack")
    rejects([b"\x93\x01\x02\x03"], "must be a msgpack map")
    rejects([msgpack.packb({"v": 1}) + b"\x00"], "not valid msgpack")  # trailing data
    rejects(["not bytes"], "header frame is not a bytes-like buffer")
    rejects(None, "non-empty sequence")
    strided = memoryview(bytes(64))[::2]
    rejects([strided], "not a contiguous buffer")


# ---------------------------------------------------------------------------------------------
# Fuzzing: anything goes in, only ProtocolError comes out
# ---------------------------------------------------------------------------------------------

# Each entry: (name, number of inputs). The sum is asserted to stay >= 10,000.
FUZZ_CASES = {
    "random_headers": 1500,
    "random_frame_lists": 1000,
    "truncated_frames": 1000,
    "mutated_headers": 4000,
    "mutated_arrays": 3000,
    "garbage_fields": 6000,
    "absurd_shapes": 1000,
    "wrong_dtypes": 1000,
    "frame_count": 500,
    "bad_semantics": 2000,
}

DTYPE_GARBAGE = [
    "float64",
    "object",
    "<U10",
    "O",
    "V8",
    "int64",
    "<f4",
    "|u1",
    "",
    "uint8 ",
    "x" * 300,
]


def garbage(rng: random.Random, depth: int = 0):
    """A random msgpack-packable value, biased towards the edges."""
    choice = rng.randrange(12 if depth < 3 else 9)
    if choice == 0:
        return rng.choice([0, -1, 1, 2, 255, 2**31, 2**63 - 1, 2**64 - 1, -(2**63), 2**24 + 1])
    if choice == 1:
        return rng.randint(-(2**63), 2**64 - 1)
    if choice == 2:
        return rng.choice([True, False, None])
    if choice == 3:
        return rng.choice([math.nan, math.inf, -math.inf, -0.0, 1e308, 0.5, -1.5, 1.7e9])
    if choice == 4:
        return rng.choice(["", "chunk", "1-1", "flag", "death", "x" * 5000, "é☃", "float32"])
    if choice == 5:
        return rng.randbytes(rng.randrange(8))
    if choice == 6:
        return rng.choice(DTYPE_GARBAGE)
    if choice == 7:
        return msgpack.ExtType(rng.randrange(128), rng.randbytes(rng.randrange(6)))
    if choice == 8:
        return rng.random() * 10 ** rng.randrange(-5, 20)
    if choice == 9:
        return [garbage(rng, depth + 1) for _ in range(rng.randrange(5))]
    if choice == 10:
        return {rng.choice(["a", "v", "f", "type", "level", ""]): garbage(rng, depth + 1)}
    return [rng.randrange(-3, 2**41) for _ in range(rng.randrange(6))]


def mutate_bytes(rng: random.Random, data: bytes, *, keep_length: bool = False) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(2 if keep_length else 5)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[pos % len(buf)] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[pos % len(buf)] = rng.randrange(256)
        elif op == 2:
            buf[pos:pos] = rng.randbytes(rng.randrange(1, 9))
        elif op == 3:
            del buf[pos : pos + rng.randrange(1, 9)]
        else:
            buf = buf[:pos]
    return bytes(buf)


def containers_in(value, depth: int = 0) -> list:
    """Every map and list inside a decoded header, the header itself first."""
    if depth > 6 or not isinstance(value, dict | list):
        return []
    children = value.values() if isinstance(value, dict) else value
    return [value] + [c for child in children for c in containers_in(child, depth + 1)]


def mutate_header_value(rng: random.Random, header: dict) -> dict:
    """Replace, delete or add one value somewhere in a (deep-copied) header."""
    header = msgpack.unpackb(msgpack.packb(header), raw=False)
    containers = containers_in(header)
    target = rng.choice(containers)
    action = rng.randrange(6)
    if isinstance(target, dict):
        if action == 0 and target:
            del target[rng.choice(list(target))]
        elif action == 1:
            target[rng.choice(["extra", "v", "a", "level", "k"])] = garbage(rng)
        elif target:
            target[rng.choice(list(target))] = garbage(rng)
    elif action == 0 and target:
        del target[rng.randrange(len(target))]
    elif action == 1:
        target.append(garbage(rng))
    elif target:
        target[rng.randrange(len(target))] = garbage(rng)
    return header


def decode_or_protocol_error(frames, outcomes: dict) -> None:
    """Anything but success or a ProtocolError from an actual check fails the test."""
    try:
        decode(frames)
    except ProtocolError as e:
        assert "internal error" not in str(e), str(e)
        outcomes["error"] += 1
    else:
        outcomes["ok"] += 1


def fuzz_inputs(case: str, rng: random.Random, bases: list[list[bytes]]):
    base = rng.choice(bases)
    chunk_frames = bases[-1]
    if case == "random_headers":
        return [rng.randbytes(rng.randrange(64))]
    if case == "random_frame_lists":
        return [rng.randbytes(rng.randrange(48)) for _ in range(rng.randrange(12))]
    if case == "truncated_frames":
        i = rng.randrange(len(base))
        return [*base[:i], base[i][: rng.randrange(max(1, len(base[i])))], *base[i + 1 :]]
    if case == "mutated_headers":
        return [mutate_bytes(rng, base[0]), *base[1:]]
    if case == "mutated_arrays":
        i = rng.randrange(1, len(chunk_frames))
        mutated = mutate_bytes(rng, chunk_frames[i], keep_length=rng.random() < 0.7)
        return [*chunk_frames[:i], mutated, *chunk_frames[i + 1 :]]
    if case == "garbage_fields":
        header = header_of(base)
        for _ in range(rng.randrange(1, 4)):
            header = mutate_header_value(rng, header)
        return with_header(base, header)
    header = header_of(chunk_frames)
    spec = rng.choice(header["a"])
    if case == "absurd_shapes":
        spec[2] = [
            rng.choice([2**40, 2**63, 2**64 - 1, -1, 0, 1, 2**24, 2**24 + 1, 7])
            for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 17, 40]))
        ]
        return with_header(chunk_frames, header)
    if case == "wrong_dtypes":
        spec[1] = rng.choice(
            [*DTYPE_GARBAGE, "bool", "uint8", "int32", "float16", "float32", 3, None, b"uint8"]
        )
        return with_header(chunk_frames, header)
    if case == "frame_count":
        frames = list(base)
        if rng.random() < 0.5 and len(frames) > 1:
            del frames[rng.randrange(1, len(frames))]
        else:
            frames.insert(rng.randrange(1, len(frames) + 1), rng.randbytes(rng.randrange(30)))
        return frames
    raise AssertionError(case)


def bad_semantics(rng: random.Random, chunk: Chunk) -> list[bytes]:
    """A chunk with exactly one broken invariant, written straight into its frames."""
    frames = as_bytes(encode(chunk))
    T, K, A = chunk.unroll_length, chunk.num_envs, chunk.num_actions
    t, k = rng.randrange(T), rng.randrange(K)
    kind = rng.randrange(7 if chunk.truncated.any() else 5)
    if kind == 0:
        name, array = "rewards", chunk.rewards.copy()
        array[t, k] = rng.choice([np.nan, np.inf, -np.inf])
    elif kind == 1:
        name, array = "logits", chunk.logits.copy()
        array[t, k, rng.randrange(A)] = rng.choice([np.nan, np.inf, -np.inf])
    elif kind == 2:
        name, array = "actions", chunk.actions.copy()
        array[t, k] = rng.randrange(A, 256)
    elif kind == 3:
        name, array = "first", chunk.first.copy()
        array[4 + t, k] = ~array[4 + t, k]
    elif kind == 4:
        name = rng.choice(["first", "terminated", "truncated"])
        array = getattr(chunk, name).view(np.uint8).copy()
        array.flat[rng.randrange(array.size)] = rng.randrange(2, 256)
    elif kind == 5:  # final_index points at a step that was not truncated (or out of range)
        name, array = "final_index", chunk.final_index.copy()
        untruncated = np.argwhere(~chunk.truncated)
        row = untruncated[rng.randrange(len(untruncated))] if len(untruncated) else (T, 0)
        array[rng.randrange(len(array))] = rng.choice([row, (T, 0), (0, K), (-1, 0)])
    else:
        name, array = "final_index", chunk.final_index.copy()
        if len(array) < 2:
            array[0] = (-1, 0)
        else:
            array[1] = array[0]  # duplicate row
    frames[array_slot(frames, name)] = array.tobytes()
    return frames


def test_fuzz_only_protocol_error():
    assert sum(FUZZ_CASES.values()) >= 10_000
    rng = random.Random(20240531)
    bases = [as_bytes(encode(m)) for m in sample_messages()]
    outcomes = {"ok": 0, "error": 0}
    for case, count in FUZZ_CASES.items():
        for i in range(count):
            try:
                if case == "bad_semantics":
                    T, K = rng.randrange(1, 6), rng.randrange(1, 4)
                    frames = bad_semantics(rng, make_chunk(rng.randrange(1000), T=T, K=K))
                    rejects(frames)  # every broken invariant is caught
                    outcomes["error"] += 1
                else:
                    decode_or_protocol_error(fuzz_inputs(case, rng, bases), outcomes)
            except Exception as e:
                pytest.fail(f"fuzz case {case} #{i}: {type(e).__name__}: {e}")
    assert outcomes["ok"] + outcomes["error"] == sum(FUZZ_CASES.values())
    assert outcomes["error"] > 0.8 * sum(FUZZ_CASES.values())
