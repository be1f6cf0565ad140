"""How soon a run learned, in env frames and in minutes: its first flag, its first window of env
frames with a flag, and its first window in which at least half the episodes took the flag.

Counted as the curves count (`scripts.episode_windows`): training episodes from the level's start
only (never a frontier start's), in windows of env frames by the learner's count when each episode
arrived; minutes are the run's own time since its learner started (a resumed run's time down left
out), at the episode, or at a window's last episode. Per level, MEAN's windows hold the mean over
levels of the flag rate, each level alike, so its half-flags window is the first in which the
levels' mean reached half.

Pure: numpy only; `scripts.learning_curve` prints these under its tables of windows of frames.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scripts.episode_windows import Episodes, FrameWindow

HALF = 0.5  # a window's flag rate at which half the training episodes take the flag


class Milestone(NamedTuple):
    env_frames: int  # the learner's env frames: at the episode, or at the window's end
    run_s: float  # the run's own seconds: at the episode, or at the window's last episode


class Milestones(NamedTuple):
    first_flag: Milestone | None  # the first episode at the flag
    first_flag_window: Milestone | None  # the first window with an episode at the flag
    half_flags_window: Milestone | None  # the first window with flag rate >= HALF
    frames: int  # the last full window's end: none of the above before it means not by then


def first_flag(eps: Episodes) -> Milestone | None:
    """The first episode at the flag, by the learner's env frames (then the run's time)."""
    flagged = np.flatnonzero(eps.flag)
    if not flagged.size:
        return None
    i = min(flagged, key=lambda k: (eps.env_frames[k], eps.run_s[k]))
    return Milestone(int(eps.env_frames[i]), float(eps.run_s[i]))


def _first_window(ws: list[FrameWindow], at_least: float) -> Milestone | None:
    for w in ws:
        if w.episodes and w.flag_rate is not None and w.flag_rate >= at_least:
            return Milestone(w.end_frames, w.last_s if w.last_s is not None else float("nan"))
    return None


def milestones(eps: Episodes, ws: list[FrameWindow]) -> Milestones:
    """The milestones of the episodes `eps` and their windows `ws` (`frame_windows`)."""
    return Milestones(
        first_flag(eps),
        _first_window(ws, np.nextafter(0.0, 1.0)),  # any flag at all
        _first_window(ws, HALF),
        ws[-1].end_frames if ws else 0,
    )


def _cell(m: Milestone | None, frames: int) -> str:
    if m is None:
        return f"none by {frames:,} frames" if frames else "-"
    minutes = "" if np.isnan(m.run_s) else f", {m.run_s / 60:.1f} min"
    return f"{m.env_frames:,} frames{minutes}"


def milestones_table(rows: dict[str, Milestones], window_frames: int, first: str = "run") -> str:
    """A row per run (or level): the milestones' env frames and minutes."""
    lines = [
        f"| {first} | first flag | first window with a flag (its end) "
        "| first window with >= 50% flags (its end) |",
        "|---|---|---|---|",
    ]
    for name, m in rows.items():
        cells = (
            _cell(m.first_flag, m.frames),
            _cell(m.first_flag_window, m.frames),
            _cell(m.half_flags_window, m.frames),
        )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return (
        f"milestones: training episodes from the level's start, windows of {window_frames:,} env "
        "frames; env frames, then minutes of the run's own time since its learner started (at "
        "the episode, or at the window's last episode)\n" + "\n".join(lines)
    )
