"""The wire format shared by actors and the learner: message types, `encode`, `decode`.

A message is a list of frames: one small msgpack header, then one raw buffer per array.

    frame 0     msgpack map {"v": PROTOCOL_VERSION, "type": str, "f": {field: value, ...},
                             "a": [[name, dtype, shape], ...]}
    frame 1+i   the C-contiguous little-endian bytes of array a[i]: prod(shape) * itemsize bytes

Nothing is pickled: a corrupt or hostile peer can at worst make `decode` raise `ProtocolError`.
No sockets here; a chunk's arrays are declared in common/chunk.py (`LAYOUT`). Decoded arrays are
read-only zero-copy views of the frames (maybe unaligned), and messages check themselves.
"""

import dataclasses
from collections.abc import Buffer, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack
import numpy as np

from common import chunk
from common._wire_checks import (
    WIRE_DTYPE_NAMES,
    Limits,
    ProtocolError,
    byte_view,
    check_bool,
    check_float,
    check_int,
    check_spec,
    check_str,
    check_tensors,
    decode_arrays,
    exact_keys,
    values_equal,
)

# 2: chunks carry last_actions; 3: the Welcome the network and unroll length, chunks final_t; 4:
# weights the level schedule's weights; 5: chunks core_state; 6: chunks each step's level; 7: the
# Welcome the env spec, the registration none; 8: episodes their start_x (frontier starts); 9:
# weights the actors' level draw weights (level sampling), float32 only (float16, which nothing
# sent, refused) and the run's env frames; the Welcome the learner's heartbeat interval; 10:
# weights each level's share of frontier starts; 11: weights no level draw weights (removed with
# level sampling: the actors draw a set's levels uniformly); 12: the Welcome's network without a
# value-head count (per-level PopArt removed), weights no frontier shares (frontier starts by
# stall rate removed: every level starts the spec's share)
PROTOCOL_VERSION = 12

# An actor that hears nothing for this many of the Welcome's heartbeat intervals, on a connection
# that is up, starts a new session (actor/link.py)
SILENT_HEARTBEATS = 5

_OUTCOMES = frozenset({"flag", "death", "no_progress", "other"})

DEFAULT_LIMITS = Limits()


# --- messages ---


@dataclass(frozen=True, slots=True, kw_only=True)
class Register:
    """actor -> learner: an actor's first message; the learner answers Welcome or Refuse."""

    TYPE: ClassVar[str] = "register"
    run_id: str
    actor_id: int  # >= 0
    instance_id: str  # random per actor process start: tells a restarted actor apart
    num_envs: int  # K >= 1

    def __post_init__(self) -> None:
        check_str("register.run_id", self.run_id, nonempty=True)
        check_int("register.actor_id", self.actor_id)
        check_str("register.instance_id", self.instance_id, nonempty=True)
        check_int("register.num_envs", self.num_envs, lo=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Welcome:
    """learner -> actor: registration accepted; the first credits and what the actor builds."""

    TYPE: ClassVar[str] = "welcome"
    credits: int  # >= 0
    policy_version: int  # >= 0, the learner's current version
    unroll_length: int  # T >= 1, steps per chunk
    model_spec: dict[str, str | int | float | bool]  # flat: the network (common.model.ModelSpec)
    env_spec: dict[str, str | int | float | bool]  # flat: the envs (common.env_spec.EnvSpec)
    heartbeat_interval_s: float  # > 0: heartbeats both ways this often (SILENT_HEARTBEATS above)

    def __post_init__(self) -> None:
        check_int("welcome.credits", self.credits)
        check_int("welcome.policy_version", self.policy_version)
        check_int("welcome.unroll_length", self.unroll_length, lo=1)
        check_spec("welcome.model_spec", self.model_spec)
        check_spec("welcome.env_spec", self.env_spec)
        interval = check_float("welcome.heartbeat_interval_s", self.heartbeat_interval_s)
        if interval <= 0:
            raise ProtocolError(f"welcome.heartbeat_interval_s must be > 0, got {interval}")
        object.__setattr__(self, "heartbeat_interval_s", interval)


@dataclass(frozen=True, slots=True, kw_only=True)
class Credit:
    """learner -> actor: grants send credits; also acknowledges an accepted chunk."""

    TYPE: ClassVar[str] = "credit"
    credits: int  # >= 0
    policy_version: int  # >= 0, the learner's current version

    def __post_init__(self) -> None:
        check_int("credit.credits", self.credits)
        check_int("credit.policy_version", self.policy_version)


@dataclass(frozen=True, slots=True, kw_only=True)
class Refuse:
    """learner -> actor: a registration or chunk was refused."""

    TYPE: ClassVar[str] = "refuse"
    reason: str
    fatal: bool  # the actor must exit (e.g. spec mismatch); otherwise it may retry

    def __post_init__(self) -> None:
        check_str("refuse.reason", self.reason)
        check_bool("refuse.fatal", self.fatal)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """Both ways: I am alive, at this policy version."""

    TYPE: ClassVar[str] = "heartbeat"
    sent_time: float  # sender's time.time(), seconds
    policy_version: int  # >= 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sent_time", check_float("heartbeat.sent_time", self.sent_time))
        check_int("heartbeat.policy_version", self.policy_version)


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightsRequest:
    """actor -> learner: send me the current weights (PUB/SUB drops what came before joining)."""

    TYPE: ClassVar[str] = "weights_request"
    have_version: int  # -1 = none yet

    def __post_init__(self) -> None:
        check_int("weights_request.have_version", self.have_version, lo=-1)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Weights:
    """learner -> actor: the policy's tensors at one version, in the model's order."""

    TYPE: ClassVar[str] = "weights"
    policy_version: int  # >= 0
    env_frames: int  # >= 0, the run's env frames when the learner reached this version
    tensors: dict[str, np.ndarray] = field(repr=False)  # name -> float32, any shape
    model_spec: dict[str, str | int | float | bool]  # flat

    def __post_init__(self) -> None:
        check_int("weights.policy_version", self.policy_version)
        check_int("weights.env_frames", self.env_frames)
        check_tensors("weights.tensors", self.tensors)
        check_spec("weights.model_spec", self.model_spec)

    def __eq__(self, other: object) -> bool:
        return _messages_equal(self, other)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeStats:
    """One finished episode, reported in the chunk where it ended."""

    level: str
    episode_return: float
    length: int  # agent steps, >= 1
    max_x: int  # furthest x position reached, >= 0
    flag: bool  # reached the flag
    outcome: str  # "flag" | "death" | "no_progress" | "other"
    start_x: int = -1  # x of the frontier snapshot it started from; -1: the level's start

    def __post_init__(self) -> None:
        check_str("episode.level", self.level, nonempty=True)
        ret = check_float("episode.episode_return", self.episode_return)
        object.__setattr__(self, "episode_return", ret)
        check_int("episode.length", self.length, lo=1)
        check_int("episode.max_x", self.max_x)
        check_int("episode.start_x", self.start_x, lo=-1)
        check_bool("episode.flag", self.flag)
        if type(self.outcome) is not str or self.outcome not in _OUTCOMES:
            raise ProtocolError(
                f"episode.outcome must be one of {sorted(_OUTCOMES)}, got {self.outcome!r:.60}"
            )
        if self.flag != (self.outcome == "flag"):
            raise ProtocolError(
                f"episode.flag={self.flag} contradicts episode.outcome={self.outcome!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Chunk:
    """actor -> learner: T steps of K envs, its arrays as common/chunk.py lays them out."""

    TYPE: ClassVar[str] = "chunk"
    actor_id: int
    instance_id: str
    seq: int  # per-actor counter, >= 0
    level: str  # the level set its `level` indices index (the Welcome's env spec's)
    policy_version: int  # version of the behaviour policy
    send_time: float  # actor's time.time() at send, seconds
    episodes: tuple[EpisodeStats, ...]
    arrays: dict[str, np.ndarray] = field(repr=False)  # name -> array
    layout: chunk.Layout = field(default=chunk.LAYOUT, repr=False)  # what `arrays` holds; not sent

    def __post_init__(self) -> None:
        check_int("chunk.actor_id", self.actor_id)
        check_str("chunk.instance_id", self.instance_id, nonempty=True)
        check_int("chunk.seq", self.seq)
        check_str("chunk.level", self.level, nonempty=True)
        check_int("chunk.policy_version", self.policy_version)
        object.__setattr__(self, "send_time", check_float("chunk.send_time", self.send_time))
        if type(self.episodes) is not tuple or not all(
            type(e) is EpisodeStats for e in self.episodes
        ):
            raise ProtocolError("chunk.episodes must be a tuple of EpisodeStats")
        chunk.check(self.arrays, self.layout)

    def __eq__(self, other: object) -> bool:
        return _messages_equal(self, other)

    @property
    def unroll_length(self) -> int:
        return self.arrays["actions"].shape[0]

    @property
    def num_envs(self) -> int:
        return self.arrays["actions"].shape[1]

    @property
    def num_actions(self) -> int:
        return self.arrays["behaviour_logits"].shape[2]

    @property
    def state_size(self) -> int:
        """C, the width of the recurrent core's state (0 without a core)."""
        return self.arrays["core_state"].shape[1]

    @property
    def frame_shape(self) -> tuple[int, int]:
        return self.arrays["frames"].shape[2], self.arrays["frames"].shape[3]

    @property
    def payload_bytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


Message = Register | Welcome | Credit | Refuse | Heartbeat | WeightsRequest | Weights | Chunk

_CLASSES: dict[str, type] = {
    cls.TYPE: cls
    for cls in (Register, Welcome, Credit, Refuse, Heartbeat, WeightsRequest, Weights, Chunk)
}
# Fields that travel in the header's "f" map: everything but the arrays (and a chunk's layout).
_HEADER_FIELDS = {
    kind: frozenset(
        f.name for f in dataclasses.fields(cls) if f.name not in ("tensors", "arrays", "layout")
    )
    for kind, cls in _CLASSES.items()
}
_EPISODE_FIELDS = frozenset(f.name for f in dataclasses.fields(EpisodeStats))


def _messages_equal(a: Any, b: object) -> bool:
    if type(a) is not type(b):
        return NotImplemented
    return all(values_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))


# --- encode ---


def encode(msg: Message) -> list[bytes | memoryview]:
    """Header bytes, then one buffer per array; zero-copy for arrays already C-contiguous."""
    if type(msg) not in _CLASSES.values():
        raise TypeError(f"encode() takes a wire message, got {type(msg).__name__}")
    header_fields: dict[str, Any] = {}
    arrays: list[tuple[str, np.ndarray]] = []
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if f.name in ("tensors", "arrays"):
            arrays.extend(value.items())
        elif f.name == "layout":
            continue
        elif f.name == "episodes":
            header_fields[f.name] = [dataclasses.asdict(e) for e in value]
        else:
            header_fields[f.name] = value
    header = {
        "v": PROTOCOL_VERSION,
        "type": msg.TYPE,
        "f": header_fields,
        "a": [[name, WIRE_DTYPE_NAMES[a.dtype.str], list(a.shape)] for name, a in arrays],
    }
    frames: list[bytes | memoryview] = [msgpack.packb(header, use_bin_type=True)]
    for _, a in arrays:
        contiguous = a if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(a.shape)
        frames.append(contiguous.reshape(-1).view(np.uint8).data)
    return frames


def with_seq(frames: list[bytes | memoryview], seq: int) -> list[bytes | memoryview]:
    """An encoded Chunk's frames with another seq (the array buffers shared), for a benchmark
    that replays one chunk: the learner drops a seq it has seen as a duplicate."""
    header = msgpack.unpackb(frames[0], raw=False)
    if header.get("type") != Chunk.TYPE:
        raise ValueError(f"with_seq() takes an encoded chunk, got {header.get('type')!r}")
    header["f"]["seq"] = check_int("chunk.seq", seq)
    return [msgpack.packb(header, use_bin_type=True), *frames[1:]]


# --- decode ---

_INTERNAL_ERROR = "internal error while decoding"


def decode(
    frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS, layout: chunk.Layout = chunk.LAYOUT
) -> Message:
    """Validate and decode one message of any buffers (zmq frames too); raises ProtocolError, and
    only that, if it is malformed. Sizes are checked against `limits` before anything is built; a
    chunk must hold the arrays of `layout`."""
    try:
        return _decode(frames, limits, layout)
    except ProtocolError:
        raise
    except Exception as e:  # a hole in the checks below; a peer must still not crash us
        raise ProtocolError(f"{_INTERNAL_ERROR}: {type(e).__name__}: {e}") from e


def _decode(frames: Sequence[Buffer], limits: Limits, layout: chunk.Layout) -> Message:
    if not isinstance(frames, Sequence) or len(frames) == 0:
        raise ProtocolError("a message is a non-empty sequence of frames, header first")
    head = byte_view(frames[0], "header frame")
    if head.nbytes > limits.max_header_bytes:
        raise ProtocolError(
            f"header frame is {head.nbytes} bytes, over max_header_bytes={limits.max_header_bytes}"
        )
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True, use_list=True)
    except Exception as e:
        raise ProtocolError(f"header frame is not valid msgpack ({type(e).__name__}: {e})") from e
    if type(header) is not dict:
        raise ProtocolError(f"header must be a msgpack map, got {type(header).__name__}")
    version = header.get("v")
    if type(version) is not int:
        raise ProtocolError(f"header 'v' (protocol version) must be an int, got {version!r:.60}")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version mismatch: peer speaks v{version}, this side speaks "
            f"v{PROTOCOL_VERSION}; run the actor and the learner from the same release"
        )
    exact_keys("header", header, frozenset({"v", "type", "f", "a"}))
    kind = header["type"]
    if type(kind) is not str or kind not in _CLASSES:
        raise ProtocolError(f"unknown message type {kind!r:.60}; known: {sorted(_CLASSES)}")
    fields = header["f"]
    if type(fields) is not dict:
        raise ProtocolError(f"{kind} header 'f' must be a map, got {type(fields).__name__}")
    exact_keys(f"{kind} fields", fields, _HEADER_FIELDS[kind])
    cls = _CLASSES[kind]
    dtypes = {a.name: a.dtype for a in layout} if cls is Chunk else None
    arrays = decode_arrays(kind, header["a"], frames, limits, dtypes)
    if cls is Weights:
        return Weights(**fields, tensors=arrays)
    if cls is Chunk:
        episodes = _decode_episodes(fields.pop("episodes"), limits)
        return Chunk(**fields, episodes=episodes, arrays=arrays, layout=layout)
    return cls(**fields)


def _decode_episodes(raw: object, limits: Limits) -> tuple[EpisodeStats, ...]:
    if type(raw) is not list:
        raise ProtocolError(f"chunk.episodes must be a list, got {type(raw).__name__}")
    if len(raw) > limits.max_episodes_per_chunk:
        raise ProtocolError(
            f"chunk.episodes has {len(raw)} entries, over "
            f"max_episodes_per_chunk={limits.max_episodes_per_chunk}"
        )
    episodes = []
    for i, entry in enumerate(raw):
        if type(entry) is not dict:
            raise ProtocolError(f"chunk.episodes[{i}] must be a map, got {type(entry).__name__}")
        exact_keys(f"chunk.episodes[{i}]", entry, _EPISODE_FIELDS)
        try:
            episodes.append(EpisodeStats(**entry))
        except ProtocolError as e:
            raise ProtocolError(f"chunk.episodes[{i}]: {e}") from None
    return tuple(episodes)
