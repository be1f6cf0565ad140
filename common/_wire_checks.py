"""Validation for `common.wire`: every check raises ProtocolError naming the offending field.

Kept apart so that wire.py reads as the format itself; import from common.wire, not from here.
It imports neither common.wire nor common.chunk: both build on it.
"""

import math
from collections.abc import Buffer, Sequence
from dataclasses import dataclass

import numpy as np

MAX_STR_CHARS = 4096
MAX_NAME_CHARS = 200
MAX_SPEC_KEYS = 256
# Wire dtype names; the bytes are always little-endian.
WIRE_DTYPES = {
    "bool": np.dtype("?"),
    "uint8": np.dtype("u1"),
    "int32": np.dtype("<i4"),
    "float32": np.dtype("<f4"),
}
WIRE_DTYPE_NAMES = {dt.str: name for name, dt in WIRE_DTYPES.items()}
MAX_NDIM = 16
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


class ProtocolError(ValueError):
    """A message is malformed, speaks another protocol version or breaks a size limit."""

    __module__ = "common.wire"  # its public home


@dataclass(frozen=True, slots=True)
class Limits:
    """Size limits `decode` enforces before it builds anything from a frame."""

    max_header_bytes: int = 64 * 1024  # msgpack header frame
    max_array_bytes: int = 256 * 1024 * 1024  # any single array frame
    max_total_bytes: int = 512 * 1024 * 1024  # all array frames of one message
    max_arrays: int = 64  # array frames in one message (weights: tensors in the model)
    max_dim: int = 1 << 24  # any single dimension of an array
    max_episodes_per_chunk: int = 4096  # EpisodeStats in one chunk header


def check_int(where: str, value: object, *, lo: int = 0, hi: int = _INT64_MAX) -> int:
    # type() rather than isinstance(): bool is an int subclass and must not pass as one.
    if type(value) is not int:
        raise ProtocolError(f"{where} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ProtocolError(f"{where}={value} is out of range [{lo}, {hi}]")
    return value


def check_float(where: str, value: object) -> float:
    """A finite float; ints are accepted and converted (msgpack keeps 0 and 0.0 apart)."""
    if type(value) not in (int, float):
        raise ProtocolError(f"{where} must be a float, got {type(value).__name__}")
    if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX:
        raise ProtocolError(f"{where}={value} is out of range")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise ProtocolError(f"{where} must be finite, got {number}")
    return number


def check_str(
    where: str, value: object, *, max_len: int = MAX_STR_CHARS, nonempty: bool = False
) -> str:
    if type(value) is not str:
        raise ProtocolError(f"{where} must be a str, got {type(value).__name__}")
    if len(value) > max_len:
        raise ProtocolError(f"{where} is {len(value)} chars, over the limit of {max_len}")
    if nonempty and not value:
        raise ProtocolError(f"{where} must not be empty")
    return value


def check_bool(where: str, value: object) -> bool:
    if type(value) is not bool:
        raise ProtocolError(f"{where} must be a bool, got {type(value).__name__}")
    return value


def check_spec(where: str, value: object) -> None:
    """A flat map of str keys to str, int, float (finite) or bool values."""
    if type(value) is not dict:
        raise ProtocolError(f"{where} must be a flat map, got {type(value).__name__}")
    if len(value) > MAX_SPEC_KEYS:
        raise ProtocolError(f"{where} has {len(value)} keys, over the limit of {MAX_SPEC_KEYS}")
    for key, item in value.items():
        check_str(f"{where} key", key, max_len=MAX_NAME_CHARS, nonempty=True)
        item_where = f"{where}[{key!r}]"
        if type(item) is str:
            check_str(item_where, item)
        elif type(item) is int:
            check_int(item_where, item, lo=_INT64_MIN, hi=_UINT64_MAX)
        elif type(item) is float:
            check_float(item_where, item)
        elif type(item) is not bool:
            raise ProtocolError(
                f"{item_where} must be a str, int, float or bool, got {type(item).__name__}"
            )


def exact_keys(where: str, mapping: dict, expected: frozenset[str]) -> None:
    missing = sorted(expected - mapping.keys())
    extra = sorted(repr(k)[:60] for k in mapping.keys() - expected)
    if missing or extra:
        raise ProtocolError(f"{where}: missing {missing}, unexpected [{', '.join(extra)}]")


def check_tensors(where: str, tensors: object) -> None:
    """Weights: name -> float32 array (the only dtype weights travel in)."""
    if type(tensors) is not dict:
        raise ProtocolError(f"{where} must be a dict of name -> array")
    for name, tensor in tensors.items():
        check_str(f"{where} name", name, max_len=MAX_NAME_CHARS, nonempty=True)
        if not isinstance(tensor, np.ndarray) or tensor.dtype != WIRE_DTYPES["float32"]:
            got = tensor.dtype if isinstance(tensor, np.ndarray) else type(tensor).__name__
            raise ProtocolError(f"{where}[{name!r}] must be a float32 array, got {got}")


def values_equal(x: object, y: object) -> bool:
    """Equality that compares arrays by dtype, shape and contents (and dicts in order)."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return (
            isinstance(x, np.ndarray)
            and isinstance(y, np.ndarray)
            and x.dtype == y.dtype
            and x.shape == y.shape
            and bool(np.array_equal(x, y))
        )
    if isinstance(x, dict) and isinstance(y, dict):
        return list(x) == list(y) and all(values_equal(x[k], y[k]) for k in x)
    return x == y


def check_array(where: str, a: object, dtype_name: str) -> np.ndarray:
    """A numpy array of wire dtype `dtype_name`; a bool array holds only bytes 0 and 1."""
    if not isinstance(a, np.ndarray):
        raise ProtocolError(f"{where} must be a numpy array, got {type(a).__name__}")
    if a.dtype != WIRE_DTYPES[dtype_name]:
        raise ProtocolError(f"{where} must have dtype {dtype_name}, got {a.dtype}")
    if a.dtype == bool and a.size and a.view(np.uint8).max() > 1:
        raise ProtocolError(f"{where} holds bytes other than 0 and 1")
    return a


# --- array frames ---


def decode_arrays(
    kind: str, specs: object, frames: Sequence[Buffer], limits: Limits, fixed: dict[str, str] | None
) -> dict[str, np.ndarray]:
    """Array frames as read-only views; `fixed` maps each required name to its dtype (None: any
    names, each float32, as weights travel)."""
    if type(specs) is not list:
        raise ProtocolError(f"{kind} header 'a' must be a list, got {type(specs).__name__}")
    if kind not in ("chunk", "weights") and specs:
        raise ProtocolError(f"{kind} carries no arrays, but the header declares {len(specs)}")
    if len(specs) > limits.max_arrays:
        raise ProtocolError(
            f"{kind} declares {len(specs)} arrays, over max_arrays={limits.max_arrays}"
        )
    if len(frames) != 1 + len(specs):
        raise ProtocolError(
            f"{kind} header declares {len(specs)} arrays, so expected {1 + len(specs)} frames, "
            f"got {len(frames)}"
        )
    arrays: dict[str, np.ndarray] = {}
    total_bytes = 0
    for i, spec in enumerate(specs):
        if type(spec) is not list or len(spec) != 3:
            raise ProtocolError(f"{kind} array #{i} must be [name, dtype, shape], got {spec!r:.80}")
        name, dtype_name, shape = spec
        check_str(f"{kind} array #{i} name", name, max_len=MAX_NAME_CHARS, nonempty=True)
        where = f"{kind}.{name}" if fixed is not None else f"{kind}.tensors[{name!r}]"
        if name in arrays:
            raise ProtocolError(f"{where} appears twice")
        if fixed is not None and name not in fixed:
            raise ProtocolError(f"{where} is not a {kind} array; expected {sorted(fixed)}")
        allowed = (fixed[name],) if fixed is not None else ("float32",)
        if type(dtype_name) is not str or dtype_name not in allowed:
            raise ProtocolError(f"{where} dtype {dtype_name!r:.40} not allowed; expected {allowed}")
        dims = check_shape(where, shape, limits)
        dtype = WIRE_DTYPES[dtype_name]
        size_bytes = math.prod(dims) * dtype.itemsize
        if size_bytes > limits.max_array_bytes:
            raise ProtocolError(
                f"{where} shape {list(dims)} is {size_bytes} bytes, "
                f"over max_array_bytes={limits.max_array_bytes}"
            )
        total_bytes += size_bytes
        if total_bytes > limits.max_total_bytes:
            raise ProtocolError(
                f"{kind} arrays total over max_total_bytes={limits.max_total_bytes} at {where}"
            )
        buf = byte_view(frames[1 + i], f"{where} frame")
        if buf.nbytes != size_bytes:
            raise ProtocolError(
                f"{where} frame is {buf.nbytes} bytes, but shape {list(dims)} of {dtype_name} "
                f"needs {size_bytes}"
            )
        array = np.frombuffer(buf, dtype=dtype).reshape(dims)
        array.flags.writeable = False
        arrays[name] = array
    if fixed is not None and len(arrays) != len(fixed):
        raise ProtocolError(f"{kind} is missing arrays {sorted(set(fixed) - set(arrays))}")
    return arrays


def check_shape(where: str, shape: object, limits: Limits) -> tuple[int, ...]:
    if type(shape) is not list or len(shape) > MAX_NDIM:
        raise ProtocolError(f"{where} shape must be a list of at most {MAX_NDIM} ints")
    for d in shape:
        if type(d) is not int or not 0 <= d <= limits.max_dim:
            raise ProtocolError(
                f"{where} shape {shape!r:.80} has dimension {d!r:.40}; "
                f"each must be an int in [0, max_dim={limits.max_dim}]"
            )
    return tuple(shape)


def byte_view(frame: object, what: str) -> memoryview:
    """A flat unsigned-byte view of any C-contiguous buffer, without copying."""
    try:
        view = memoryview(frame)  # type: ignore[arg-type]
        if not view.c_contiguous:
            raise ProtocolError(f"{what} is not a contiguous buffer")
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
    except (TypeError, ValueError) as e:
        if isinstance(e, ProtocolError):
            raise
        raise ProtocolError(f"{what} is not a bytes-like buffer ({type(frame).__name__})") from e
    return view
