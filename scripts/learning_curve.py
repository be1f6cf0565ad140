"""Learning curves from RUN/episodes.jsonl: mean max x, progress and flag rate per window of wall
time, for the run and for each of its levels.

    python -m scripts.learning_curve RUN [RUN ...] [--window-s 120] [--level 1-1]
                                              [--by-level] [--plot FILE.png]
    python -m scripts.learning_curve RUN [RUN ...] --window-frames 200000

--window-frames prints the curves against env frames instead: mean max x and flag rate per
window of frames, the runs side by side with their mean (seeds of one setting), beside Sample
Factory's 30-minute 1-1 curve in the same bins; a run over several levels (or any run, with
--by-level) also gets a table of progress and flag rate per level and window, with their mean.

Each training episode the actors report is one line of RUN/episodes.jsonl, with its arrival time
and the learner's env frames then; the learner's start is a `{"event": "start"}` line. A window
holds the episodes that *ended* in it, counted from the first start, so a curve means the same
however fast the run goes. Prints one table per run (and, for several runs, their windows side by
side); `scripts/report.py` draws the same windows.

The windows themselves, and each episode's progress (its max x as a share of its level), come
from `scripts.episode_windows`. A run over several levels (or any run, with --by-level)
also gets two tables with a column per level and their mean, each level weighted alike: progress
(a level of unknown length shows its mean max x instead, and stays out of the mean), and flag
rate. With --plot, such runs are drawn level by level, a row of panels per level, the runs side
by side (a 1-1 run beside a World 1 run in the 1-1 row).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from common.levels import ALL_STAGES, level_lengths
from common.rundir import RunDir
from scripts.episode_windows import (
    MEAN,
    Episodes,
    FrameWindow,
    Window,
    frame_windows,
    frame_windows_by_level,
    read_episodes,
    run_env_frames,
    windows,
    windows_by_level,
)

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
# The same harness for 30 minutes (1.04 M frames at 575 frames/s): mean max x and flag rate per
# 200 k env frames, (bin end, mean max x, flag rate).
SAMPLE_FACTORY_1_1_BY_FRAMES = (
    (200_000, 857.0, 0.01),
    (400_000, 1_193.0, 0.02),
    (600_000, 1_880.0, 0.14),
    (800_000, 2_130.0, 0.34),
    (1_000_000, 2_387.0, 0.49),
)
# A uniformly random policy on 1-1 with the 100-step no-progress cutoff (200 episodes).
RANDOM_1_1 = 637.0


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: never look for a display
    import matplotlib.pyplot as plt

    return plt


def _label(axes: np.ndarray, top: str) -> None:
    """The 2x2 grid's labels: `top` over the flag rate; frames, then minutes, along the bottom."""
    axes[0, 0].set_ylabel(top)
    axes[1, 0].set_ylabel("flag rate per window (%)")
    axes[1, 0].set_xlabel("env frames (millions)")
    axes[1, 1].set_xlabel("minutes since the learner started")
    for ax in axes.flat:
        ax.grid(alpha=0.3)


def plot_curves(runs: dict[str, list[Window]], path: Path, reference: bool = True) -> None:
    """Mean max x and flag rate per window against env frames (left) and minutes (right)."""
    plt = _pyplot()
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
    _label(axes, "mean max x per window")
    axes[0, 1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _xs(ws: list[Window]) -> tuple[list[float], list[float]]:
    """Env frames (millions) and minutes at each window's end."""
    return [w.env_frames / 1e6 for w in ws], [w.end_s / 60 for w in ws]


def _from_zero(axes) -> None:
    """Shares and flag rates from 0, and a flat 0% curve at the bottom, not in the middle."""
    for ax in axes.flat:
        bottom, top = ax.get_ylim()
        ax.set_ylim(0, max(5.0, top))


def plot_levels(by_level: dict[str, list[Window]], path: Path, title: str = "") -> None:
    """One run: a curve per level and their mean (thick, black) of progress (top; a level of
    unknown length by its mean max x, on the right axis) and flag rate (bottom), against env
    frames (left) and minutes (right). Windows without an episode of the level are left out."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharey="row")
    right = [None, None]  # twin axes for max x, made when a level of unknown length has one
    for level, ws in by_level.items():
        ws = [w for w in ws if w.episodes and w.env_frames]
        mean = level == MEAN
        style = (
            {"color": "black", "linewidth": 2.5}
            if mean
            else {"marker": "." if len(ws) < 60 else None}
        )
        known = mean or level in level_lengths()
        for col, xs in enumerate(_xs(ws)):
            if known:
                ys = [w.mean_progress for w in ws]
                axes[0, col].plot(
                    xs, [np.nan if y is None else 100 * y for y in ys], label=level, **style
                )
            else:
                if right[col] is None:
                    right[col] = axes[0, col].twinx()
                    right[col].set_ylabel("mean max x (levels of unknown length)")
                right[col].plot(
                    xs, [w.mean_max_x for w in ws], linestyle="--", label=f"{level} (x)"
                )
            axes[1, col].plot(xs, [100 * (w.flag_rate or 0.0) for w in ws], label=level, **style)
    _from_zero(axes)
    _label(axes, "progress per window (%)")
    handles, labels = axes[0, 1].get_legend_handles_labels()
    if right[1] is not None:  # levels of unknown length are drawn on the twin axis
        more = right[1].get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:
        axes[0, 1].legend(
            handles, labels, fontsize=8, loc="upper left", ncol=2 if len(by_level) > 8 else 1
        )
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_runs_by_level(runs: dict[str, dict[str, list[Window]]], path: Path) -> None:
    """Several runs level by level: a row per level (then the mean over levels, for runs of
    several), a curve per run, of progress and flag rate against env frames and minutes."""
    plt = _pyplot()
    stages = {lv: i for i, lv in enumerate(ALL_STAGES)}
    levels = sorted(
        {lv for ls in runs.values() for lv in ls},
        key=lambda lv: (lv == MEAN, stages.get(lv, len(stages)), lv),
    )
    fig, axes = plt.subplots(len(levels), 4, figsize=(18, 2.8 * len(levels) + 0.6), squeeze=False)
    for r, level in enumerate(levels):
        known = level == MEAN or level in level_lengths()
        for name, by_level in runs.items():
            ws = [w for w in by_level.get(level, []) if w.episodes and w.env_frames]
            if not ws:
                continue
            frames, minutes = _xs(ws)
            if known:
                ys = [np.nan if w.mean_progress is None else 100 * w.mean_progress for w in ws]
            else:
                ys = [w.mean_max_x for w in ws]
            flags = [100 * (w.flag_rate or 0.0) for w in ws]
            for c, (x, y) in enumerate(
                ((frames, ys), (minutes, ys), (frames, flags), (minutes, flags))
            ):
                axes[r, c].plot(x, y, marker="." if len(ws) < 60 else None, label=name)
        axes[r, 0].set_ylabel(f"{level}\n{'progress (%)' if known else 'mean max x'}")
        axes[r, 2].set_ylabel("flag rate (%)")
    _from_zero(axes)
    for c, what in enumerate(
        (
            "progress vs env frames (M)",
            "progress vs minutes",
            "flag rate vs env frames (M)",
            "flag rate vs minutes",
        )
    ):
        axes[0, c].set_title(what, fontsize=10)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8, loc="upper left")
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


def frames_table(runs: dict[str, list[FrameWindow]], window_frames: int) -> str:
    """Mean max x / flag rate per window of env frames: a column per run, their mean, and Sample
    Factory's 1-1 curve where its bins are the same."""
    reference = {end: (x, f) for end, x, f in SAMPLE_FACTORY_1_1_BY_FRAMES}
    names = list(runs)
    mean_col = len(names) > 1
    head = ["env frames", *names] + (["mean of the runs"] if mean_col else [])
    head += ["Sample Factory 1-1"] if window_frames == 200_000 else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(x: float | None, f: float | None) -> str:
        return "-" if x is None else f"{x:,.0f} / {f:.0%}"

    rows = max((len(ws) for ws in runs.values()), default=0)
    for i in range(rows):
        end = (i + 1) * window_frames
        ws = [runs[n][i] if i < len(runs[n]) else None for n in names]
        cells = [cell(w.mean_max_x, w.flag_rate) if w else "-" for w in ws]
        if mean_col:  # only where every run has episodes in the window
            full = [w for w in ws if w is not None and w.mean_max_x is not None]
            if len(full) == len(names):
                cells.append(
                    cell(
                        np.mean([w.mean_max_x for w in full]), np.mean([w.flag_rate for w in full])
                    )
                )
            else:
                cells.append("-")
        if window_frames == 200_000:
            cells.append(cell(*reference[end]) if end in reference else "-")
        lines.append(f"| {end:,} | " + " | ".join(cells) + " |")
    return "mean max x / flag rate per window of env frames\n" + "\n".join(lines)


def plot_frames(runs: dict[str, list[FrameWindow]], path: Path, reference: bool = True) -> None:
    """Mean max x and flag rate per window of env frames: each run thin, their mean bold where
    every run has the window, Sample Factory's 1-1 curve dashed (the README's curve)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    series = (("mean_max_x", 1.0, "mean max x"), ("flag_rate", 100.0, "flag rate (%)"))
    for ax, (field, scale, label) in zip(axes, series, strict=True):
        for name, ws in runs.items():
            ws = [w for w in ws if w.mean_max_x is not None]
            xs = [w.end_frames / 1e6 for w in ws]
            ax.plot(xs, [scale * getattr(w, field) for w in ws], alpha=0.45, lw=1, label=name)
        rows = min((len(ws) for ws in runs.values()), default=0)
        full = [i for i in range(rows) if all(ws[i].mean_max_x is not None for ws in runs.values())]
        if len(runs) > 1 and full:
            means = [np.mean([scale * getattr(ws[i], field) for ws in runs.values()]) for i in full]
            xs = [next(iter(runs.values()))[i].end_frames / 1e6 for i in full]
            ax.plot(xs, means, "C3", lw=2.5, marker="o", label=f"mean of {len(runs)} seeds")
        if reference:
            sf = SAMPLE_FACTORY_1_1_BY_FRAMES
            ys = [x for _, x, _ in sf] if field == "mean_max_x" else [100 * f for *_, f in sf]
            ax.plot([f / 1e6 for f, *_ in sf], ys, "k--", label="Sample Factory")
            if field == "mean_max_x":
                ax.axhline(RANDOM_1_1, color="gray", linestyle=":", label="random policy")
        ax.set_xlabel("env frames (millions)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _progress_cell(w: Window, known_length: bool) -> str:
    """Progress, or for a level of unknown length its mean max x ("x 1,234")."""
    if known_length:
        return _fmt(w.mean_progress, ".1%")
    return "-" if w.mean_max_x is None else f"x {w.mean_max_x:,.0f}"


def _known_length(levels: list[str]) -> dict[str, bool]:
    """Which of `levels` (MEAN among them) have a progress: a level of known length, the mean."""
    return {lv: lv == MEAN or lv in level_lengths() for lv in levels}


def level_tables(name: str, by_level: dict[str, list[Window]]) -> str:
    """Two tables of one run's windows, a column per level (and the mean): progress (mean max x
    for a level of unknown length), then flag rate; each cell says how many episodes."""
    levels = list(by_level)
    known = _known_length(levels)
    head = "| minute | env frames | " + " | ".join(levels) + " |"
    rule = "|---|---|" + "---|" * len(levels)
    out = []
    for title, cell in (
        ("progress", lambda lv, w: _progress_cell(w, known[lv])),
        ("flag rate", lambda lv, w: _fmt(w.flag_rate, ".1%")),
    ):
        lines = [f"## {name}: {title} by level (episodes)", head, rule]
        for ws in zip(*by_level.values(), strict=True):
            frames = max(w.env_frames for w in ws)
            cells = [f"{cell(lv, w)} ({w.episodes})" for lv, w in zip(levels, ws, strict=True)]
            lines.append(f"| {ws[0].end_s / 60:g} | {frames:,} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def frames_level_table(name: str, by_level: dict[str, list[FrameWindow]]) -> str:
    """One run's windows of env frames, a column per level (and the mean): progress (mean max x
    for a level of unknown length) / flag rate, and how many episodes."""
    levels = list(by_level)
    known = _known_length(levels)

    def cell(lv: str, w: FrameWindow) -> str:
        if not w.episodes:
            return "-"
        head = _fmt(w.mean_progress, ".0%") if known[lv] else f"x {w.mean_max_x:,.0f}"
        return f"{head} / {_fmt(w.flag_rate, '.0%')} ({w.episodes})"

    lines = [
        f"## {name}: progress / flag rate by level (episodes)",
        "| env frames | " + " | ".join(levels) + " |",
        "|---|" + "---|" * len(levels),
    ]
    for ws in zip(*by_level.values(), strict=True):
        cells = [cell(lv, w) for lv, w in zip(levels, ws, strict=True)]
        lines.append(f"| {ws[0].end_frames:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _by_level_wanted(eps: Episodes, forced: bool) -> bool:
    return forced or len(set(eps.level.tolist())) > 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories with episodes.jsonl")
    p.add_argument("--window-s", type=float, default=120.0, help="window length in seconds")
    p.add_argument("--until-s", type=float, default=None, help="ignore episodes after this")
    p.add_argument(
        "--window-frames",
        type=int,
        default=None,
        help="print the runs against env frames in windows of this many instead",
    )
    p.add_argument("--level", default=None, help="only this level's episodes (default: all)")
    p.add_argument(
        "--by-level",
        action="store_true",
        help="per-level tables and plots (automatic for a run of several levels)",
    )
    p.add_argument("--plot", type=Path, default=None, help="also draw the curves into this PNG")
    p.add_argument(
        "--no-reference", action="store_true", help="leave out Sample Factory and random on 1-1"
    )
    args = p.parse_args(argv)
    if args.window_frames is not None:
        if args.window_frames <= 0:
            p.error(f"--window-frames must be > 0, got {args.window_frames}")
        missing = [str(RunDir(r).episodes) for r in args.runs if not RunDir(r).episodes.exists()]
        if missing:
            print(f"error: {', '.join(missing)} not found", file=sys.stderr)
            return 2
        by_frames, tables = {}, []
        for r in args.runs:
            eps = read_episodes(RunDir(r).episodes, args.level)
            frames = run_env_frames(RunDir(r).metrics)
            by_frames[r.name] = frame_windows(eps, args.window_frames, frames)
            if _by_level_wanted(eps, args.by_level):
                by_level = frame_windows_by_level(eps, args.window_frames, frames)
                tables.append(frames_level_table(str(r), by_level))
        print(frames_table(by_frames, args.window_frames))
        for text in tables:
            print()
            print(text)
        if args.plot:
            plot_frames(by_frames, args.plot, reference=not args.no_reference)
            print(f"wrote {args.plot}")
        return 0
    curves: dict[str, list[Window]] = {}
    by_level: dict[str, dict[str, list[Window]]] = {}
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
        if _by_level_wanted(eps, args.by_level):
            by_level[run.name] = windows_by_level(eps, args.window_s, args.until_s)
            print()
            print(level_tables(str(run), by_level[run.name]))
        if eps.malformed:
            print(f"({eps.malformed} malformed lines skipped)")
        print()
    if args.plot:
        if by_level:  # every run level by level, beside the runs of one level
            for run in args.runs:
                if run.name not in by_level:
                    eps = read_episodes(RunDir(run).episodes, args.level)
                    by_level[run.name] = windows_by_level(eps, args.window_s, args.until_s)
            plot_runs_by_level({name: by_level[name] for name in curves}, args.plot)
        else:
            plot_curves(curves, args.plot, reference=not args.no_reference)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
