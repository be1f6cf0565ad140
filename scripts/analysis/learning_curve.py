"""Learning curves from RUN/episodes.jsonl: mean max x and flag rate per window of wall time.

    python -m scripts.analysis.learning_curve RUN [RUN ...] [--window-s 120] [--level 1-1]

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

from common.rundir import RunDir


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


# Sample Factory 2.1.1 APPO on a 2-core machine like the project's dev machines, same env stack
# (skip 4, gray 84x84, stack 4, SIMPLE_MOVEMENT, game reward x 0.1, gamma 0.9): mean max x per
# 2-minute window over its first 10 minutes, and the env frames at each window's end (466 k at 10
# minutes, ~773 frames/s). A peer's measured curve, drawn for reference.
SAMPLE_FACTORY_1_1 = (
    (120.0, 93_000, 800.0),
    (240.0, 186_000, 870.0),
    (360.0, 280_000, 1_008.0),
    (480.0, 373_000, 1_172.0),
    (600.0, 466_000, 1_415.0),
)
# A uniformly random policy on 1-1 with the 100-step no-progress cutoff (200 episodes).
RANDOM_1_1 = 637.0


def plot_curves(runs: dict[str, list[Window]], path: Path, reference: bool = True) -> None:
    """Mean max x and flag rate per window against env frames (left) and minutes (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharey="row")
    for name, ws in runs.items():
        ws = [w for w in ws if w.mean_max_x is not None]
        frames = [w.env_frames / 1e6 for w in ws]
        minutes = [w.end_s / 60 for w in ws]
        for col, xs in enumerate((frames, minutes)):
            axes[0, col].plot(xs, [w.mean_max_x for w in ws], marker="o", label=name)
            axes[1, col].plot(xs, [100 * (w.flag_rate or 0.0) for w in ws], marker="o", label=name)
    if reference:
        sf = SAMPLE_FACTORY_1_1
        axes[0, 0].plot(
            [f / 1e6 for _, f, _ in sf], [x for *_, x in sf], "k--", label="Sample Factory"
        )
        axes[0, 1].plot(
            [t / 60 for t, *_ in sf], [x for *_, x in sf], "k--", label="Sample Factory"
        )
        for col in (0, 1):
            axes[0, col].axhline(RANDOM_1_1, color="gray", linestyle=":", label="random policy")
    axes[0, 0].set_ylabel("mean max x per window")
    axes[1, 0].set_ylabel("flag rate per window (%)")
    axes[1, 0].set_xlabel("env frames (millions)")
    axes[1, 1].set_xlabel("minutes since the learner started")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
    p.add_argument("--plot", type=Path, default=None, help="also draw the curves into this PNG")
    p.add_argument(
        "--no-reference", action="store_true", help="leave out Sample Factory and random on 1-1"
    )
    args = p.parse_args(argv)
    curves: dict[str, list[Window]] = {}
    for run in args.runs:
        path = RunDir(run).episodes
        if not path.exists():
            print(
                f"error: {path} not found; a learner writes it as episodes arrive", file=sys.stderr
            )
            return 2
        eps = read_episodes(path, args.level)
        curves[run.name] = windows(eps, args.window_s, args.until_s)
        print(table(str(run), curves[run.name]))
        if eps.malformed:
            print(f"({eps.malformed} malformed lines skipped)")
        print()
    if args.plot:
        plot_curves(curves, args.plot, reference=not args.no_reference)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
