"""Host chunks -> one time-major device batch (see learner/update.py for the layout)."""

from __future__ import annotations

import torch

from learner.ingest import HostChunk
from learner.update import Batch


def collate(chunks: list[HostChunk], device: torch.device) -> Batch:
    """Concatenate chunks along the sequence axis on `device`; copies are non-blocking.

    Each chunk's sparse truncation finals become one per sequence (final_frames [N, H, W],
    final_t [N]); actors cut at most one truncation per env and chunk (no_progress_steps >= T).
    """

    def cat(name: str, dim: int = 1) -> torch.Tensor:
        parts = [getattr(c, name).to(device, non_blocking=True) for c in chunks]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)

    frames = cat("frames")  # [T+4, N, H, W]
    n = frames.shape[1]
    final_frames = torch.zeros(
        (n, *frames.shape[2:]), dtype=torch.uint8, device=device
    )  # [N, H, W]
    final_t = torch.full((n,), -1, dtype=torch.int64, device=device)  # [N]
    offset = 0
    for c in chunks:
        if c.final_index.shape[0]:
            idx = c.final_index.to(device, non_blocking=True).long()  # [n_c, 2] = (t, k)
            seq = idx[:, 1] + offset
            final_t[seq] = idx[:, 0]
            final_frames[seq] = c.final_frames.to(device, non_blocking=True)
        offset += c.frames.shape[1]
    return Batch(
        frames=frames,
        first=cat("first"),
        actions=cat("actions").long(),
        rewards=cat("rewards"),
        terminated=cat("terminated"),
        truncated=cat("truncated"),
        behaviour_logits=cat("logits"),
        final_frames=final_frames,
        final_t=final_t,
        last_actions=cat("last_actions", dim=0).long(),
        weights=torch.ones(n, device=device),
    )
