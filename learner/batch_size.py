"""How many chunks the next update trains on, set by one flag, `--batch-chunks`:

- `MIN-MAX` (the default, 4-8): self-sized, what has arrived between a floor and a ceiling. A fixed
  batch size fits only one speed ratio: a learner slower than its actors finds its queue full and
  should take as many chunks as it can use; a fast one (a GPU beside CPU actors) would sit idle
  until the last chunk of a big batch arrives. So the train loop asks, as chunks arrive: at least
  MIN queued: take them all, up to MAX; fewer, but the loop has waited `--batch-wait-s` already:
  take what is there (at least one), so a slow or vanished actor never stalls training; otherwise
  keep waiting. MIN-MAX with MIN = MAX is a fixed size that still gives up waiting.
- `N`: pinned, every update exactly N chunks, waiting as long as that takes (what a study that
  compares runs by their updates wants); `--batch-wait-s` has nothing to do there and is refused.

`chunks_to_take` is pure: fed the queue depth and how long the loop has waited.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

DEFAULT_WAIT_S = 2.0  # a self-sized batch's --batch-wait-s when none is given
_SPELLING = re.compile(r"(\d+)(?:-(\d+))?")


class BatchSize(NamedTuple):
    min_chunks: int  # wait for this many before an update
    max_chunks: int  # never take more (the ingest queue holds at least this)
    wait_s: float  # after this long, train on fewer than min_chunks; inf: pinned, never

    @property
    def pinned(self) -> bool:
        return math.isinf(self.wait_s)


def parse(batch_chunks: str, wait_s: float | None) -> BatchSize:
    """`--batch-chunks` (N or MIN-MAX) and `--batch-wait-s` (None: DEFAULT_WAIT_S for MIN-MAX)
    as limits; ValueError saying what to change."""
    flag = f"--batch-chunks {batch_chunks}"
    m = _SPELLING.fullmatch(batch_chunks.strip())
    if m is None:
        raise ValueError(
            f"--batch-chunks must be N (every update N chunks) or MIN-MAX (what is queued, at "
            f"least MIN, at most MAX), e.g. 4 or 4-8, got {batch_chunks!r}"
        )
    lo = int(m[1])
    hi = lo if m[2] is None else int(m[2])
    if lo < 1:
        raise ValueError(f"{flag}: an update takes at least 1 chunk; give 1 or more")
    if hi < lo:
        raise ValueError(f"{flag}: MAX ({hi}) must be >= MIN ({lo}); give --batch-chunks {hi}-{lo}")
    if m[2] is None:  # pinned
        if wait_s is not None:
            raise ValueError(
                f"--batch-wait-s {wait_s:g} does nothing with a pinned {flag} (every update waits "
                f"for its {lo} chunks, however long that takes): drop --batch-wait-s, or give "
                f"--batch-chunks {lo}-{lo} to train on fewer after {wait_s:g} s"
            )
        return BatchSize(lo, lo, math.inf)
    return BatchSize(lo, hi, DEFAULT_WAIT_S if wait_s is None else wait_s)


def chunks_to_take(queued: int, size: BatchSize, waited_s: float) -> int:
    """Chunks to take from the queue now (`queued` in it, `waited_s` seconds waited for this
    batch so far); 0 means keep waiting."""
    if queued >= size.min_chunks:
        return min(queued, size.max_chunks)
    if waited_s >= size.wait_s:
        return min(queued, size.max_chunks)  # 0 while nothing has arrived at all
    return 0
