"""Learning curves from RUN/episodes.jsonl: mean max x and flag rate per window of wall time.

    python scripts/learning_curve.py RUN [RUN ...] [--window-s 120] [--level 1-1]

Each training episode the actors report is one line of RUN/episodes.jsonl, with its arrival time
and the learner's env frames then; the learner's start is a `{"event": "start"}` line. A window
holds the episodes that *ended* in it, counted from the first start, so a curve means the same
however fast the run goes. Prints one table per run (and, for several runs, their windows side by
side); `scripts/report.py` draws the same windows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np


class Window(NamedTuple):
    end_s: float  # seconds from the learner's start to the window's end
    env_frames: int  # the learner's env frames at the last episode of the window (0 if none)
    episodes: int
    mean_max_x: float | None
    median_max_x: float | None
    flag_rate: float | None


class Episodes(NamedTuple):
    start: float  # unix time of the learner's first start
    time: np.ndarray  # [E] unix time each episode arrived
    env_frames: np.ndarray  # [E]
    max_x: np.ndarray  # [E]
    flag: np.ndarray  # [E] bool
    malformed: int  # lines that were not JSON objects of the expected shape


def read_episodes(path: Path, level: str | None = None) -> Episodes:
    """Parse RUN/episodes.jsonl, skipping (and counting) lines that do not parse."""
    start = None
    rows: list[tuple[float, int, int, bool]] = []
    malformed = 0
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
            if d.get("event") == "start":
                start = float(d["time"]) if start is None else start
                continue
            if level and d.get("level") != level:
                continue
            rows.append((float(d["time"]), int(d["env_frames"]), int(d["max_x"]), bool(d["flag"])))
        except (ValueError, KeyError, TypeError, AttributeError):
            malformed += 1
    if not rows and start is None:
        raise ValueError(f"{path} has no episodes and no start line")
    arr = np.array(rows, dtype=np.float64).reshape(-1, 4)
    first = start if start is not None else float(arr[:, 0].min())
    return Episodes(
        first, arr[:, 0], arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 3] > 0, malformed
    )


def windows(eps: Episodes, window_s: float, until_s: float | None = None) -> list[Window]:
    """Consecutive windows of `window_s` from the start; the last partial window is left out."""
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    rel = eps.time - eps.start  # [E]
    horizon = float(rel.max()) if rel.size else 0.0
    if until_s is not None:
        horizon = min(horizon, until_s)
    out = []
    k = 1
    while k * window_s <= horizon + 1e-9:
        lo, hi = (k - 1) * window_s, k * window_s
        sel = (rel > lo) & (rel <= hi)
        n = int(sel.sum())
        out.append(
            Window(
                hi,
                int(eps.env_frames[sel].max()) if n else 0,
                n,
                float(eps.max_x[sel].mean()) if n else None,
                float(np.median(eps.max_x[sel])) if n else None,
                float(eps.flag[sel].mean()) if n else None,
            )
        )
        k += 1
    return out


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(name: str, ws: list[Window]) -> str:
    lines = [
        f"## {name}",
        "| minute | env frames | episodes | mean max x | median max x | flag rate |",
        "|---|---|---|---|---|---|",
    ]
    for w in ws:
        lines.append(
            f"| {w.end_s / 60:g} | {w.env_frames:,} | {w.episodes} | {_fmt(w.mean_max_x, ',.0f')} "
            f"| {_fmt(w.median_max_x, ',.0f')} | {_fmt(w.flag_rate, '.1%')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories with episodes.jsonl")
    p.add_argument("--window-s", type=float, default=120.0, help="window length in seconds")
    p.add_argument("--until-s", type=float, default=None, help="ignore episodes after this")
    p.add_argument("--level", default=None, help="only this level's episodes (default: all)")
    args = p.parse_args(argv)
    for run in args.runs:
        path = run / "episodes.jsonl"
        if not path.exists():
            print(
                f"error: {path} not found; a learner writes it as episodes arrive", file=sys.stderr
            )
            return 2
        eps = read_episodes(path, args.level)
        print(table(str(run), windows(eps, args.window_s, args.until_s)))
        if eps.malformed:
            print(f"({eps.malformed} malformed lines skipped)")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
