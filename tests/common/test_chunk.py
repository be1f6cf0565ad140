"""common.chunk: the one layout of a chunk's arrays, and the rules a chunk obeys, each broken rule
a ProtocolError naming its array (on decode, and already when the sender builds the message)."""

import dataclasses

import numpy as np
import pytest

from common import chunk
from common.wire import ProtocolError, decode, encode
from tests.common.frames import rejects, with_array
from tests.fakes import make_chunk


def test_new_arrays_follow_the_layout():
    sizes = {"T": 5, "K": 3, "H": 6, "W": 4, "A": 7, "C": 0}
    arrays = chunk.new_arrays(sizes)
    assert list(arrays) == [a.name for a in chunk.LAYOUT]
    assert arrays["frames"].shape == (9, 3, 6, 4) and arrays["frames"].dtype == np.uint8
    assert arrays["behaviour_logits"].shape == (5, 3, 7)
    assert arrays["final_frames"].shape == (3, 6, 4)
    assert (arrays["final_t"] == -1).all() and arrays["final_t"].dtype == np.int32
    for array in chunk.LAYOUT:  # every array has an env axis
        assert arrays[array.name].shape[chunk.env_axis(array)] == 3


def test_shapes_must_agree_on_every_size():
    msg = make_chunk(5, T=4, K=3)

    def rebuilt(name: str, array: np.ndarray):
        return dataclasses.replace(msg, arrays={**msg.arrays, name: array})

    with pytest.raises(ProtocolError, match=r"chunk.final_frames has shape \[2, 6, 5\], expected"):
        rebuilt("final_frames", msg.arrays["final_frames"][:2])  # K = 3
    with pytest.raises(ProtocolError, match=r"chunk.frames has shape \[4, 3, 6, 5\]"):
        rebuilt("frames", msg.arrays["frames"][:4])  # T + 4 = 4: no step
    with pytest.raises(ProtocolError, match="chunk.actions must have dtype uint8, got int64"):
        rebuilt("actions", msg.arrays["actions"].astype(np.int64))
    with pytest.raises(ProtocolError, match=r"chunk.arrays: missing \['last_actions'\]"):
        dataclasses.replace(
            msg, arrays={k: v for k, v in msg.arrays.items() if k != "last_actions"}
        )


def test_bad_chunk_semantics():
    msg = make_chunk(7, T=6, K=3)
    a = msg.arrays
    assert a["truncated"].any() and not a["truncated"].any(axis=0).all()
    frames = encode(msg)

    def bad(name: str, index, value) -> list[bytes]:
        array = a[name].copy()
        array[index] = value
        return with_array(frames, name, array)

    cut = int(np.flatnonzero(a["truncated"].any(axis=0))[0])  # an env truncated in the chunk
    uncut = int(np.flatnonzero(~a["truncated"].any(axis=0))[0])  # an env never truncated
    steps = np.flatnonzero(a["truncated"][:, cut]).tolist()
    not_cut = next(t for t in range(6) if t not in steps)
    rule = f"it must be one of the steps env {cut} was truncated at, {steps}"
    rejects(bad("final_t", cut, not_cut), f"chunk.final_t[{cut}] = {not_cut}: {rule}")
    rejects(bad("final_t", cut, -1), f"chunk.final_t[{cut}] = -1: {rule}")
    rejects(bad("final_t", cut, 6), f"chunk.final_t[{cut}] = 6: {rule}")
    rejects(bad("final_t", uncut, 0), f"chunk.final_t[{uncut}] = 0: it must be -1 (none)")
    rejects(bad("rewards", (1, 2), np.nan), "chunk.rewards holds NaN or inf")
    rejects(bad("behaviour_logits", (0, 0, 0), -np.inf), "chunk.behaviour_logits holds NaN")
    rejects(bad("actions", (0, 0), 7), "chunk.actions holds 7, not below num_actions=7")
    rejects(
        bad("first", (5, 1), not a["first"][5, 1]),
        "chunk.first[5, 1] must equal terminated[1, 1] | truncated[1, 1]",
    )
    both = with_array(frames, "terminated", a["terminated"] | a["truncated"])  # same ends
    rejects(both, "chunk.terminated and chunk.truncated are both set")
    rejects(bad("last_actions", 0, 8), "chunk.last_actions holds 8, above num_actions=7")
    starts, mid = np.flatnonzero(a["first"][3]), np.flatnonzero(~a["first"][3])
    assert len(starts) and len(mid)  # seed 7 has both kinds at step 0
    rejects(
        bad("last_actions", starts[0], 0), f"chunk.last_actions[{starts[0]}] = 0, but step 0 starts"
    )
    decode(bad("last_actions", mid[0], 7))  # none mid-episode is fine (a fresh actor's carry)
    twos = a["first"].view(np.uint8).copy()
    twos[0, 0] = 2
    rejects(with_array(frames, "first", twos), "chunk.first holds bytes other than 0 and 1")
