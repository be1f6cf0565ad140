"""A rogue peer for the soak: mutated copies of real actor traffic, sent to the learner's ROUTER.

The copies are real: a Register, a Chunk played on a real Mario env by the actor's own rollout
code, a Heartbeat and a WeightsRequest, each encoded by `common.wire`. The rogue registers under a
run id no learner runs, so the learner must reject every message it sends, each exactly once:
a copy that still decodes is from an unknown actor (or a Register with the wrong run id), one
that does not is malformed. `mutate` is pure (frames and a seeded generator in, frames out);
`RoguePeer` does the IO.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import torch
import zmq

from actor.config import ActorConfig
from actor.main import to_wire_chunk
from actor.rollout import infer_and_act, split_lanes
from common import wire
from common.env import build_envs
from common.model import ActorCritic
from learner.config import LearnerConfig

Frames = list[bytes]
Mutation = Callable[[Frames, random.Random], Frames]

# Values a hostile header field may take: wrong types, out of range, oversized.
HOSTILE_VALUES: tuple[Any, ...] = (
    None, -1, 2**63, -(2**63), 1e308, float("nan"), float("inf"), "",
    "x" * 70_000,  # past max_header_bytes once encoded
    [], {}, [1, 2, 3], {"a": 1}, b"\x00\xff", True,
)  # fmt: skip
# ... and of the message header's own keys: other message types, the previous protocol version
HOSTILE_META = (*HOSTILE_VALUES, "credit", "weights", "chunk", wire.PROTOCOL_VERSION - 1)


def real_traffic(level: str = "1-1", seed: int = 0) -> dict[str, Frames]:
    """One encoded copy of each message an actor sends, played on a real env by the actor's code
    (an untrained network; a run id no learner runs)."""
    cfg = ActorConfig(num_envs=1, run_id="rogue", actor_id=1_000_000)
    learner = LearnerConfig(level=level)  # what its Welcome names
    env = build_envs(learner.env_spec(), 1)[0]
    try:
        torch.manual_seed(seed)
        model = ActorCritic(learner.model_spec()).eval()
        lane = split_lanes([env], 1, learner.unroll_length, env.num_actions, model.spec.state_size)[
            0
        ]
        rng = np.random.default_rng(seed)
        finished: list = []
        while not finished:
            infer_and_act(model, lane, rng, 0)
            lane.step()
            finished = lane.take_finished()
        chunk = to_wire_chunk(cfg, "rogue", 0, finished[0], level=level)
    finally:
        env.close()
    messages: dict[str, wire.Message] = {
        "register": wire.Register(
            run_id=cfg.run_id, actor_id=cfg.actor_id, instance_id="rogue", num_envs=1
        ),
        "chunk": chunk,
        "heartbeat": wire.Heartbeat(sent_time=1.0, policy_version=0),
        "weights_request": wire.WeightsRequest(have_version=-1),
    }
    return {name: [bytes(f) for f in wire.encode(m)] for name, m in messages.items()}


def _flip_bits(data: bytes, rng: random.Random, max_bits: int = 8) -> bytes:
    out = bytearray(data)
    if not out:  # a feed-forward actor's core_state: no bits to flip
        return data
    for _ in range(rng.randint(1, max_bits)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _in_header(change: Callable[[dict, random.Random], None]) -> Mutation:
    """A mutation of the message's decoded header (frame 0), encoded again."""

    def mutation(frames: Frames, rng: random.Random) -> Frames:
        header = msgpack.unpackb(frames[0], raw=False)
        change(header, rng)
        return [msgpack.packb(header, use_bin_type=True), *frames[1:]]

    return mutation


@_in_header
def _field(header: dict, rng: random.Random) -> None:
    header["f"][rng.choice(sorted(header["f"]))] = rng.choice(HOSTILE_VALUES)


@_in_header
def _array_spec(header: dict, rng: random.Random) -> None:
    if not header["a"]:
        header["a"] = [["frames", "uint8", [4, 1, 84, 84]]]  # an array the frames do not carry
        return
    entry = rng.choice(header["a"])
    which = rng.randrange(3)
    if which == 0:
        entry[1] = rng.choice(["float64", "object", "<U8", "", "int64"])  # dtype
    elif which == 1 and entry[2]:
        i = rng.randrange(len(entry[2]))
        entry[2][i] = rng.choice([0, -1, 1 << 30, entry[2][i] + 1])  # a dimension
    else:
        entry[0] = rng.choice(["", "frames", "__class__", "x" * 200])  # the name


@_in_header
def _meta(header: dict, rng: random.Random) -> None:
    header[rng.choice(["v", "type", "f", "a"])] = rng.choice(HOSTILE_META)


def _truncate(frames: Frames, rng: random.Random) -> Frames:
    """One non-empty frame cut shorter (an empty one, a feed-forward core_state, cannot be)."""
    i = rng.choice([j for j, f in enumerate(frames) if f])
    out = list(frames)
    out[i] = out[i][: rng.randrange(len(out[i]))]
    return out


def _drop_frame(frames: Frames, rng: random.Random) -> Frames:
    if len(frames) == 1:
        return [b""]
    out = list(frames)
    del out[rng.randrange(len(out))]
    return out


def _extra_frame(frames: Frames, rng: random.Random) -> Frames:
    out = list(frames)
    out.insert(rng.randrange(len(out) + 1), rng.randbytes(rng.randint(0, 64)))
    return out


def _swap_frames(frames: Frames, rng: random.Random) -> Frames:
    if len(frames) < 2:
        return [frames[0], frames[0]]
    out = list(frames)
    i, j = rng.sample(range(len(out)), 2)
    out[i], out[j] = out[j], out[i]
    return out


def _garbage(frames: Frames, rng: random.Random) -> Frames:
    return [rng.randbytes(rng.randint(0, 256)) for _ in range(rng.randint(1, 3))]


MUTATIONS: dict[str, Mutation] = {
    "copy": lambda frames, rng: list(frames),  # a faithful replay from an unknown peer
    "bitflip_header": lambda frames, rng: [_flip_bits(frames[0], rng), *frames[1:]],
    "bitflip_arrays": lambda frames, rng: [
        frames[0],
        *(_flip_bits(f, rng) if rng.random() < 0.5 else f for f in frames[1:]),
    ],
    "field": _field,
    "array_spec": _array_spec,
    "meta": _meta,
    "truncate": _truncate,
    "drop_frame": _drop_frame,
    "extra_frame": _extra_frame,
    "swap_frames": _swap_frames,
    "garbage": _garbage,
}


def mutate(traffic: dict[str, Frames], rng: random.Random) -> tuple[str, Frames]:
    """One mutated copy: ("<message>/<mutation>", frames)."""
    message = rng.choice(sorted(traffic))
    mutation = rng.choice(sorted(MUTATIONS))
    return f"{message}/{mutation}", MUTATIONS[mutation](traffic[message], rng)


class RoguePeer:
    """A DEALER to the learner's ROUTER (`address` host:port) that sends mutated copies and
    discards every answer."""

    def __init__(self, address: str, traffic: dict[str, Frames], seed: int):
        self.traffic = traffic
        self.rng = random.Random(seed)
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.SNDHWM, 16)
        self.sock.connect(f"tcp://{address}")
        self.sent: Counter[str] = Counter()  # by "<message>/<mutation>"

    def send(self) -> str:
        """Send one mutated copy; returns its name."""
        name, frames = mutate(self.traffic, self.rng)
        self.sock.send_multipart(frames)
        self.sent[name] += 1
        self.drain()
        return name

    def drain(self) -> None:
        """Discard the learner's answers (refusals)."""
        while self.sock.poll(0):
            self.sock.recv_multipart()

    def close(self) -> None:
        self.sock.close(linger=0)
