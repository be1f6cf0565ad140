"""Training episodes in windows of wall time or of env frames: the data behind every learning
curve.

Reads RUN/episodes.jsonl: each training episode the actors report is one line, with its arrival
time, the learner's env frames then, its level, max x, flag and (since progress was logged) its
progress; the learner's start is a `{"event": "start"}` line. A window holds the episodes that
*ended* in it, counted from the first start, so a curve means the same however fast the run goes.
Time is the run's own: a run stopped and resumed on the same run dir (a new start line) goes on
from where it stopped, the time between its last episode and the next start left out, so a run
resumed the next day draws one curve and not a gap. An episode started from a frontier snapshot
(`start_x` >= 0, `--frontier-starts`) is on no curve: only those from the level's start are.

An episode's progress is its max x as a share of its level (`common.levels.progress`, 1 at the
flag), as logged by the learner or, for a log from before progress was logged, computed from its
max x; NaN for a level of unknown length. Per level, each level's windows span the whole run, and
the mean over levels (MEAN) weights each level with episodes in a window alike: a level without an
episode in a window is left out of that window's mean, and a level of unknown length out of the
mean progress.

Pure: numpy only, no plotting; `scripts.learning_curve` prints and draws these windows,
`scripts.report` puts them in a run's report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from common.levels import ALL_STAGES, end_x, progress

MEAN = "mean"  # the key of the mean over levels among a run's per-level windows


class Window(NamedTuple):
    end_s: float  # the run's own seconds (from the learner's first start) at the window's end
    env_frames: int  # the learner's env frames at the last episode of the window (0 if none)
    episodes: int
    mean_max_x: float | None
    median_max_x: float | None
    flag_rate: float | None
    mean_progress: float | None = None  # 0-1; None: no episode, or a level of unknown length


class Episodes(NamedTuple):
    start: float  # unix time of the learner's first start
    time: np.ndarray  # [E] unix time each episode arrived
    env_frames: np.ndarray  # [E]
    max_x: np.ndarray  # [E]
    flag: np.ndarray  # [E] bool
    malformed: int  # lines that were not JSON objects of the expected shape
    level: np.ndarray  # [E] str
    progress: np.ndarray  # [E] 0-1; NaN for a level of unknown length
    run_s: np.ndarray  # [E] the run's own seconds at each arrival: from the first start, less
    # the time between each stop (its last episode) and the next start


class LevelRow(NamedTuple):
    """One level's line of a run's summary: its whole log, and its newest `last` episodes."""

    level: str
    episodes: int
    last: int  # episodes behind the two figures below (at most the `last` asked for)
    progress: float | None  # mean over the newest episodes; None for a level of unknown length
    flag_rate: float | None
    mean_max_x: float | None  # over the newest episodes
    best_progress: float | None  # the best window's mean progress
    furthest_x: float | None  # the furthest any episode got
    end_x: float | None = None  # where most of the newest flagless episodes ended (levels.end_x)


def read_episodes(path: Path, level: str | None = None) -> Episodes:
    """Parse RUN/episodes.jsonl, skipping (and counting) lines that do not parse."""
    start = None
    rows: list[tuple[float, int, int, bool, float, float]] = []
    names: list[str] = []
    malformed = 0
    clock = _RunClock()
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
            if d.get("event") == "start":
                t = float(d["time"])
                start = t if start is None else start
                clock.started(t)
                continue
            t = float(d["time"])
            run_s = clock.arrived(t)  # every episode moves the clock, of any level
            if (level and d.get("level") != level) or d.get("start_x", -1) >= 0:
                continue  # another level's, or a frontier start's (never on a curve)
            row = (t, int(d["env_frames"]), int(d["max_x"]), bool(d["flag"]))
            name = str(d.get("level", "?"))
            p = d.get("progress")
            if not isinstance(p, int | float) or isinstance(p, bool):
                p = progress(name, row[2], row[3])  # a log from before progress was logged
            rows.append((*row, np.nan if p is None else float(p), run_s))
            names.append(name)
        except (ValueError, KeyError, TypeError, AttributeError):
            malformed += 1
    if not rows and start is None:
        raise ValueError(f"{path} has no episodes and no start line")
    arr = np.array(rows, dtype=np.float64).reshape(-1, 6)
    first = start if start is not None else float(arr[:, 0].min())
    run_s = arr[:, 5]
    before = np.isnan(run_s)  # logged before any start line: as before, from `first`
    run_s[before] = arr[before, 0] - first
    return Episodes(
        first,
        arr[:, 0],
        arr[:, 1].astype(np.int64),
        arr[:, 2],
        arr[:, 3] > 0,
        malformed,
        np.array(names, dtype=str),
        arr[:, 4],
        run_s,
    )


class _RunClock:
    """The run's own time through the log's lines in order: each start line opens a life of the
    learner, and a life counts from its start to its last episode."""

    def __init__(self) -> None:
        self.done = 0.0  # seconds of the lives before this one
        self.start: float | None = None  # this life's start line
        self.last = 0.0  # this life's newest arrival

    def started(self, t: float) -> None:
        if self.start is not None:
            self.done += max(0.0, self.last - self.start)
        self.start = self.last = t

    def arrived(self, t: float) -> float:
        if self.start is None:
            return float("nan")
        self.last = max(self.last, t)
        return self.done + (t - self.start)


def start_times(path: Path) -> list[float]:
    """The learner's start lines in RUN/episodes.jsonl, one per life, in order; [] without any."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if '"start"' not in line:
            continue
        try:
            d = json.loads(line)
            if d.get("event") == "start":
                out.append(float(d["time"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return out


def run_seconds(times: np.ndarray, starts: list[float]) -> np.ndarray:
    """The run's own seconds at each of `times` ([T], unix time, ascending; rows of another log
    such as RUN/metrics.jsonl) by the learner's `starts`: as `Episodes.run_s`, each life counted
    from its start to its last time. Without a start, from the first time."""
    clock = _RunClock()
    pending = sorted(starts)
    out = np.empty(len(times), dtype=np.float64)  # [T]
    k = 0
    for i, t in enumerate(times):
        while k < len(pending) and pending[k] <= t:
            clock.started(pending[k])
            k += 1
        out[i] = clock.arrived(float(t))
    first = pending[0] if pending else (float(times[0]) if len(times) else 0.0)
    before = np.isnan(out)
    out[before] = np.asarray(times, dtype=np.float64)[before] - first
    return out


def levels_of(eps: Episodes) -> tuple[str, ...]:
    """The levels the episodes played, stages in game order, then any other names."""
    order = {lv: i for i, lv in enumerate(ALL_STAGES)}
    return tuple(sorted(set(eps.level.tolist()), key=lambda lv: (order.get(lv, len(order)), lv)))


def of_level(eps: Episodes, level: str) -> Episodes:
    """The episodes of one level."""
    return _only(eps, eps.level == level)


def _only(eps: Episodes, mask: np.ndarray) -> Episodes:
    return eps._replace(
        time=eps.time[mask],
        env_frames=eps.env_frames[mask],
        max_x=eps.max_x[mask],
        flag=eps.flag[mask],
        level=eps.level[mask],
        progress=eps.progress[mask],
        run_s=eps.run_s[mask],
    )


def _horizon(eps: Episodes, until_s: float | None) -> float:
    rel = eps.run_s
    horizon = float(rel.max()) if rel.size else 0.0
    return horizon if until_s is None else min(horizon, until_s)


def windows(eps: Episodes, window_s: float, until_s: float | None = None) -> list[Window]:
    """Consecutive windows of `window_s` from the start; the last partial window is left out."""
    return _windows(eps, window_s, _horizon(eps, until_s))


def _windows(eps: Episodes, window_s: float, horizon: float) -> list[Window]:
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    rel = eps.run_s  # [E]
    out = []
    k = 1
    while k * window_s <= horizon + 1e-9:
        lo, hi = (k - 1) * window_s, k * window_s
        sel = (rel > lo) & (rel <= hi)
        n = int(sel.sum())
        prog = eps.progress[sel]
        prog = prog[~np.isnan(prog)]
        out.append(
            Window(
                hi,
                int(eps.env_frames[sel].max()) if n else 0,
                n,
                float(eps.max_x[sel].mean()) if n else None,
                float(np.median(eps.max_x[sel])) if n else None,
                float(eps.flag[sel].mean()) if n else None,
                float(prog.mean()) if prog.size else None,
            )
        )
        k += 1
    return out


class FrameWindow(NamedTuple):
    end_frames: int  # the window holds the episodes that ended in (end - width, end] env frames
    episodes: int
    mean_max_x: float | None
    flag_rate: float | None
    mean_progress: float | None = None  # 0-1; None: no episode, or a level of unknown length
    last_s: float | None = None  # the run's own seconds at its last episode; None: no episode


def frame_windows(eps: Episodes, window_frames: int, run_frames: int = 0) -> list[FrameWindow]:
    """Consecutive windows of `window_frames` env frames (the learner's count when an episode
    arrived), up to the last full one: a curve against frames, as papers draw them. A window is
    full once the run's frames reach its end: the last episode's, or `run_frames` (the learner's
    last count, `run_env_frames`) where higher, so that a run stopped at FRAMES=600000 a few
    episodes short of it still gets its last window."""
    if window_frames <= 0:
        raise ValueError(f"window_frames must be > 0, got {window_frames}")
    last = max(int(eps.env_frames.max()) if eps.env_frames.size else 0, run_frames)
    out = []
    for end in range(window_frames, last + 1, window_frames):
        sel = (eps.env_frames > end - window_frames) & (eps.env_frames <= end)
        n = int(sel.sum())
        prog = eps.progress[sel]
        prog = prog[~np.isnan(prog)]
        out.append(
            FrameWindow(
                end,
                n,
                float(eps.max_x[sel].mean()) if n else None,
                float(eps.flag[sel].mean()) if n else None,
                float(prog.mean()) if prog.size else None,
                float(eps.run_s[sel].max()) if n else None,
            )
        )
    return out


def frame_windows_by_level(
    eps: Episodes, window_frames: int, run_frames: int = 0
) -> dict[str, list[FrameWindow]]:
    """Each level's windows of env frames, all over the run's frames; with several levels, also
    MEAN: their mean per window, each level with episodes in it weighted alike."""
    last = max(int(eps.env_frames.max()) if eps.env_frames.size else 0, run_frames)
    out = {
        lv: frame_windows(_only(eps, eps.level == lv), window_frames, last) for lv in levels_of(eps)
    }
    if len(out) > 1:
        out[MEAN] = [
            FrameWindow(
                ws[0].end_frames,
                sum(w.episodes for w in ws),
                _mean([w.mean_max_x for w in ws]),
                _mean([w.flag_rate for w in ws]),
                _mean([w.mean_progress for w in ws]),
                max((w.last_s for w in ws if w.last_s is not None), default=None),
            )
            for ws in zip(*out.values(), strict=True)
        ]
    return out


def run_env_frames(metrics: Path) -> int:
    """The learner's last env frame count in RUN/metrics.jsonl (0 if it has none)."""
    if not metrics.exists():
        return 0
    with metrics.open("rb") as f:
        f.seek(max(0, f.seek(0, 2) - 65536))
        lines = f.read().decode(errors="replace").splitlines()
    for line in reversed(lines):
        try:
            return int(json.loads(line)["env_frames"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def windows_by_level(
    eps: Episodes, window_s: float, until_s: float | None = None
) -> dict[str, list[Window]]:
    """Each level's windows, all over the run's span; with several levels, also MEAN: their mean
    per window, each level with episodes in it weighted alike."""
    horizon = _horizon(eps, until_s)
    out = {lv: _windows(_only(eps, eps.level == lv), window_s, horizon) for lv in levels_of(eps)}
    if len(out) > 1:
        out[MEAN] = [_mean_window(ws) for ws in zip(*out.values(), strict=True)]
    return out


def _mean_window(ws: tuple[Window, ...]) -> Window:
    """The mean of one window over levels: each level with episodes counts alike."""
    return Window(
        ws[0].end_s,
        max(w.env_frames for w in ws),
        sum(w.episodes for w in ws),
        _mean([w.mean_max_x for w in ws]),
        None,  # a median of medians would mean nothing
        _mean([w.flag_rate for w in ws]),
        _mean([w.mean_progress for w in ws]),
    )


def _mean(values: list[float | None]) -> float | None:
    """The mean of the values known (a level with episodes, of known length); None if none is."""
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def level_rows(eps: Episodes, window_s: float, last: int = 50) -> list[LevelRow]:
    """A row per level: episodes, the newest `last` episodes' progress, flag rate and max x, the
    best window's progress, the furthest x."""
    out = []
    horizon = _horizon(eps, None)
    for lv in levels_of(eps):
        mine = _only(eps, eps.level == lv)
        newest = np.argsort(mine.time, kind="stable")[-last:]
        prog = mine.progress[newest]
        best = [w.mean_progress for w in _windows(mine, window_s, horizon)]
        best = [b for b in best if b is not None]
        n = len(mine.time)
        out.append(
            LevelRow(
                lv,
                n,
                len(newest),
                None if np.isnan(prog).any() or not n else float(prog.mean()),
                float(mine.flag[newest].mean()) if n else None,
                float(mine.max_x[newest].mean()) if n else None,
                max(best) if best else None,
                float(mine.max_x.max()) if n else None,
                end_x(tuple(int(x) for x in mine.max_x[newest][~mine.flag[newest]])),
            )
        )
    return out
