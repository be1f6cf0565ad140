"""Frontier starts: one env's archive of its own emulator snapshots near each level's frontier.

Go-Explore-like (Ecoffet et al. 2021): a cell is Mario's (x, y) in X_CELL x Y_CELL pixel boxes;
a level keeps its CELLS_PER_LEVEL furthest cells, each with the snapshot reached in the fewest
agent steps (the most clock left); a frontier start loads one, drawn uniformly. A snapshot loaded
into any emulator but the live one that dumped it crashes the process: an archive is one env's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

X_CELL = 32  # pixels
Y_CELL = 32
CELLS_PER_LEVEL = 16  # ~255 KiB each (nes-py's snapshot holds the screen)


class Cell(NamedTuple):
    x: int  # Mario's x where the snapshot was taken
    steps: int  # agent steps from the level's start to it
    snapshot: object  # nes-py's dump_state() of the env's own emulator


class Archive:
    """level -> {(x // X_CELL, y // Y_CELL): Cell}, at most `cells_per_level` per level."""

    def __init__(self, cells_per_level: int = CELLS_PER_LEVEL):
        self.cells_per_level = cells_per_level
        self.levels: dict[str, dict[tuple[int, int], Cell]] = {}

    def __len__(self) -> int:
        return sum(len(cells) for cells in self.levels.values())

    def offer(self, level: str, x: int, y: int, steps: int, dump: Callable[[], object]) -> bool:
        """Keep a snapshot (`dump()`, called only then) of Mario at (x, y) after `steps` agent
        steps, if its cell is new and among the furthest, or known but reached in more steps."""
        cells = self.levels.setdefault(level, {})
        key = (x // X_CELL, y // Y_CELL)
        known = cells.get(key)
        if known is not None and known.steps <= steps:
            return False
        if known is None and len(cells) >= self.cells_per_level:
            nearest = min(cells, key=lambda k: cells[k].x)
            if cells[nearest].x >= x:
                return False
            del cells[nearest]
        cells[key] = Cell(x, steps, dump())
        return True

    def pick(self, level: str, rng: np.random.Generator) -> Cell | None:
        """A cell of `level` drawn uniformly; None before the first."""
        cells = list(self.levels.get(level, {}).values())
        return cells[int(rng.integers(len(cells)))] if cells else None
