"""Frontier starts: one env's archive of its own snapshots from just before where its episodes
from the level's start died or stalled. Such an episode leaves a trail of its last TRAIL_LEN
snapshots (one every TRAIL_EVERY agent steps or more, Mario standing); if it fails, one of them,
drawn uniformly, joins its level's CELLS_PER_LEVEL latest failures, and a frontier start loads one
of those, drawn uniformly (docs/howto/many-levels.md; why: docs/lab/2026-12-frontier-starts-1-1.md).
A snapshot loaded into any emulator but the live one that dumped it crashes the process.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

TRAIL_EVERY = 8  # agent steps at least between two snapshots of a trail
TRAIL_LEN = 6  # a trail spans the last ~48 agent steps with Mario standing
CELLS_PER_LEVEL = 16  # failures kept per level; ~255 KiB a snapshot (nes-py's holds the screen)


class Cell(NamedTuple):
    x: int  # Mario's x where the snapshot was taken
    snapshot: object  # nes-py's dump_state() of the env's own emulator


class Archive:
    """level -> its `cells_per_level` most recent failures; the running episode's trail."""

    def __init__(self, cells_per_level: int = CELLS_PER_LEVEL, trail_len: int = TRAIL_LEN):
        self.cells_per_level = cells_per_level
        self.levels: dict[str, deque[Cell]] = {}
        self.trail: deque[Cell] = deque(maxlen=trail_len)
        self._trail_step = 0  # the agent step of the trail's newest snapshot

    def __len__(self) -> int:
        return sum(len(cells) for cells in self.levels.values()) + len(self.trail)

    def walk(self, step: int, x: int, dump: Callable[[], object]) -> None:
        """Mario stands at x, `step` agent steps in: `dump()` joins the trail if TRAIL_EVERY on."""
        if not self.trail or step - self._trail_step >= TRAIL_EVERY:
            self.trail.append(Cell(x, dump()))
            self._trail_step = step

    def end(self, level: str, failed: bool, rng: np.random.Generator) -> Cell | None:
        """The episode ended: if it failed, a snapshot of its trail is kept (returned); no trail."""
        kept = self.trail[int(rng.integers(len(self.trail)))] if failed and self.trail else None
        if kept is not None:
            self.levels.setdefault(level, deque(maxlen=self.cells_per_level)).append(kept)
        self.trail.clear()
        return kept

    def pick(self, level: str, rng: np.random.Generator) -> Cell | None:
        """A failure of `level` drawn uniformly; None before the first."""
        cells = self.levels.get(level, ())
        return cells[int(rng.integers(len(cells)))] if cells else None
