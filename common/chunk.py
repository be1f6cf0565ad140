"""A chunk's arrays, declared once: T steps of K envs, time-major.

    frames[0:3]         the 3 frames before step 0, history for the frame stack   # [T+4, K, H, W]
    step t:             frames[3+t] seen -> actions[t] taken -> rewards[t],
                        terminated[t] | truncated[t] -> frames[3+t+1] next observation
    frames[3+T]         never acted on: it only bootstraps the value at the chunk boundary
    last_actions[k]     the action env k took before step 0, the policy's previous-action input
                        at step 0; A (= num_actions) when step 0 starts an episode. Later steps'
                        previous actions are actions[t-1], or A where first[3+t]
    first[i]            frames[i] starts an episode, so a stack never mixes two episodes;
                        first[3+t+1] == terminated[t] | truncated[t] for every step t
    final_t[k]          the step at which env k was truncated, -1 if none; final_frames[k] is
                        the real observation after it: frames[3+t+1, k] is already the next
                        episode's reset frame
    core_state[k]       the recurrent core's state [C] that env k's step 0 started from (zeros
                        when step 0 starts an episode); C = 0 for a network without a core
    level[t]            the level that step t played: its index in the run's level set
                        (common.levels.parse_levels order; 0 in a set of one). The policy never
                        sees it; the learner groups the update's statistics by it

Truncation (no-progress cutoff) is not termination: only `terminated` zeroes the discount. An
actor cuts at most one truncation per env and chunk (the learner refuses a no_progress_steps
below its unroll length), so the truncation finals are dense, one per env.

`LAYOUT` is the one declaration the actor's buffers, the wire's encoding and checks, and the
learner's copies, batches and replay storage are built from; its env axis K becomes the learner's
sequence axis N. `check` holds the rules the learner relies on, each failure a ProtocolError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from common._wire_checks import ProtocolError, check_array, exact_keys


class ChunkArray(NamedTuple):
    name: str
    dtype: str  # on the wire and in the actor's buffer: bool, uint8, int32 or float32
    dims: tuple[str, ...]  # sizes: T (steps), T+4, K (envs), H, W (frame), A (actions)
    device_dtype: str = ""  # the learner's dtype on its device, where it differs
    fill: int = 0  # a new actor buffer's value


Layout = tuple[ChunkArray, ...]

LAYOUT: Layout = (
    ChunkArray("frames", "uint8", ("T+4", "K", "H", "W")),
    ChunkArray("first", "bool", ("T+4", "K")),
    ChunkArray("actions", "uint8", ("T", "K"), device_dtype="int64"),
    ChunkArray("rewards", "float32", ("T", "K")),  # as the env gave them
    ChunkArray("terminated", "bool", ("T", "K")),  # the discount is zero after step t
    ChunkArray("truncated", "bool", ("T", "K")),  # cut by the no-progress cutoff: bootstrapped
    ChunkArray("behaviour_logits", "float32", ("T", "K", "A")),
    ChunkArray("final_frames", "uint8", ("K", "H", "W")),  # the real frame after step final_t
    ChunkArray("final_t", "int32", ("K",), device_dtype="int64", fill=-1),
    ChunkArray("last_actions", "uint8", ("K",), device_dtype="int64"),
    ChunkArray("core_state", "float32", ("K", "C")),  # the core's state before step 0
    ChunkArray("level", "uint8", ("T", "K"), device_dtype="int64"),  # index in the level set
)

# Sizes that may be 0 (a network without a recurrent core has no state); every other size >= 1.
MAY_BE_EMPTY = frozenset({"C"})


def _parse(dim: str) -> tuple[str, int]:
    """ "T+4" -> ("T", 4); "K" -> ("K", 0)."""
    base, _, offset = dim.partition("+")
    return base, int(offset or 0)


def shape(array: ChunkArray, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The array's shape for these sizes ({"T": 32, "K": 4, "C": 0, ...})."""
    return tuple(sizes[base] + offset for base, offset in map(_parse, array.dims))


def env_axis(array: ChunkArray) -> int:
    return array.dims.index("K")


def new_arrays(sizes: Mapping[str, int], layout: Layout = LAYOUT) -> dict[str, np.ndarray]:
    """A chunk's buffers, each filled with its initial value."""
    return {a.name: np.full(shape(a, sizes), a.fill, a.dtype) for a in layout}


# --- checks: the layout's dtypes and shapes, then the invariants the learner relies on ---


def check(arrays: dict[str, np.ndarray], layout: Layout = LAYOUT) -> None:
    """Raise ProtocolError, naming the array, unless `arrays` is a consistent chunk."""
    if type(arrays) is not dict:
        raise ProtocolError(f"chunk.arrays must be a dict, got {type(arrays).__name__}")
    exact_keys("chunk.arrays", arrays, frozenset(a.name for a in layout))
    sizes: dict[str, int] = {}  # T, K, H, W, A as the arrays so far agree on them
    for array in layout:
        a = check_array(f"chunk.{array.name}", arrays[array.name], array.dtype)
        dims = [_parse(d) for d in array.dims]
        want = [sizes[base] + offset if base in sizes else None for base, offset in dims]
        if a.ndim != len(dims) or any(
            size < offset + (base not in MAY_BE_EMPTY) or (w is not None and size != w)
            for size, (base, offset), w in zip(a.shape, dims, want, strict=True)
        ):
            known = ", ".join("?" if w is None else str(w) for w in want)
            raise ProtocolError(
                f"chunk.{array.name} has shape {list(a.shape)}, expected "
                f"[{', '.join(array.dims)}] = [{known}] with T, K, H, W, A >= 1, C >= 0"
            )
        for (base, offset), size in zip(dims, a.shape, strict=True):
            sizes[base] = size - offset
    _check_episode_ends(arrays)
    _check_values(arrays, sizes["A"])


def _check_episode_ends(arrays: Mapping[str, np.ndarray]) -> None:
    first, terminated, truncated = arrays["first"], arrays["terminated"], arrays["truncated"]
    both = terminated & truncated
    if both.any():
        step, env = np.argwhere(both)[0]
        raise ProtocolError(
            f"chunk.terminated and chunk.truncated are both set at (t={step}, k={env})"
        )
    # frames[3+t+1] starts an episode exactly when step t ended one.
    mismatch = first[4:] != (terminated | truncated)
    if mismatch.any():
        step, env = np.argwhere(mismatch)[0]
        raise ProtocolError(
            f"chunk.first[{4 + step}, {env}] must equal terminated[{step}, {env}] | "
            f"truncated[{step}, {env}]: the frame after a step starts an episode iff the step "
            "ended one"
        )
    T, K = truncated.shape
    final_t = arrays["final_t"].astype(np.int64)  # [K]
    cut = truncated.any(axis=0)  # [K]
    at = truncated[final_t.clip(0, T - 1), np.arange(K)]  # [K] final_t points at a cut
    valid = np.where(cut, (final_t >= 0) & (final_t < T) & at, final_t == -1)
    if not valid.all():
        k = int(np.argmin(valid))
        steps = np.flatnonzero(truncated[:, k]).tolist()
        rule = f"one of the steps env {k} was truncated at, {steps}" if steps else "-1 (none)"
        raise ProtocolError(f"chunk.final_t[{k}] = {final_t[k]}: it must be {rule}")


def _check_values(arrays: Mapping[str, np.ndarray], num_actions: int) -> None:
    for name in ("rewards", "behaviour_logits", "core_state"):
        if not np.isfinite(arrays[name]).all():
            raise ProtocolError(f"chunk.{name} holds NaN or inf")
    actions, last_actions = arrays["actions"], arrays["last_actions"]
    if actions.max() >= num_actions:
        raise ProtocolError(
            f"chunk.actions holds {actions.max()}, not below num_actions={num_actions}"
        )
    if last_actions.max() > num_actions:
        raise ProtocolError(
            f"chunk.last_actions holds {last_actions.max()}, above num_actions={num_actions} "
            "(which stands for none)"
        )
    starts = arrays["first"][3] & (last_actions != num_actions)
    if starts.any():
        env = int(np.argmax(starts))
        raise ProtocolError(
            f"chunk.last_actions[{env}] = {last_actions[env]}, but step 0 starts an episode "
            f"there (first[3, {env}]): it must be num_actions={num_actions} (none)"
        )
