"""How many chunks the next update trains on: what has arrived, between a floor and a ceiling.

A fixed batch size fits only one speed ratio. A learner slower than its actors (CPU beside its
actors) finds its queue full and should take a full batch, as many chunks as it can use; a fast
learner (a GPU beside CPU actors) would otherwise sit idle until the last chunk of a big batch
arrives, and one slow actor would hold up every update. So the train loop asks, as chunks arrive:

- at least `min_chunks` queued: take them all, up to `max_chunks`;
- fewer, but the loop has waited `wait_s` already: take what is there (at least one chunk), so
  a slow or vanished actor never stalls training;
- otherwise keep waiting.

Pure: the train loop feeds it the queue depth and how long it has waited.
"""

from __future__ import annotations

from typing import NamedTuple


class BatchSize(NamedTuple):
    min_chunks: int  # wait for this many before an update (--min-batch-chunks)
    max_chunks: int  # never take more (--max-batch-chunks; the ingest queue holds at least this)
    wait_s: float  # after this long, train on fewer than min_chunks (--batch-wait-s)


def chunks_to_take(queued: int, size: BatchSize, waited_s: float) -> int:
    """Chunks to take from the queue now; 0 means keep waiting.

    Args:
        queued: chunks in the ingest queue.
        size: the batch-size limits.
        waited_s: seconds the train loop has waited for this batch so far.
    """
    if queued >= size.min_chunks:
        return min(queued, size.max_chunks)
    if waited_s >= size.wait_s:
        return min(queued, size.max_chunks)  # 0 while nothing has arrived at all
    return 0
