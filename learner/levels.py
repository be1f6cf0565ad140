"""Per-level statistics of the training episodes.

The learner keeps, for each level of the run's set, its newest WINDOW training episodes' progress
(`common.levels.progress`) and flags, which the metrics and the status line report. A collapse
shows as a fall from the best: each level keeps the best mean progress and flag rate of its full
window since the run began (a few lucky first episodes are no best), and the fall of the window
now below it (None until the window is full again); the checkpoint keeps the bests (`bests`,
`restore`). Thread-safe: `add` runs on the ingest thread, `summary` on the train loop's.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import NamedTuple

import numpy as np

from common.levels import end_x, progress

# Episodes per level behind its progress and flag rate
WINDOW = 50


class LevelSummary(NamedTuple):
    episodes: int  # all finished on this level so far (this process)
    progress: float | None  # mean progress over the window; None: no episode, or unknown length
    flag_rate: float | None  # share of the window's episodes that reached the flag
    window: int  # episodes in the window
    best_progress: float | None = None  # the best `progress` of a full window so far (the run's)
    best_flag_rate: float | None = None  # the best `flag_rate` of a full window so far
    progress_fall: float | None = None  # best_progress - progress; None: the window is not full
    flag_rate_fall: float | None = None  # best_flag_rate - flag_rate; None: not full
    end_x: float | None = None  # where most of the window's flagless episodes ended (levels.end_x)


class LevelStats:
    def __init__(self, levels: tuple[str, ...], window: int = WINDOW):
        self.levels = levels
        self._progress = {lv: deque[float](maxlen=window) for lv in levels}
        self._flags = {lv: deque[bool](maxlen=window) for lv in levels}
        self._ends = {lv: deque[int](maxlen=window) for lv in levels}  # flagless episodes' max x
        self._episodes = dict.fromkeys(levels, 0)
        self._best: dict[str, dict[str, float]] = {lv: {} for lv in levels}  # {"progress": ...}
        self._lock = threading.Lock()

    def add(self, level: str, max_x: int, flag: bool) -> None:
        """One finished training episode; levels outside the set are ignored."""
        with self._lock:
            if level not in self._episodes:
                return
            self._episodes[level] += 1
            self._flags[level].append(flag)
            if not flag:
                self._ends[level].append(max_x)
            p = progress(level, max_x, flag)
            if p is not None:
                self._progress[level].append(p)
            best = self._best[level]
            for name, window in (("progress", self._progress), ("flag_rate", self._flags)):
                if _full(window[level]):
                    best[name] = max(best.get(name, 0.0), float(np.mean(window[level])))

    def bests(self) -> dict[str, dict[str, float]]:
        """{level: {"progress": best, "flag_rate": best}} of the levels with a best, for the
        checkpoint."""
        with self._lock:
            return {lv: dict(best) for lv, best in self._best.items() if best}

    def restore(self, bests: dict[str, dict[str, float]]) -> None:
        """Take the bests of a checkpoint (`bests`); levels outside the set are ignored."""
        with self._lock:
            for level, best in bests.items():
                if level in self._best:
                    self._best[level] = {k: float(v) for k, v in best.items()}

    def summary(self) -> dict[str, LevelSummary]:
        with self._lock:
            return {lv: self._summary(lv) for lv in self.levels}

    def _summary(self, level: str) -> LevelSummary:
        prog, flags, best = self._progress[level], self._flags[level], self._best[level]
        mean_progress = float(np.mean(prog)) if prog else None
        flag_rate = float(np.mean(flags)) if flags else None
        return LevelSummary(
            self._episodes[level], mean_progress, flag_rate, len(flags), best.get("progress"),
            best.get("flag_rate"), _fall(best.get("progress"), mean_progress, prog),
            _fall(best.get("flag_rate"), flag_rate, flags), end_x(tuple(self._ends[level])),
        )  # fmt: skip


def _full(window: deque) -> bool:
    return len(window) == window.maxlen


def _fall(best: float | None, now: float | None, window: deque) -> float | None:
    """How far `now` lies below `best`, once the window is full."""
    if best is None or now is None or not _full(window):
        return None
    return max(0.0, best - now)
