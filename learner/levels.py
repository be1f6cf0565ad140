"""Per-level statistics of the training episodes, and the level schedule's weights.

The learner keeps, for each level of the run's set, its newest `window` training episodes'
progress (max x as a share of the level, `common.levels.progress`) and flags. From them it
computes the weights with which actors draw each episode's level, sent with every weight
broadcast:

- `uniform`: every level alike (the weights are left empty, so actors draw uniformly);
- `progress`: after Prioritized Level Replay (Jiang et al. 2021), a rank-based prioritisation
  of each level's score mixed with a staleness term,

      P(l) = (1 - rho) * h(l)^(1/beta) / sum_j h(j)^(1/beta) + rho * (c - C_l) / sum_j (c - C_j)

  where h(l) = 1 / rank of l by score (highest first), c counts the episodes seen so far and C_l
  the count when l last finished one. PLR scores a level by its mean GAE magnitude (a proxy of
  what is left to learn there); here the score is what the policy has not yet reached,
  1 - mean progress, which the learner measures directly and which cannot be inflated by an
  ill-fitted value function. A level without an episode yet scores 1 and is the stalest.
  PLR ranks hundreds of levels with beta = 0.1; with a world's four that would put nearly all
  episodes on the weakest level, so beta defaults to 1 (ranks 1..4 get 48/24/16/12%), and the
  staleness share rho keeps every level's score from going stale (PLR's 0.1).

A chunk names the level of each of its steps by its index in the run's set (the Welcome's env
spec), which the update groups its advantages by.

Thread-safe: `add` runs on the ingest thread, `weights` on the publisher's, `summary` on the
train loop's.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from common.levels import Schedule, progress


class LevelSummary(NamedTuple):
    episodes: int  # all finished on this level so far (this process)
    progress: float | None  # mean progress over the window; None: no episode, or unknown length
    flag_rate: float | None  # share of the window's episodes that reached the flag
    window: int  # episodes in the window


def rank_weights(scores: Sequence[float], temperature: float) -> np.ndarray:
    """PLR's rank prioritisation: h = 1/rank (rank 1 = highest score), each to the power
    1/temperature, normalised; levels of equal score share their ranks' mean h. [L] -> [L]."""
    s = np.asarray(scores, np.float64)
    order = np.argsort(-s, kind="stable")
    h_sorted = (1.0 / np.arange(1, len(s) + 1)) ** (1.0 / temperature)
    h = np.empty(len(s))
    h[order] = h_sorted
    for value in np.unique(s):  # ties: the mean of the h their ranks would get
        tied = s == value
        h[tied] = h[tied].mean()
    return h / h.sum()


def staleness_weights(last_seen: Sequence[int], now: int) -> np.ndarray:
    """PLR's staleness term: (now - C_l) / sum; uniform when no level is stale. [L] -> [L]."""
    age = now - np.asarray(last_seen, np.float64)
    total = age.sum()
    return age / total if total > 0 else np.full(len(age), 1.0 / len(age))


def plr_weights(
    scores: Sequence[float], last_seen: Sequence[int], now: int, temperature: float, rho: float
) -> np.ndarray:
    """(1 - rho) * rank_weights + rho * staleness_weights. [L] -> [L], sums to 1."""
    return (1 - rho) * rank_weights(scores, temperature) + rho * staleness_weights(last_seen, now)


class LevelStats:
    def __init__(
        self,
        levels: tuple[str, ...],
        schedule: Schedule = "uniform",
        window: int = 50,
        temperature: float = 1.0,
        staleness: float = 0.1,
    ):
        self.levels = levels
        self.schedule = schedule
        self.temperature = temperature
        self.staleness = staleness
        self._progress = {lv: deque[float](maxlen=window) for lv in levels}
        self._flags = {lv: deque[bool](maxlen=window) for lv in levels}
        self._episodes = dict.fromkeys(levels, 0)
        self._last_seen = dict.fromkeys(levels, 0)  # the episode count when last finished
        self._count = 0
        self._lock = threading.Lock()

    def add(self, level: str, max_x: int, flag: bool) -> None:
        """One finished training episode; levels outside the set are ignored."""
        with self._lock:
            if level not in self._episodes:
                return
            self._count += 1
            self._episodes[level] += 1
            self._last_seen[level] = self._count
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

    def weights(self) -> dict[str, float]:
        """The draw probability of each level, sent to the actors; {} means uniform."""
        if self.schedule == "uniform" or len(self.levels) < 2:
            return {}
        with self._lock:
            scores = []
            for lv in self.levels:
                prog = self._progress[lv]
                if prog:
                    scores.append(1.0 - float(np.mean(prog)))
                elif self._flags[lv]:  # played, but of unknown length: by its flag rate
                    scores.append(1.0 - float(np.mean(self._flags[lv])))
                else:
                    scores.append(1.0)  # never played: first in line
            last = [self._last_seen[lv] for lv in self.levels]
            p = plr_weights(scores, last, self._count, self.temperature, self.staleness)
        return {lv: float(w) for lv, w in zip(self.levels, p, strict=True)}
