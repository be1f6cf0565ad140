"""How many chunks the next update trains on: what has arrived, between a floor and a ceiling.

A fixed batch size fits only one speed ratio: a learner slower than its actors finds its queue
full and should take as many chunks as it can use; a fast one (a GPU beside CPU actors) would sit
idle until the last chunk of a big batch arrives. So the train loop asks, as chunks arrive: at
least `min_chunks` queued: take them all, up to `max_chunks`; fewer, but the loop has waited
`wait_s` already: take what is there (at least one), so a slow or vanished actor never stalls
training; otherwise keep waiting. Pure: fed the queue depth and how long the loop has waited.
"""

from __future__ import annotations

from typing import NamedTuple


class BatchSize(NamedTuple):
    min_chunks: int  # wait for this many before an update (--min-batch-chunks)
    max_chunks: int  # never take more (--max-batch-chunks; the ingest queue holds at least this)
    wait_s: float  # after this long, train on fewer than min_chunks (--batch-wait-s)


def chunks_to_take(queued: int, size: BatchSize, waited_s: float) -> int:
    """Chunks to take from the queue now (`queued` in it, `waited_s` seconds waited for this
    batch so far); 0 means keep waiting."""
    if queued >= size.min_chunks:
        return min(queued, size.max_chunks)
    if waited_s >= size.wait_s:
        return min(queued, size.max_chunks)  # 0 while nothing has arrived at all
    return 0
