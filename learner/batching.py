"""Chunks on the learner: wire chunk -> host tensors -> one time-major device batch, and the
batch's sequences selected, joined and stored for replay.

Every step is built from common/chunk.py's layout. Every array there has an env axis K, which
becomes the batch's sequence axis N, so collating is concatenating each array along it and
selecting sequences is indexing it, for every array alike.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from common import chunk

if TYPE_CHECKING:  # the update batches chunks without loading the wire's msgpack
    from common import wire


class HostChunk(NamedTuple):
    """A validated chunk copied out of the socket buffers into (pinned, on GPU hosts) tensors."""

    arrays: dict[str, torch.Tensor]  # the layout's arrays, wire dtypes
    policy_version: int
    send_time: float
    env_frames: int  # T x K agent steps x frame_skip
    payload_bytes: int


def to_host(c: wire.Chunk, frame_skip: int, pin: bool) -> HostChunk:
    """The chunk's arrays as (pinned) host tensors."""
    arrays = {}
    for name, a in c.arrays.items():
        t = torch.from_numpy(np.array(a))  # copy: decoded arrays are read-only views of zmq frames
        arrays[name] = t.pin_memory() if pin else t
    env_frames = c.unroll_length * c.num_envs * frame_skip
    return HostChunk(arrays, c.policy_version, c.send_time, env_frames, c.payload_bytes)


class Batch(SimpleNamespace):
    """N sequences on one device, time-major: each layout array by its name, in its device dtype
    (batch.frames [T+4, N, H, W] uint8, batch.actions [T, N] int64, ...; common/chunk.py), and
    batch.weights [N], the replay importance weights (1 for fresh data)."""

    @property
    def unroll_length(self) -> int:
        return self.actions.shape[0]

    @property
    def num_sequences(self) -> int:
        return self.weights.shape[0]


def sequence_axes(layout: chunk.Layout = chunk.LAYOUT) -> dict[str, int]:
    """The axis of N in each of a batch's tensors."""
    return {a.name: chunk.env_axis(a) for a in layout} | {"weights": 0}


def _device_dtype(array: chunk.ChunkArray) -> torch.dtype:
    return getattr(torch, array.device_dtype or array.dtype)


def collate(
    chunks: list[HostChunk], device: torch.device, layout: chunk.Layout = chunk.LAYOUT
) -> Batch:
    """Concatenate the chunks' envs into sequences on `device` (non-blocking copies), each
    array converted to its device dtype there."""
    tensors = {}
    for array in layout:
        parts = [c.arrays[array.name].to(device, non_blocking=True) for c in chunks]
        joined = torch.cat(parts, dim=chunk.env_axis(array)) if len(parts) > 1 else parts[0]
        tensors[array.name] = joined.to(_device_dtype(array))
    n = tensors["actions"].shape[1]  # [T, N]
    return Batch(**tensors, weights=torch.ones(n, device=device))


def select(batch: Batch, index: torch.Tensor, layout: chunk.Layout = chunk.LAYOUT) -> Batch:
    """The sequences `index` [n] of a batch, whole."""
    axes = sequence_axes(layout)
    return Batch(**{k: t.index_select(axes[k], index) for k, t in vars(batch).items()})


def concat(a: Batch, b: Batch, layout: chunk.Layout = chunk.LAYOUT) -> Batch:
    axes = sequence_axes(layout)
    return Batch(**{k: torch.cat([t, getattr(b, k)], dim=axes[k]) for k, t in vars(a).items()})


def to_sequences(batch: Batch, layout: chunk.Layout = chunk.LAYOUT) -> dict[str, torch.Tensor]:
    """The layout's arrays sequence-major, [N, ...], as replay stores them (weights are not)."""
    return {a.name: getattr(batch, a.name).movedim(chunk.env_axis(a), 0) for a in layout}


def from_sequences(
    arrays: dict[str, torch.Tensor], weights: torch.Tensor, layout: chunk.Layout = chunk.LAYOUT
) -> Batch:
    """`to_sequences` undone: n sequences [n, ...] and their weights [n] as a batch."""
    tensors = {a.name: arrays[a.name].movedim(0, chunk.env_axis(a)) for a in layout}
    return Batch(**tensors, weights=weights)


def sequence_example(
    sizes: dict[str, int], layout: chunk.Layout = chunk.LAYOUT
) -> dict[str, torch.Tensor]:
    """One stored sequence as meta tensors, for sizing replay before any data exists."""
    out = {}
    for array in layout:
        shape = list(chunk.shape(array, {**sizes, "K": 1}))
        del shape[chunk.env_axis(array)]
        out[array.name] = torch.empty(shape, dtype=_device_dtype(array), device="meta")
    return out
