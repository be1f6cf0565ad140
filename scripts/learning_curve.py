"""Learning curves from RUN/episodes.jsonl: mean max x, progress and flag rate per window of wall
time, for the run and for each of its levels.

    python -m scripts.learning_curve RUN [RUN ...] [--window-s 120] [--level 1-1]
                                              [--by-level] [--plot FILE.png]
    python -m scripts.learning_curve RUN [RUN ...] --window-frames 200000 [--plot FILE.png]
                                              [--label 'seed 0' --label 'seed 1' ...]

--window-frames prints the curves against env frames instead: mean max x and flag rate per
window of frames, the runs side by side with their mean (seeds of one setting), then each run's
milestones (`scripts.milestones`): the env frames and minutes to its first flag, its first window
with a flag and its first window with at least half its episodes at the flag. A run over several
levels (or any run, with --by-level) also gets a table of progress and flag rate per level and
window, with their mean, and its milestones level by level.

Each training episode the actors report is one line of RUN/episodes.jsonl, with its arrival time
and the learner's env frames then; the learner's start is a `{"event": "start"}` line. A window
holds the episodes that *ended* in it, counted from the first start, so a curve means the same
however fast the run goes; only episodes from the level's start count (never a frontier start's).
Prints one table per run (and, for several runs, their windows side by side); `scripts/report.py`
draws the same windows.

The windows themselves, and each episode's progress (its max x as a share of its level), come
from `scripts.episode_windows`. A run over several levels (or any run, with --by-level)
also gets two tables with a column per level and their mean, each level weighted alike: progress
(a level of unknown length shows its mean max x instead, and stays out of the mean), and flag
rate. With --plot (`scripts.curve_plots`), such runs are drawn level by level, a row of panels
per level, the runs side by side (a 1-1 run beside a World 1 run in the 1-1 row).

References (`scripts.reference`), each named with the env setting it was measured on: Sample
Factory's APPO on 1-1 (unperturbed) beside runs of 1-1, and a random policy's floor on each level
in the runs' setting (RUN/config.json: unperturbed, or perturbed as training is by default; both
where it is unknown); --no-reference leaves them out. Runs are named in columns and legends by
--label, else by "seed N" from RUN/config.json where each run has a seed of its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from common.levels import level_lengths
from common.rundir import RunDir
from scripts import reference
from scripts.curve_plots import plot_curves, plot_frames, plot_runs_by_level
from scripts.episode_windows import (
    MEAN,
    Episodes,
    FrameWindow,
    Window,
    frame_windows,
    frame_windows_by_level,
    of_level,
    read_episodes,
    run_env_frames,
    windows,
    windows_by_level,
)
from scripts.milestones import milestones, milestones_table
from scripts.reference import NO_REFERENCES, SAMPLE_FACTORY_1_1_BY_FRAMES, References


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


def floor_lines(refs: References) -> str:
    """A line per random floor of `refs`: what it is, and the command that measured it."""
    return "\n".join(
        f"{f.label} on {f.level}: mean max x {f.mean_max_x:,.0f}, "
        f"progress {_fmt(f.mean_progress, '.1%')}, flags {f.flag_rate:.0%} "
        f"({f.episodes} episodes: `{f.command}`)"
        for f in refs.floors()
    )


def frames_table(
    runs: dict[str, list[FrameWindow]], window_frames: int, refs: References = NO_REFERENCES
) -> str:
    """Mean max x / flag rate per window of env frames: a column per run, their mean, Sample
    Factory's 1-1 curve where its bins are the same and the runs are of 1-1, then the random
    floors of `refs`."""
    sf = SAMPLE_FACTORY_1_1_BY_FRAMES
    sf_bins = {end: (x, f) for end, x, f in sf.points}
    with_sf = window_frames == 200_000 and refs.sample_factory
    names = list(runs)
    mean_col = len(names) > 1
    head = ["env frames", *names] + (["mean of the runs"] if mean_col else [])
    head += [f"{sf.name} (1-1)"] if with_sf else []
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
        if with_sf:
            cells.append(cell(*sf_bins[end]) if end in sf_bins else "-")
        lines.append(f"| {end:,} | " + " | ".join(cells) + " |")
    text = "mean max x / flag rate per window of env frames\n" + "\n".join(lines)
    floors = floor_lines(refs)
    return text + ("\n" + floors if floors else "")


def _progress_cell(w: Window, known_length: bool) -> str:
    """Progress, or for a level of unknown length its mean max x ("x 1,234")."""
    if known_length:
        return _fmt(w.mean_progress, ".1%")
    return "-" if w.mean_max_x is None else f"x {w.mean_max_x:,.0f}"


def _known_length(levels: list[str]) -> dict[str, bool]:
    """Which of `levels` (MEAN among them) have a progress: a level of known length, the mean."""
    return {lv: lv == MEAN or lv in level_lengths() for lv in levels}


def floor_rows(levels: list[str], settings: tuple[str, ...], digits: int) -> list[list[str]]:
    """Per setting, the random floor's cell of each level: its progress (its mean max x for a
    level of unknown length; "-" unmeasured), and for MEAN the mean over the levels of known
    length, where each has one; each row led by the floor's name."""
    known = _known_length(levels)
    out = []
    for s in settings:
        fs = {lv: reference.floor(lv, s) for lv in levels if lv != MEAN}
        cells = []
        for lv in levels:
            if lv == MEAN:
                ps = [f.mean_progress if f else None for v, f in fs.items() if known[v]]
                full = ps and all(p is not None for p in ps)
                cells.append(_fmt(float(np.mean(ps)) if full else None, f".{digits}%"))
            elif fs[lv] is None:
                cells.append("-")
            elif known[lv]:
                cells.append(_fmt(fs[lv].mean_progress, f".{digits}%"))
            else:
                cells.append(f"x {fs[lv].mean_max_x:,.0f}")
        out.append([f"random policy, {s}", *cells])
    return out


def level_tables(
    name: str, by_level: dict[str, list[Window]], settings: tuple[str, ...] = ()
) -> str:
    """Two tables of one run's windows, a column per level (and the mean): progress (mean max x
    for a level of unknown length), then flag rate; each cell says how many episodes. Under the
    progress, the random floors of `settings`."""
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
        if title == "progress":
            for first, *cells in floor_rows(levels, settings, 1):
                lines.append(f"| {first} | | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def frames_level_table(
    name: str, by_level: dict[str, list[FrameWindow]], settings: tuple[str, ...] = ()
) -> str:
    """One run's windows of env frames, a column per level (and the mean): progress (mean max x
    for a level of unknown length) / flag rate, and how many episodes; then the random floors'
    progress in `settings`."""
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
    for first, *cells in floor_rows(levels, settings, 0):
        lines.append(f"| {first} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _by_level_wanted(eps: Episodes, forced: bool) -> bool:
    return forced or len(set(eps.level.tolist())) > 1


def run_labels(runs: list[Path], given: list[str] | None) -> dict[Path, str]:
    """Each run's name in legends and columns: --label's, else "seed N" from each RUN/config.json
    where every run has a seed of its own, else its directory's name."""
    if given:
        return dict(zip(runs, given, strict=True))
    seeds = [reference.seed_of_run(r) for r in runs]
    if None not in seeds and len(set(seeds)) == len(seeds):
        return {r: f"seed {s}" for r, s in zip(runs, seeds, strict=True)}
    names = [r.name for r in runs]
    return {r: r.name if names.count(r.name) == 1 else str(r) for r in runs}


def _parse(argv: list[str] | None) -> argparse.Namespace:
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
        "--label",
        action="append",
        default=None,
        help="a run's name in legends and columns, once per run in order "
        "(default: 'seed N' from RUN/config.json where the seeds differ, else the run's name)",
    )
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="leave out Sample Factory on 1-1 and the random policy's floors",
    )
    args = p.parse_args(argv)
    if args.window_frames is not None and args.window_frames <= 0:
        p.error(f"--window-frames must be > 0, got {args.window_frames}")
    if args.label is not None and len(args.label) != len(args.runs):
        p.error(
            f"--label must be given once per run: {len(args.runs)} runs, {len(args.label)} labels"
        )
    return args


def _by_frames(args: argparse.Namespace, labels: dict[Path, str]) -> int:
    """--window-frames: the runs' windows of env frames side by side, their milestones, and per
    level for a run of several."""
    by_frames, level_texts, marks = {}, [], {}
    levels: set[str] = set()
    settings = {r: reference.setting_of_run(r) for r in args.runs}
    for r in args.runs:
        eps = read_episodes(RunDir(r).episodes, args.level)
        levels |= set(eps.level.tolist())
        frames = run_env_frames(RunDir(r).metrics)
        ws = frame_windows(eps, args.window_frames, frames)
        by_frames[labels[r]] = ws
        marks[labels[r]] = milestones(eps, ws)
        if _by_level_wanted(eps, args.by_level):
            by_level = frame_windows_by_level(eps, args.window_frames, frames)
            drawn = () if args.no_reference else reference.settings_drawn([settings[r]])
            text = frames_level_table(str(r), by_level, drawn)
            per_level = {
                lv: milestones(eps if lv == MEAN else of_level(eps, lv), level_windows)
                for lv, level_windows in by_level.items()
            }
            level_texts.append(
                text + "\n\n" + milestones_table(per_level, args.window_frames, "level")
            )
    refs = (
        NO_REFERENCES
        if args.no_reference
        else reference.references(levels, list(settings.values()))
    )
    print(frames_table(by_frames, args.window_frames, refs))
    print()
    print(milestones_table(marks, args.window_frames))
    for text in level_texts:
        print()
        print(text)
    if args.plot:
        plot_frames(by_frames, args.plot, refs)
        print(f"wrote {args.plot}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    missing = [str(RunDir(r).episodes) for r in args.runs if not RunDir(r).episodes.exists()]
    if missing:
        print(
            f"error: {', '.join(missing)} not found; a learner writes it as episodes arrive",
            file=sys.stderr,
        )
        return 2
    labels = run_labels(args.runs, args.label)
    if args.window_frames is not None:
        return _by_frames(args, labels)
    curves: dict[str, list[Window]] = {}
    by_level: dict[str, dict[str, list[Window]]] = {}
    levels: set[str] = set()
    settings = {r: reference.setting_of_run(r) for r in args.runs}
    for run in args.runs:
        eps = read_episodes(RunDir(run).episodes, args.level)
        levels |= set(eps.level.tolist())
        name = labels[run]
        curves[name] = windows(eps, args.window_s, args.until_s)
        print(table(str(run), curves[name]))
        if _by_level_wanted(eps, args.by_level):
            by_level[name] = windows_by_level(eps, args.window_s, args.until_s)
            drawn = () if args.no_reference else reference.settings_drawn([settings[run]])
            print()
            print(level_tables(str(run), by_level[name], drawn))
        if eps.malformed:
            print(f"({eps.malformed} malformed lines skipped)")
        print()
    if args.plot:
        drawn = () if args.no_reference else reference.settings_drawn(list(settings.values()))
        if by_level:  # every run level by level, beside the runs of one level
            for run in args.runs:
                if labels[run] not in by_level:
                    eps = read_episodes(RunDir(run).episodes, args.level)
                    by_level[labels[run]] = windows_by_level(eps, args.window_s, args.until_s)
            plot_runs_by_level({name: by_level[name] for name in curves}, args.plot, drawn)
        else:
            refs = reference.References(next(iter(levels)) if len(levels) == 1 else None, drawn)
            plot_curves(curves, args.plot, refs)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
