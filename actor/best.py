"""The best policy the eval actor keeps, `RUN/eval/best-policy.pt`, and the rule that keeps it.
docs/EVALUATION.md, "The best policy".

The window score (`policy_score`): the mean over the run's levels of each level's last `window`
perturbed sampled episodes' mean progress, none until every window is full. It follows training,
but it cannot pick the best policy: a window is 10 episodes over a few policy versions, and the
highest of many noisy windows is luck. On a 4 M-frame run of 1-1 the window's maximum kept v2792
for 0.994; on 30 fresh perturbed episodes it took 73% of flags, against 83% for the last
checkpoint, 1.2 M frames later.

So a window only nominates. The rule:

1. A policy is a candidate when its window score beats the kept policy's score (or nothing is
   kept, or what is kept was judged on another level set or network). At most one candidate per
   refreshed window: the episodes that nominated one never nominate another.
2. A challenge: the candidate's weights, frozen, and the kept policy's each play the same number
   of fresh perturbed episodes (`--eval-challenge-episodes`, spread evenly over the levels), in
   the same envs, with the same kind of policy (sampled).
3. The candidate replaces the kept policy only if its mean over its fresh episodes is higher (a
   tie keeps the kept one); either way the winner's score is its mean in this challenge.

Both means come from episodes played after the candidate was chosen, so the luck that chose it
buys it nothing but the challenge, and the kept policy plays again at every challenge, so a score
it once drew by luck never stands in the way of a newer, better policy.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from common.env import EpisodeSummary
from common.env_spec import EnvSpec
from common.levels import progress
from common.model import ActorCritic, ModelSpec
from common.rundir import atomic_write

log = logging.getLogger(__name__)


class Score(NamedTuple):
    """A policy's score and the figures behind it."""

    value: float  # the mean of `levels`, each level alike
    levels: dict[str, float]  # each level's: mean progress (0-1), or mean max x (unknown length)
    flag_rates: dict[str, float]  # each level's share of episodes at the flag
    episodes: int  # per level: the window, or a challenge's episodes


def level_score(level: str, episodes: Sequence[EpisodeSummary]) -> float:
    """The mean progress of `episodes` on `level`; their mean max x where its length is unknown."""
    if progress(level, 0) is None:
        return statistics.fmean(e.max_x for e in episodes)
    return statistics.fmean(progress(level, e.max_x, e.flag) for e in episodes)  # type: ignore[misc]


def episodes_score(played: Mapping[str, Sequence[EpisodeSummary]]) -> Score:
    """The score of every episode in `played` ({level: its episodes}, each level some)."""
    levels = {level: level_score(level, eps) for level, eps in played.items()}
    flags = {level: sum(e.flag for e in eps) / len(eps) for level, eps in played.items()}
    per_level = min(len(eps) for eps in played.values())
    return Score(statistics.fmean(levels.values()), levels, flags, per_level)


def policy_score(windows: Mapping[str, Sequence[EpisodeSummary]], window: int) -> Score | None:
    """The window score: the newest `window` episodes of each level of `windows` ({level: its
    episodes, oldest first}); None until every level has `window` of them."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if not windows or any(len(eps) < window for eps in windows.values()):
        return None
    return episodes_score({level: list(eps)[-window:] for level, eps in windows.items()})


def challenge_plan(levels: Sequence[str], episodes: int) -> dict[str, int]:
    """Each level's share of a challenge's `episodes` per policy: alike, at least one each."""
    return dict.fromkeys(levels, max(1, math.ceil(episodes / len(levels))))


def wins(candidate: float, kept: float | None) -> bool:
    """Whether a candidate's fresh mean takes the place of the kept policy's (None: nothing kept
    that it can be compared with); a tie keeps the kept one."""
    return kept is None or candidate > kept


class Best(NamedTuple):
    """What the best file says of its policy."""

    score: float  # its mean over the fresh episodes of its latest challenge
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
    """The best policy so far, in its file: read back at start, challenged by candidates."""

    def __init__(self, path: Path):
        self.path = path
        self.state = read_best(path)
        self.best = best_of(self.state)
        if self.best is not None:
            log.info("best policy so far: v%d, score %.3f (%s)", self.best.policy_version,
                     self.best.score, path)  # fmt: skip

    def nominates(self, window: Score) -> bool:
        """Whether a window score makes its policy a candidate: nothing kept, the kept one of
        another level set, or `window` above the kept score."""
        b = self.best
        return b is None or set(b.levels) != set(window.levels) or window.value > b.score

    def rival(self, spec: ModelSpec, levels: Sequence[str]) -> ActorCritic | None:
        """The kept policy's network, to play against a candidate of network `spec` on `levels`;
        None when nothing is kept, or what is kept cannot be compared (another level set or
        network, or weights that do not load): the candidate then plays alone."""
        if self.state is None or self.best is None:
            return None
        if set(self.best.levels) != set(levels):
            log.warning("%s was the best on %s, not this run's levels: a candidate replaces it",
                        self.path, ",".join(self.best.levels))  # fmt: skip
            return None
        try:
            kept = ModelSpec.from_dict(self.state["model_spec"])
            if kept != spec:
                raise ValueError(f"its network is {kept}, the run's {spec}")
            model = ActorCritic(kept)
            model.load_state_dict(self.state["model"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            log.warning("%s cannot play against a candidate (%s): a candidate replaces it",
                        self.path, exc)  # fmt: skip
            return None
        return model.eval()

    def settle(
        self, candidate: Score, kept: Score | None, window: Score | None, model: torch.nn.Module,
        env: EnvSpec, policy_version: int, env_frames: int, judged_by: Mapping[str, Any],
    ) -> bool:  # fmt: skip
        """A challenge's verdict (`wins`), written: the candidate `model` as the best, with its
        fresh score `candidate`, or the kept one's file with its new score `kept`; whether the
        candidate won. `window`: the window score that nominated the candidate (None: a stopped
        run's last checkpoint, scripts/evaluate/challenge.py); `env`: the run's env settings
        (unperturbed); `policy_version`, `env_frames`: the candidate's (its weights message's);
        `judged_by`: how the episodes were played."""
        if not wins(candidate.value, None if kept is None else kept.value):
            assert kept is not None and self.state is not None
            self.state["best"] |= _figures(kept, judged_by)
            self._write(self.state)
            return False
        state = {
            "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "model_spec": model.spec.to_wire(),
            "policy_version": policy_version,
            "env_frames": env_frames,
            "config": env.to_wire(),
            "best": _figures(candidate, judged_by)
            | ({} if window is None else {"window_score": window.value}),
        }
        self._write(state)
        return True

    def _write(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda f: torch.save(state, f))
        self.state, self.best = state, best_of(state)


def _figures(s: Score, judged_by: Mapping[str, Any]) -> dict[str, Any]:
    """What the file's `best` says of a score: the figures behind it and how it was played."""
    return {
        "score": s.value, "levels": s.levels, "flag_rates": s.flag_rates,
        "episodes_per_level": s.episodes, "judged_on": "challenge", **judged_by,
        "saved_at": time.time(),
    }  # fmt: skip
