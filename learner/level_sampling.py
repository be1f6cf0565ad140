"""Level sampling by learning potential, after Prioritized Level Replay (Jiang et al. 2021, Sec. 3
and Eq. 2): the actors draw each episode's level with weights the learner sends with its
weights, more often where the value still errs most, i.e. where there is most left to learn.

    P(l) = f / L + (1 - f) [ (1 - rho) h(l)^(1/beta) / sum_j h(j)^(1/beta)
                             + rho (c - C_l) / sum_j (c - C_j) ]

h(l) = 1 / rank of l by its score S_l (highest first); S_l is PLR's value-loss score, the mean
|v_s - V(x_s)| over the level's steps (V-trace targets against the value), here an exponential
moving average over the updates that held the level; c counts updates and C_l is the last that
held l (staleness). PLR ranks hundreds of levels with beta 0.1 and no floor; over a world's four
that would send nearly every episode to one level, so beta is 1 (ranks 1-4 get 48/24/16/12%) and
a share f of the draws is spread evenly, a floor under every level: none starves while it looks
learned (a level's score falls only while it is played).

Pure numpy plus a small holder (`LevelScores`) that the train loop feeds and reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TEMPERATURE = 1.0  # beta: 1 / rank to the power 1 / beta
STALENESS = 0.1  # rho: PLR's share of the staleness term
FLOOR = 0.5  # f: the share of draws spread evenly (each level gets >= f / L)
SCORE_RATE = 0.05  # each update that holds a level moves its score this far to the update's mean


def rank_weights(scores: Sequence[float], temperature: float) -> np.ndarray:
    """PLR's rank prioritisation: h = 1 / rank (1 = highest score) to the power 1 / temperature,
    normalised; tied levels share the mean of their ranks' h. [L] -> [L]."""
    s = np.asarray(scores, np.float64)
    order = np.argsort(-s, kind="stable")
    h = np.empty(len(s))
    h[order] = (1.0 / np.arange(1, len(s) + 1)) ** (1.0 / temperature)
    for value in np.unique(s):
        tied = s == value
        h[tied] = h[tied].mean()
    return h / h.sum()


def staleness_weights(last_seen: Sequence[int], now: int) -> np.ndarray:
    """PLR's staleness term: (c - C_l) / sum_j (c - C_j); uniform when no level is stale."""
    age = now - np.asarray(last_seen, np.float64)
    total = age.sum()
    return age / total if total > 0 else np.full(len(age), 1.0 / len(age))


def draw_weights(
    scores: Sequence[float],
    last_seen: Sequence[int],
    now: int,
    temperature: float = TEMPERATURE,
    staleness: float = STALENESS,
    floor: float = FLOOR,
) -> np.ndarray:
    """P(l) of the module docstring: [L] -> [L], summing to 1, each >= floor / L."""
    n = len(scores)
    if n == 0 or len(last_seen) != n:
        raise ValueError(
            f"pass one score and one last-seen count per level, got {n}, {len(last_seen)}"
        )
    ranked = (1 - staleness) * rank_weights(scores, temperature)
    ranked += staleness * staleness_weights(last_seen, now)
    return floor / n + (1 - floor) * ranked


class LevelScores:
    """Each level's score and when it was last in an update; owned by the train loop."""

    def __init__(self, levels: tuple[str, ...], rate: float = SCORE_RATE):
        self.levels = levels
        self.rate = rate
        self.scores: list[float | None] = [None] * len(levels)
        self.last_seen = [0] * len(levels)
        self.updates = 0

    def observe(self, steps: Sequence[float], value_error: Sequence[float]) -> None:
        """One update: per level index (the learner's set order), its steps in the batch and their
        mean |v_s - V(x_s)|."""
        self.updates += 1
        for i in range(len(self.levels)):
            if steps[i] <= 0:
                continue
            old, new = self.scores[i], float(value_error[i])
            self.scores[i] = new if old is None else old + self.rate * (new - old)
            self.last_seen[i] = self.updates

    def weights(self) -> dict[str, float]:
        """The draw weight of each level; {} (every level alike) until each has a score."""
        if len(self.levels) < 2 or any(s is None for s in self.scores):
            return {}
        p = draw_weights([float(s) for s in self.scores], self.last_seen, self.updates)  # type: ignore[arg-type]
        return {lv: float(w) for lv, w in zip(self.levels, p, strict=True)}
