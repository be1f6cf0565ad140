"""Per-level statistics of the training episodes.

The learner keeps, for each level of the run's set, its newest WINDOW training episodes' progress
(max x as a share of the level, `common.levels.progress`) and flags, which the metrics and the
status line report. Actors draw each episode's level uniformly from the set.

A chunk names the level of each of its steps by its index in the run's set (the Welcome's env
spec), by which the update reports each level's advantages and entropy.

Thread-safe: `add` runs on the ingest thread, `summary` on the train loop's.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import NamedTuple

import numpy as np

from common.levels import progress

# Episodes per level behind its progress and flag rate
WINDOW = 50


class LevelSummary(NamedTuple):
    episodes: int  # all finished on this level so far (this process)
    progress: float | None  # mean progress over the window; None: no episode, or unknown length
    flag_rate: float | None  # share of the window's episodes that reached the flag
    window: int  # episodes in the window


class LevelStats:
    def __init__(self, levels: tuple[str, ...], window: int = WINDOW):
        self.levels = levels
        self._progress = {lv: deque[float](maxlen=window) for lv in levels}
        self._flags = {lv: deque[bool](maxlen=window) for lv in levels}
        self._episodes = dict.fromkeys(levels, 0)
        self._lock = threading.Lock()

    def add(self, level: str, max_x: int, flag: bool) -> None:
        """One finished training episode; levels outside the set are ignored."""
        with self._lock:
            if level not in self._episodes:
                return
            self._episodes[level] += 1
            self._flags[level].append(flag)
            p = progress(level, max_x, flag)
            if p is not None:
                self._progress[level].append(p)

    def summary(self) -> dict[str, LevelSummary]:
        with self._lock:
            return {lv: self._summary(lv) for lv in self.levels}

    def _summary(self, level: str) -> LevelSummary:
        prog, flags = self._progress[level], self._flags[level]
        return LevelSummary(
            self._episodes[level],
            float(np.mean(prog)) if prog else None,
            float(np.mean(flags)) if flags else None,
            len(flags),
        )
