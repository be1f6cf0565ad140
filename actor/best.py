"""The best policy the eval actor keeps: the score that judges a policy (the mean over the run's
levels of each level's last `window` perturbed sampled episodes' mean progress, none until every
window is full), and `RUN/eval/best-policy.pt`, replaced only by a better one.
docs/EVALUATION.md, "The best policy".
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from common.env import EpisodeSummary
from common.env_spec import EnvSpec
from common.levels import progress
from common.rundir import atomic_write

log = logging.getLogger(__name__)


class Score(NamedTuple):
    """A policy's score and the figures behind it."""

    value: float  # the mean of `levels`, each level alike
    levels: dict[str, float]  # each level's: mean progress (0-1), or mean max x (unknown length)
    flag_rates: dict[str, float]  # each level's share of episodes at the flag
    episodes: int  # per level: the window


def level_score(level: str, episodes: Sequence[EpisodeSummary]) -> float:
    """The mean progress of `episodes` on `level`; their mean max x where its length is unknown."""
    if progress(level, 0) is None:
        return statistics.fmean(e.max_x for e in episodes)
    return statistics.fmean(progress(level, e.max_x, e.flag) for e in episodes)  # type: ignore[misc]


def policy_score(windows: Mapping[str, Sequence[EpisodeSummary]], window: int) -> Score | None:
    """The score of the newest `window` episodes of each level of `windows` ({level: its episodes,
    oldest first}); None until every level has `window` of them."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if not windows or any(len(eps) < window for eps in windows.values()):
        return None
    newest = {level: list(eps)[-window:] for level, eps in windows.items()}
    levels = {level: level_score(level, eps) for level, eps in newest.items()}
    flags = {level: sum(e.flag for e in eps) / window for level, eps in newest.items()}
    return Score(statistics.fmean(levels.values()), levels, flags, window)


class Best(NamedTuple):
    """What the best file says of its policy."""

    score: float
    policy_version: int
    levels: tuple[str, ...]


def read_best(path: Path) -> dict[str, Any] | None:
    """The best file's contents; None when there is none, or it is not one (said in the log)."""
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a foreign or damaged file: a new best replaces it
        log.warning("%s is not a best policy (%s: %s); a new best replaces it", path,
                    type(exc).__name__, exc)  # fmt: skip
        return None
    best = state.get("best") if isinstance(state, dict) else None
    if not isinstance(best, dict) or not isinstance(best.get("score"), int | float):
        log.warning("%s holds no best score; a new best replaces it", path)
        return None
    return state


def best_of(state: dict[str, Any] | None) -> Best | None:
    if state is None:
        return None
    b = state["best"]
    return Best(float(b["score"]), int(state.get("policy_version", -1)), tuple(b.get("levels", {})))


class BestKeeper:
    """The best policy so far, in its file: read back at start, replaced only by a better one."""

    def __init__(self, path: Path):
        self.path = path
        self.best = best_of(read_best(path))
        if self.best is not None:
            log.info("best policy so far: v%d, score %.3f (%s)", self.best.policy_version,
                     self.best.score, path)  # fmt: skip

    def beats(self, s: Score) -> bool:
        """Whether `s` beats the best so far: there is none, or it is of another level set, or
        `s` is higher (a tie keeps the older)."""
        b = self.best
        return b is None or set(b.levels) != set(s.levels) or s.value > b.score

    def keep(
        self, s: Score, model: torch.nn.Module, env: EnvSpec, policy_version: int,
        env_frames: int, judged_by: Mapping[str, Any],
    ) -> bool:  # fmt: skip
        """Write `model`'s weights as the best if `s` beats the best so far; whether it did.
        `env`: the run's env settings (unperturbed); `env_frames`: the run's at `policy_version`
        (its weights message's); `judged_by`: the episodes behind `s` (their policy and
        perturbation)."""
        if not self.beats(s):
            return False
        if self.best is not None and set(self.best.levels) != set(s.levels):
            log.warning("%s was the best on %s, not this run's levels: replaced", self.path,
                        ",".join(self.best.levels))  # fmt: skip
        state = {
            "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "model_spec": model.spec.to_wire(),
            "policy_version": policy_version,
            "env_frames": env_frames,
            "config": env.to_wire(),
            "best": {
                "score": s.value,
                "levels": s.levels,
                "flag_rates": s.flag_rates,
                "episodes_per_level": s.episodes,
                **judged_by,
                "saved_at": time.time(),
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda f: torch.save(state, f))
        self.best = Best(s.value, policy_version, tuple(s.levels))
        return True
