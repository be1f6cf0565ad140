"""How many passes the learner makes over each batch: more while it would otherwise wait.

A learner faster than its actors (a GPU beside CPU actors) waits for data; it can spend that time
on more passes over each batch (sample reuse, kept safe by the clipped surrogate). Once it is the
slower side, every queued chunk is older policy data, so extra passes cost policy lag.
`next_epochs` moves the pass count by one after every update: up when the learner waited more
than `wait_share_up` of the last cycle, down when a full batch is already waiting, within
`min_epochs` (--epochs) and `max_epochs` and its replay's sample:insert limit; only on a GPU (a
CPU learner's wait is its actors' CPU time), from the queue depth and the cycle's wait and work.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class ReuseLimits(NamedTuple):
    min_epochs: int  # the configured --epochs
    max_epochs: int  # the configured --max-epochs
    max_sample_insert_ratio: float | None  # sequences trained on per fresh one (None: no replay)
    sequences_per_fresh: float  # sequences in a batch per fresh one (1 + replayed share)
    wait_share_up: float = 0.2  # add a pass when the loop waited more than this share


def epoch_cap(limits: ReuseLimits) -> int:
    """The most passes the limits allow: max_epochs, and with replay passes x sequences_per_fresh
    within its sample:insert ratio (never below min_epochs)."""
    cap = limits.max_epochs
    if limits.max_sample_insert_ratio is not None:
        by_ratio = math.floor(limits.max_sample_insert_ratio / limits.sequences_per_fresh + 1e-9)
        cap = min(cap, by_ratio)
    return max(limits.min_epochs, cap)


def next_epochs(
    current: int,
    limits: ReuseLimits,
    *,
    queued_chunks: int,
    batch_chunks: int,
    wait_s: float,
    compute_s: float,
) -> int:
    """The pass count for the next update, after one of `current` passes that ended with
    `queued_chunks` waiting, `batch_chunks` the most one update takes (--batch-chunks N, or
    MIN-MAX's MAX), and `wait_s`, `compute_s` the loop's time waiting for its data and computing
    it."""
    cap, floor = epoch_cap(limits), limits.min_epochs
    if queued_chunks >= batch_chunks:
        return max(floor, min(cap, current - 1))
    cycle = wait_s + compute_s
    if cycle > 0 and wait_s / cycle > limits.wait_share_up:
        return min(cap, current + 1)
    return max(floor, min(cap, current))
