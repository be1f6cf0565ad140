"""The evaluation matrix: every level of a set, played by every policy, in one or two settings,
each (setting, level, policy) summarised as one row. Used by `make eval` and by the random
baseline; pure (no files, no printing) above the IO banner; scripts/evaluate/tables.py shows it.

A row (`Cell`) holds the level's episodes' mean and median progress (`common.levels.progress`:
max x as a share of the level's length, 1 at the flag; None for a level of unknown length), mean,
median and best max x, the shares of episodes that reached the flag, died, or were cut off (no
progress, or the env's own limit), the mean game return, and where the episodes that did not
reach the flag ended: the `TOP_ENDS` most common (outcome, max x binned to `END_BIN_PX` pixels)
pairs with their counts. A set of more than one level also gets a mean row per policy, each level
counting alike (progress over the levels of known length only).

Settings: `plain` plays the env as given; `perturbed` adds sticky actions and no-op starts
(`PERTURBED`: the eval actor's `common.env_spec.PERTURBATION`, p = 0.25 and 0..30 no-op steps,
after Machado et al. 2018, "Revisiting the Arcade Learning Environment"). NES Mario is
deterministic, so a policy that memorised a button sequence plays the plain setting well and
drops in the perturbed one; one that reads the screen does not.

Reproducibility: each (setting, level) is played on its own env, seeded by the seed, the level and
the setting, so a level's figures do not depend on which other levels the set holds.
"""

from __future__ import annotations

import dataclasses
import statistics
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

from actor.evaluation import PERTURBATION, EpisodePlayer, Policy, upscale, write_video
from common.env import EpisodeSummary, FrameEnv
from common.env_spec import EnvSpec
from common.levels import progress
from common.rundir import atomic_write

END_BIN_PX = 64  # where episodes end: max x in bins of 4 tiles (a tile is 16 px)
TOP_ENDS = 3  # the most common end points shown per row


class Setting(NamedTuple):
    name: str  # "plain" or "perturbed"
    sticky_actions: float  # p per NES frame of repeating the previous buttons
    noop_max: int  # episodes start after 0..noop_max no-op agent steps


PERTURBED = Setting("perturbed", *PERTURBATION)  # the eval actor's, one definition


def setting_of(spec: EnvSpec, name: str = "plain") -> Setting:
    return Setting(name, spec.sticky_actions, spec.noop_max)


class EndPoint(NamedTuple):
    outcome: str  # death | no_progress | other
    x_from: int  # the bin of the episodes' max x, inclusive
    x_to: int
    count: int


class Cell(NamedTuple):
    """One (setting, level, policy) of the matrix; level "mean" for the mean over a set."""

    setting: str
    level: str
    policy: str
    episodes: int  # in a mean row: per level (the levels' mean)
    mean_progress: float | None  # 0..1; None when the level's length is unknown
    median_progress: float | None
    mean_max_x: float | None  # None in a mean row (levels differ in length)
    median_max_x: float | None
    best_max_x: int | None
    flag_rate: float
    death_rate: float
    cutoff_rate: float  # no-progress cutoffs and the env's own limit
    mean_return: float
    ends: tuple[EndPoint, ...]  # the most common end points, most frequent first


class Played(NamedTuple):
    episodes: dict[str, list[EpisodeSummary]]  # policy name -> its episodes, in play order
    best: tuple[str, int] | None  # (policy, index) of the best episode of all; None if none
    best_frames: Sequence[np.ndarray]  # its colour screens (Screens); empty without recording
    best_peak: int = 0  # the index in best_frames of its max-x moment (first reached)


def play_policies(
    env: FrameEnv, policies: Sequence[tuple[str, Policy, int]], *, state_size: int = 0,
    record: bool = True,
) -> Played:  # fmt: skip
    """Play `count` episodes of each (name, policy, count) in turn, on the actors' stepping path
    (`actor.evaluation.EpisodePlayer`; `state_size`: the network's core state); the best episode
    of all (largest max x, then return, then the earliest played) keeps its colour screens.

    Only the best episode so far and the current one are held: about 180 KB per agent step each.
    """
    player = EpisodePlayer(env, state_size, record)
    episodes: dict[str, list[EpisodeSummary]] = {name: [] for name, _, _ in policies}
    best, best_key, best_frames, best_peak = None, None, [], 0
    for name, policy, count in policies:
        for i in range(count):
            e, screens, peak = player.play(policy)
            episodes[name].append(e)
            if best_key is None or (e.max_x, e.episode_return) > best_key:  # ties: the earliest
                best, best_key = (name, i), (e.max_x, e.episode_return)
                best_frames, best_peak = screens, peak
    return Played(episodes, best, best_frames, best_peak)


class EvalSummary(NamedTuple):
    episodes: int
    flag_rate: float
    mean_max_x: float
    median_max_x: float
    max_max_x: int
    mean_return: float
    best_index: int  # the best episode: largest max_x, then return, then earliest


def summarise(episodes: Sequence[EpisodeSummary]) -> EvalSummary:
    """Episodes of one policy pooled (over levels, for `make report`)."""
    if not episodes:
        raise ValueError("no episodes to summarise")
    return EvalSummary(
        episodes=len(episodes),
        flag_rate=float(np.mean([e.flag for e in episodes])),
        mean_max_x=float(np.mean([e.max_x for e in episodes])),
        median_max_x=float(np.median([e.max_x for e in episodes])),
        max_max_x=max(e.max_x for e in episodes),
        mean_return=float(np.mean([e.episode_return for e in episodes])),
        best_index=max(
            range(len(episodes)), key=lambda i: (episodes[i].max_x, episodes[i].episode_return, -i)
        ),
    )


class LevelResult(NamedTuple):
    """One level played in one setting by every policy."""

    setting: Setting
    level: str
    played: Played


def end_points(
    episodes: Sequence[EpisodeSummary], bin_px: int = END_BIN_PX, top: int = TOP_ENDS
) -> tuple[EndPoint, ...]:
    """The `top` most common (outcome, max x bin) of the episodes that did not reach the flag;
    ties go to the smaller x."""
    counts = Counter((e.outcome, e.max_x // bin_px) for e in episodes if not e.flag)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][1], kv[0][0]))
    return tuple(
        EndPoint(outcome, b * bin_px, (b + 1) * bin_px - 1, n) for (outcome, b), n in ranked[:top]
    )


def episode_progress(level: str, e: EpisodeSummary) -> float | None:
    """The episode's progress; None on a level of unknown length, even at its flag."""
    return progress(level, e.max_x, e.flag) if progress(level, 0) is not None else None


def cell(setting: str, level: str, policy: str, episodes: Sequence[EpisodeSummary]) -> Cell:
    if not episodes:
        raise ValueError(f"no episodes of {policy} on {level} to summarise")
    n = len(episodes)
    shares = [episode_progress(level, e) for e in episodes]
    measured = [p for p in shares if p is not None]
    xs = [e.max_x for e in episodes]
    return Cell(
        setting=setting,
        level=level,
        policy=policy,
        episodes=n,
        mean_progress=statistics.fmean(measured) if measured else None,
        median_progress=statistics.median(measured) if measured else None,
        mean_max_x=statistics.fmean(xs),
        median_max_x=float(statistics.median(xs)),
        best_max_x=max(xs),
        flag_rate=sum(e.flag for e in episodes) / n,
        death_rate=sum(e.outcome == "death" for e in episodes) / n,
        cutoff_rate=sum(e.outcome in ("no_progress", "other") for e in episodes) / n,
        mean_return=statistics.fmean(e.episode_return for e in episodes),
        ends=end_points(episodes),
    )


def mean_cell(cells: Sequence[Cell]) -> Cell:
    """The mean row of one (setting, policy) over its levels, each level alike."""

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.fmean(known) if known else None

    first = cells[0]
    return Cell(
        setting=first.setting,
        level="mean",
        policy=first.policy,
        episodes=round(statistics.fmean(c.episodes for c in cells)),
        mean_progress=mean([c.mean_progress for c in cells]),
        median_progress=mean([c.median_progress for c in cells]),
        mean_max_x=None,
        median_max_x=None,
        best_max_x=None,
        flag_rate=statistics.fmean(c.flag_rate for c in cells),
        death_rate=statistics.fmean(c.death_rate for c in cells),
        cutoff_rate=statistics.fmean(c.cutoff_rate for c in cells),
        mean_return=statistics.fmean(c.mean_return for c in cells),
        ends=(),
    )


class Matrix(NamedTuple):
    settings: tuple[str, ...]  # in play order, "plain" first
    levels: tuple[str, ...]
    policies: tuple[str, ...]
    cells: tuple[Cell, ...]  # (setting, level, policy), in that nesting order
    means: tuple[Cell, ...]  # (setting, policy); empty for a set of one level
    unmeasured: tuple[str, ...]  # levels of unknown length: their progress is "-"
    episodes: tuple[tuple[str, str, str, int, EpisodeSummary], ...]  # setting, level, policy, i

    def row(self, setting: str, level: str, policy: str) -> Cell:
        """The row of a (setting, level, policy); level "mean" for a mean row."""
        key = (setting, level, policy)
        return next(c for c in (*self.cells, *self.means) if (c.setting, c.level, c.policy) == key)


def tabulate(results: Sequence[LevelResult]) -> Matrix:
    """The matrix of the played levels; policies keep the order they were played in."""
    settings = tuple(dict.fromkeys(r.setting.name for r in results))
    levels = tuple(dict.fromkeys(r.level for r in results))
    policies = tuple(dict.fromkeys(p for r in results for p in r.played.episodes))
    cells, episodes = [], []
    for r in results:
        for policy, eps in r.played.episodes.items():
            cells.append(cell(r.setting.name, r.level, policy, eps))
            episodes += [(r.setting.name, r.level, policy, i, e) for i, e in enumerate(eps)]
    means = []
    if len(levels) > 1:
        for s in settings:
            for p in policies:
                means.append(mean_cell([c for c in cells if (c.setting, c.policy) == (s, p)]))
    unknown = tuple(
        lv for lv in levels if all(c.mean_progress is None for c in cells if c.level == lv)
    )
    return Matrix(settings, levels, policies, tuple(cells), tuple(means), unknown, tuple(episodes))


def level_seed(level: str) -> int:
    """A level's share of a seed: the same whichever set the level is played in."""
    return zlib.crc32(level.encode())


# (level, setting) -> the policies to play there: (name, policy, episodes) each, in order
PoliciesFor = Callable[[str, Setting], Sequence[tuple[str, Policy, int]]]


def play_level(
    spec: EnvSpec,
    setting: Setting,
    setting_index: int,
    level: str,
    policies: Sequence[tuple[str, Policy, int]],
    *,
    seed: int = 0,
    state_size: int = 0,
    record: bool = True,
) -> LevelResult:
    """One level of `spec`'s set in one setting (the `setting_index`-th of the run): its env is
    seeded by (seed, the level, the setting's index) alone, so the level plays the same episodes
    whichever process plays it and whatever else that process played before. `state_size`: the
    network's core state (0: none)."""
    one = dataclasses.replace(
        spec, level=level, sticky_actions=setting.sticky_actions, noop_max=setting.noop_max
    )
    env = FrameEnv(one, seed=(seed, level_seed(level), setting_index))
    try:
        played = play_policies(env, policies, state_size=state_size, record=record)
    finally:
        env.close()
    return LevelResult(setting, level, played)


def play_levels(
    spec: EnvSpec,
    settings: Sequence[Setting],
    policies_for: PoliciesFor,
    *,
    seed: int = 0,
    state_size: int = 0,
    record: bool = True,
) -> Iterator[LevelResult]:
    """Play each setting's levels of `spec.level` in turn, yielding each as it is done (with the
    best episode's screens when recording, so that the caller can write and drop them)."""
    for s_index, setting in enumerate(settings):
        for level in spec.levels:
            yield play_level(
                spec, setting, s_index, level, policies_for(level, setting),
                seed=seed, state_size=state_size, record=record,
            )  # fmt: skip


# ---- IO -------------------------------------------------------------------------------------


def file_stem(level: str, setting: str) -> str:
    """`level-1-1` (plain) or `level-1-1-perturbed`: the names of a level's video and still."""
    name = "level-" + level.replace(":", "_").replace("/", "_")
    return name if setting == "plain" else f"{name}-{setting}"


def write_still(path: Path, frame: np.ndarray) -> None:
    """A [H, W, 3] uint8 RGB frame as PNG, written to a temp file then renamed."""
    ok, png = cv2.imencode(".png", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    if not ok:
        raise OSError(f"cannot encode {path.name} as PNG")
    atomic_write(path, png.tobytes())


def write_best(out: Path, result: LevelResult, fps: Fraction, scale: int = 1) -> dict | None:
    """The level's best episode as `<stem>.mp4` and its max-x moment as `<stem>.png`; what was
    written (None without recorded screens)."""
    played = result.played
    if not played.best_frames or played.best is None:
        return None
    stem = file_stem(result.level, result.setting.name)
    video, still = out / f"{stem}.mp4", out / f"{stem}.png"
    write_video(video, played.best_frames, fps, scale)
    write_still(still, upscale(played.best_frames[played.best_peak], scale))
    policy, index = played.best
    h, w = played.best_frames[0].shape[:2]
    return {
        "setting": result.setting.name,
        "level": result.level,
        "policy": policy,
        "episode": index,
        "max_x": played.episodes[policy][index].max_x,
        "path": str(video),
        "still": str(still),
        "still_frame": played.best_peak,
        "frames": len(played.best_frames),
        "fps": float(fps),
        "codec": "h264",
        "pix_fmt": "yuv420p",
        "width": w * scale,
        "height": h * scale,
    }
