"""common.wire under a seeded fuzzer: over 10,000 malformed inputs, and decode raises
ProtocolError, and only that, from an actual check (never its "internal error" net)."""

import math
import random

import msgpack
import numpy as np
import pytest

from common.wire import Chunk, ProtocolError, decode, encode
from tests.common.frames import (
    array_slot,
    as_bytes,
    header_of,
    sample_messages,
    with_header,
)
from tests.fakes import make_chunk

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
    a = chunk.arrays
    T, K, A = chunk.unroll_length, chunk.num_envs, chunk.num_actions
    t, k = rng.randrange(T), rng.randrange(K)
    kind = rng.randrange(6)
    if kind == 0:
        name, array = "rewards", a["rewards"].copy()
        array[t, k] = rng.choice([np.nan, np.inf, -np.inf])
    elif kind == 1:
        name, array = "behaviour_logits", a["behaviour_logits"].copy()
        array[t, k, rng.randrange(A)] = rng.choice([np.nan, np.inf, -np.inf])
    elif kind == 2:
        name, array = "actions", a["actions"].copy()
        array[t, k] = rng.randrange(A, 256)
    elif kind == 3:
        name, array = "first", a["first"].copy()
        array[4 + t, k] = ~array[4 + t, k]
    elif kind == 4:
        name = rng.choice(["first", "terminated", "truncated"])
        array = a[name].view(np.uint8).copy()
        array.flat[rng.randrange(array.size)] = rng.randrange(2, 256)
    else:  # final_t names a step at which env k was not truncated (or none when it was)
        name, array = "final_t", a["final_t"].copy()
        steps = set(np.flatnonzero(a["truncated"][:, k]).tolist())
        array[k] = rng.choice([s for s in range(-2, T + 2) if s not in steps and s != array[k]])
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
                    with pytest.raises(ProtocolError):  # every broken invariant is caught
                        decode(frames)
                    outcomes["error"] += 1
                else:
                    decode_or_protocol_error(fuzz_inputs(case, rng, bases), outcomes)
            except Exception as e:
                pytest.fail(f"fuzz case {case} #{i}: {type(e).__name__}: {e}")
    assert outcomes["ok"] + outcomes["error"] == sum(FUZZ_CASES.values())
    assert outcomes["error"] > 0.8 * sum(FUZZ_CASES.values())
