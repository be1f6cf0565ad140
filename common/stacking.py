"""Frame stacking that never mixes two episodes: one function for actor and learner alike.

The actor stacks its frame ring for inference; the learner rebuilds the same stacks on its device
from the frames a chunk carries once. Both call `stack_frames`, so what the learner trains on is
exactly what the behaviour policy saw (tests/common/test_stacking.py holds the reference).

Layout: `frames[i]` is the i-th frame of a sequence and `first[i]` says it starts an episode. The
stack for step t holds frames t .. t+S-1 (oldest first, the newest last); a frame that belongs to
an earlier episode than the newest one is zeroed, as at an episode's start.
"""

from __future__ import annotations

import numpy as np
import torch

STACK = 4


def stack_frames(frames: torch.Tensor, first: torch.Tensor, stack: int = STACK) -> torch.Tensor:
    """Stacks of `stack` consecutive frames, earlier episodes masked out: frames [N+stack-1, B, H,
    W] any dtype (uint8 on the wire), first [N+stack-1, B] bool (True where a frame starts an
    episode) -> [N, B, stack, H, W], of the dtype and device of `frames`."""
    if frames.dim() != 4 or first.shape != frames.shape[:2]:
        raise ValueError(
            f"frames must be [N+{stack - 1}, B, H, W] and first [N+{stack - 1}, B]; "
            f"got {tuple(frames.shape)} and {tuple(first.shape)}"
        )
    n = frames.shape[0] - (stack - 1)
    if n < 1:
        raise ValueError(f"need at least {stack} frames to stack, got {frames.shape[0]}")
    # starts[i] = episode starts among frames[0..i]; frame t+j is in the same episode as the
    # newest frame t+stack-1 iff no episode starts in (t+j, t+stack-1].
    starts = torch.cumsum(first.to(torch.int32), dim=0)  # [N+S-1, B]
    newest = starts[stack - 1 : stack - 1 + n]  # [N, B]
    planes = []
    for j in range(stack):
        keep = starts[j : j + n] == newest  # [N, B]
        planes.append(frames[j : j + n] * keep[:, :, None, None].to(frames.dtype))
    return torch.stack(planes, dim=2)  # [N, B, S, H, W]


def stack_newest(
    frames: np.ndarray, first: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """The one newest stack per env, in numpy, as `stack_frames` gives it for N = 1: frames
    [S, B, H, W] uint8 (each env's last S, oldest first), first [S, B], out an optional buffer ->
    [B, S, H, W]. The actor's per-step path: a handful of numpy calls instead of a dozen torch
    ops, on caches that env stepping just evicted (docs/PERFORMANCE.md)."""
    stack, batch = first.shape
    if out is None:
        out = np.empty((batch, stack, *frames.shape[2:]), frames.dtype)
    np.copyto(out, frames.swapaxes(0, 1))
    # frame j is masked iff an episode starts at some i in (j, S-1]
    for b in np.flatnonzero(first[1:].any(axis=0)):
        newest_start = stack - 1 - int(np.argmax(first[:0:-1, b]))  # last i >= 1 with first
        out[b, :newest_start] = 0
    return out
