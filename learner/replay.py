"""Device-resident prioritized replay of whole rollout sequences.

The unit of storage and of priority is the *sequence*: one actor rollout of T steps, kept whole
and time-ordered, so V-trace (Espeholt et al. 2018) still runs over ``[T, B, ...]`` data after
replay. A stored field is ``[capacity, *per_sequence_shape]``; a sampled batch is sequence-major
``[n, *per_sequence_shape]`` (the learner transposes it to time-major). Sampling is proportional
prioritisation (Schaul et al. 2016, "Prioritized Experience Replay", Eq. 1 and Sec. 3.4):
P(i) = p_i^α / Σ_k p_k^α, importance weights w_i = (N·P(i))^−β over the largest sampled weight.
Raw priorities p (clamped to ≥ eps) are stored as float32 ``[capacity]``, α applied at sample
time (an O(size) pass, like ``torch.multinomial``'s own cumulative sum). New sequences get the
running maximum of every priority assigned, from 1.0 (Schaul et al.; OpenAI baselines), a 0-dim
device tensor that never falls. ``add``, ``sample`` and ``update_priorities`` never synchronise
with the device. Not thread-safe: one thread (the learner's) owns a buffer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

MAX_CAPACITY = 2**24  # torch.multinomial and torch.quantile refuse more entries
HEADROOM_FRACTION = 0.10  # of free memory, which check_fits leaves unused


class ReplayCapacityError(ValueError):
    """The requested buffer would not fit in the device's free memory."""

    def __init__(
        self, message: str, needed_bytes: int, free_bytes: int, suggested_capacity: int | None
    ):
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        self.suggested_capacity = suggested_capacity


class ReplaySample(NamedTuple):
    indices: Tensor  # [n] int64 slots, pass back to update_priorities
    weights: Tensor  # [n] float32 importance weights, max 1
    batch: dict[str, Tensor]  # field -> [n, *per_sequence_shape], fresh copies


class PrioritizedReplay:
    """A ring buffer of `capacity` whole sequences (the oldest overwritten first) with
    proportional prioritised sampling: α ≥ 0 the priority exponent (0 = uniform), β in [0, 1] the
    importance-sampling exponent (settable: the learner anneals it to 1), eps the priority floor
    that keeps every sequence sampleable."""

    def __init__(
        self,
        capacity: int,
        alpha: float,
        beta: float,
        device: torch.device | str,
        eps: float = 1e-6,
    ):
        if not isinstance(capacity, int) or not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(
                f"capacity={capacity}: set it between 1 and {MAX_CAPACITY} sequences "
                "(torch.multinomial samples from at most 2^24 categories)"
            )
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha={alpha}: set a finite priority exponent ≥ 0 (0 = uniform)")
        if not eps > 0:
            raise ValueError(f"eps={eps}: set a priority floor > 0")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self._capacity = capacity
        self.alpha = float(alpha)
        self.beta = beta  # validated by the setter
        self.eps = float(eps)
        self._device = device
        self._storage: dict[str, Tensor] | None = None  # allocated from the first batch
        self._priorities = torch.zeros(capacity, dtype=torch.float32, device=device)
        self._max_priority = torch.ones((), dtype=torch.float32, device=device)
        self._cursor = 0  # next slot to write
        self._size = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        if not 0 <= value <= 1:
            raise ValueError(f"beta={value}: set the importance-sampling exponent within [0, 1]")
        self._beta = float(value)

    def add(self, batch: Mapping[str, Tensor], priorities: Tensor | None = None) -> Tensor:
        """Store N sequences (field -> ``[N, *per_sequence_shape]``; the first call fixes the
        fields, shapes and dtypes) with ``[N]`` priorities, or None for the running maximum;
        return their slots, ``[min(N, capacity)]`` int64. If N > capacity only the last
        ``capacity`` are kept, as if added one at a time. Host tensors are copied non-blocking:
        do not overwrite pinned ones until the device has consumed the copy."""
        n = self._check_batch(batch)
        if priorities is not None and tuple(priorities.shape) != (n,):
            raise ValueError(
                f"priorities has shape {tuple(priorities.shape)}: pass one priority per "
                f"sequence, shape ({n},)"
            )
        if self._storage is None:
            self._allocate(batch)
        assert self._storage is not None
        if n > self._capacity:  # the first n - capacity would be overwritten by the rest
            batch = {key: value[n - self._capacity :] for key, value in batch.items()}
            if priorities is not None:
                priorities = priorities[n - self._capacity :]
            n = self._capacity
        start = self._cursor
        slots = torch.arange(start, start + n, device=self._device) % self._capacity  # [n]
        for key, value in batch.items():
            # detach: a source that requires grad would otherwise graft the buffer onto its graph
            self._storage[key].index_copy_(0, slots, self._to_device(value.detach()))
        if priorities is None:
            new_priorities = self._max_priority.expand(n)
        else:
            new_priorities = self._clean_priorities(priorities)
            self._raise_max(new_priorities)
        self._priorities.index_copy_(0, slots, new_priorities)
        self._cursor = (start + n) % self._capacity
        self._size = min(self._size + n, self._capacity)
        return slots

    def sample(self, n: int) -> ReplaySample:
        """Draw n sequences with replacement, P(i) ∝ p_i^α. Importance weights (Schaul et al.
        2016 Sec. 3.4) w_i = (N·P(i))^−β / max_j (N·P(j))^−β over the n sampled, so the largest
        is 1; with q = p^α that is (min_j q_j / q_i)^β, computed so: no N, no Σq, no overflow."""
        if self._size == 0:
            raise ValueError("sample() on an empty replay buffer: add() sequences first")
        if n < 1:
            raise ValueError(f"n={n}: sample at least one sequence")
        assert self._storage is not None
        q = self._priorities[: self._size].pow(self.alpha)  # [size]
        indices = torch.multinomial(q, n, replacement=True)  # [n]
        q_sampled = q.index_select(0, indices)  # [n]
        weights = (q_sampled.min() / q_sampled).pow(self._beta)  # [n]
        batch = {key: stored.index_select(0, indices) for key, stored in self._storage.items()}
        return ReplaySample(indices=indices, weights=weights, batch=batch)

    def update_priorities(self, indices: Tensor, priorities: Tensor) -> None:
        """Set p for the given slots (typically |TD error| per sampled sequence), clamped to ≥ eps,
        NaN to eps. Neither NaN nor the indices' range is checked (a host sync): pass slots from
        ``sample`` or ``add``. Of a repeated slot's values, which is kept is unspecified."""
        if indices.dim() != 1 or tuple(priorities.shape) != tuple(indices.shape):
            raise ValueError(
                f"indices {tuple(indices.shape)} and priorities {tuple(priorities.shape)}: "
                "pass two 1-D tensors of the same length"
            )
        if indices.numel() == 0:
            return
        new_priorities = self._clean_priorities(priorities)
        slots = self._to_device(indices).long()
        self._priorities.index_copy_(0, slots, new_priorities)
        self._raise_max(new_priorities)

    def priority_quantiles(self, qs: Sequence[float]) -> Tensor:
        """Quantiles of the stored priorities p, ``[len(qs)]`` on the device (NaN when empty); it
        allocates: for metrics, off the hot path."""
        if any(not 0 <= q <= 1 for q in qs):
            raise ValueError(f"qs={list(qs)}: every quantile must lie in [0, 1]")
        levels = torch.tensor(list(qs), dtype=torch.float32, device=self._device)
        if self._size == 0:
            return torch.full_like(levels, math.nan)
        return torch.quantile(self._priorities[: self._size], levels)

    def _check_batch(self, batch: Mapping[str, Tensor]) -> int:
        """Validate field names, shapes and dtypes; return N."""
        if not batch:
            raise ValueError("add() got an empty batch: pass at least one field")
        if self._storage is not None and set(batch) != set(self._storage):
            raise ValueError(
                f"batch fields {sorted(batch)} differ from the stored fields "
                f"{sorted(self._storage)}: every add() must carry the same fields"
            )
        n: int | None = None
        first_key = ""
        for key, value in batch.items():
            if not isinstance(value, Tensor) or value.dim() < 1:
                raise ValueError(f"field {key!r}: pass a tensor [N, ...] with a sequence dim")
            if n is None:
                n, first_key = value.shape[0], key
            elif value.shape[0] != n:
                raise ValueError(
                    f"field {key!r} has {value.shape[0]} sequences but field {first_key!r} "
                    f"has {n}: every field must share the first dim N"
                )
            if self._storage is not None:
                stored = self._storage[key]
                if value.shape[1:] != stored.shape[1:] or value.dtype != stored.dtype:
                    raise ValueError(
                        f"field {key!r} is {value.dtype} [N, {_dims(value.shape[1:])}] but the "
                        f"buffer stores {stored.dtype} [N, {_dims(stored.shape[1:])}]: "
                        "reshape or cast it to match the first batch"
                    )
        assert n is not None
        return n

    def _allocate(self, batch: Mapping[str, Tensor]) -> None:
        self._storage = {
            key: torch.empty(
                (self._capacity, *value.shape[1:]), dtype=value.dtype, device=self._device
            )
            for key, value in batch.items()
        }

    def _to_device(self, value: Tensor) -> Tensor:
        # non_blocking only host -> device: the CPU could read a device -> host copy too early
        from_host = value.device.type == "cpu" and self._device.type != "cpu"
        return value.to(self._device, non_blocking=from_host)

    def _clean_priorities(self, priorities: Tensor) -> Tensor:
        p = self._to_device(priorities.detach()).to(torch.float32)
        return p.nan_to_num(nan=self.eps).clamp_min(self.eps)

    def _raise_max(self, priorities: Tensor) -> None:
        if priorities.numel() > 0:
            self._max_priority = torch.maximum(self._max_priority, priorities.max())


def _dims(shape: torch.Size) -> str:
    return ", ".join(str(d) for d in shape) or "-"


def estimate_bytes(example: Mapping[str, Tensor], capacity: int) -> int:
    """Bytes a buffer of ``capacity`` sequences needs, priorities included; ``example`` maps each
    field to ONE sequence (no N dim): ``{k: v[0] for k, v in batch.items()}``, meta tensors too."""
    per_sequence = sum(value.numel() * value.element_size() for value in example.values())
    priority_bytes = torch.finfo(torch.float32).bits // 8
    return capacity * (per_sequence + priority_bytes)


def check_fits(
    bytes_needed: int, device: torch.device | str, *, capacity: int | None = None
) -> None:
    """Raise ReplayCapacityError unless ``bytes_needed`` fits in 90% of the free memory (CUDA's
    ``mem_get_info``, else /proc/meminfo's MemAvailable; skipped where neither is there). With
    ``capacity`` the error suggests one that fits."""
    device = torch.device(device)
    if device.type == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info(device)
    elif device.type == "cpu":
        free_bytes = _mem_available_bytes()
        if free_bytes is None:
            return
    else:
        return
    usable = int(free_bytes * (1 - HEADROOM_FRACTION))
    if bytes_needed <= usable:
        return
    suggested = None
    advice = "reduce the replay capacity or the per-sequence payload"
    if capacity:
        suggested = max(0, usable * capacity // bytes_needed)
        advice = f"set the replay capacity to at most {suggested} sequences (was {capacity})"
    raise ReplayCapacityError(
        f"replay needs {bytes_needed} bytes ({bytes_needed / 2**30:.2f} GiB) on {device} but "
        f"only {free_bytes} bytes ({free_bytes / 2**30:.2f} GiB) are free, "
        f"{usable} usable after {HEADROOM_FRACTION:.0%} headroom: {advice}",
        needed_bytes=bytes_needed, free_bytes=free_bytes, suggested_capacity=suggested,
    )  # fmt: skip


def _mem_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        return None
    return None
