"""REPORT.md's learning curves (scripts/report.py): the windows of training episodes from
RUN/episodes.jsonl (`scripts.episode_windows`), drawn (`scripts.curve_plots`) and tabled beside
the references of the runs' setting (`scripts.reference`): the curve per 2-minute window (curve.png,
with the runs of --compare beside), then, level by level, progress and flag rate per window with
their mean over levels (levels.png), a table of each level's newest episodes with each level's
random floor, and with --compare every run level by level (levels-compare.png)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.rundir import RunDir
from scripts import curve_plots, episode_windows, learning_curve, reference

WINDOW_S = 120.0  # the learning curves' windows of training episodes
LAST_EPISODES = (
    50  # each level's newest episodes behind its progress and flag rate (learner.levels.WINDOW)
)


def _num(v: float | None, fmt: str = "{:,.1f}") -> str:
    return "–" if v is None else fmt.format(v)


def curves(run_dir: Path, compare: list[Path], out: Path) -> str:
    """The learning curve per 2-minute window from RUN/episodes.jsonl (and the runs compared),
    beside Sample Factory's on 1-1 and a random policy's floor in the runs' setting, each named
    with the setting it was measured on, then progress and flag rate by level; empty if the run
    has no episode log."""
    episodes, settings = {}, {}
    for run in [run_dir, *compare]:
        path = RunDir(run).episodes
        if path.is_file():
            try:
                episodes[run.name] = episode_windows.read_episodes(path)
            except ValueError:
                continue
            settings[run.name] = reference.setting_of_run(run)
    if not episodes:
        return ""
    by_run = {name: episode_windows.windows(eps, WINDOW_S) for name, eps in episodes.items()}
    levels = {lv for eps in episodes.values() for lv in eps.level.tolist()}
    refs = reference.references(levels, list(settings.values()))
    curve_plots.plot_curves(by_run, out / "curve.png", refs)
    tables = "\n\n".join(learning_curve.table(name, ws) for name, ws in by_run.items())
    title = "Learning curve (2-minute windows of training episodes)"
    text = f"\n## {title}\n\n![{title}](curve.png)\n\n{tables}\n"
    floors = learning_curve.floor_lines(refs)
    text += f"\n{floors}\n" if floors else ""
    return text + _levels(run_dir.name, episodes, settings, out)


def _levels(
    name: str,
    episodes: dict[str, episode_windows.Episodes],
    settings: dict[str, str | None],
    out: Path,
) -> str:
    """Progress and flag rate by level: the run's curves (levels.png) and table, and, with runs
    to compare, every run level by level (levels-compare.png); each beside the random floors of
    the run's setting."""
    if name not in episodes:
        return ""
    mine = reference.settings_drawn([settings[name]])
    by_level = {n: episode_windows.windows_by_level(e, WINDOW_S) for n, e in episodes.items()}
    curve_plots.plot_levels(by_level[name], out / "levels.png", f"{name}: by level", mine)
    title = "Progress and flag rate by level (2-minute windows)"
    lines = ["", f"## {title}", "", f"![{title}](levels.png)", ""]
    rows = episode_windows.level_rows(episodes[name], WINDOW_S, LAST_EPISODES)
    lines += level_table(rows, mine)
    if len(episodes) > 1 and any(by_level.values()):  # before any episode ends, no level has one
        drawn = reference.settings_drawn(list(settings.values()))
        curve_plots.plot_runs_by_level(by_level, out / "levels-compare.png", drawn)
        compared = "The runs level by level"
        lines += ["", f"### {compared}", "", f"![{compared}](levels-compare.png)"]
    return "\n".join(lines) + "\n"


def level_table(rows: list[episode_windows.LevelRow], settings: tuple[str, ...] = ()) -> list[str]:
    """REPORT.md's table of levels: progress and flag rate over each level's newest episodes,
    the best 2-minute window's progress, the furthest x, where most of the newest flagless
    episodes ended (common.levels.end_x), and a random policy's floor in each of
    `settings` (its progress; its mean max x where the progress column shows max x); with several
    levels, their mean (each level alike; a level of unknown length, whose progress column shows
    its mean max x, is left out of the mean progress)."""
    pct = "{:.1%}"
    floor_heads = "".join(f" random policy, {s} |" for s in settings)
    lines = [
        f"| level | episodes | progress, newest {LAST_EPISODES} | flag rate, newest "
        f"{LAST_EPISODES} | best window progress | furthest x | most end at x |{floor_heads}",
        "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(settings),
    ]
    for r in rows:
        prog = _num(r.progress, pct) if r.progress is not None else f"x {_num(r.mean_max_x)}"
        floors = "".join(f" {_floor_cell(r, s)} |" for s in settings)
        lines.append(
            f"| {r.level} | {r.episodes:,} | {prog} | {_num(r.flag_rate, pct)} "
            f"| {_num(r.best_progress, pct)} | {_num(r.furthest_x, '{:,.0f}')} "
            f"| {_num(r.end_x, '{:,.0f}')} |{floors}"
        )
    if len(rows) > 1:
        prog = [r.progress for r in rows if r.progress is not None]
        flags = [r.flag_rate for r in rows if r.flag_rate is not None]
        floors = "".join(f" {_mean_floor_cell(rows, s)} |" for s in settings)
        lines.append(
            f"| mean (levels alike) | {sum(r.episodes for r in rows):,} "
            f"| {_num(float(np.mean(prog)) if prog else None, pct)} "
            f"| {_num(float(np.mean(flags)) if flags else None, pct)} | | | |{floors}"
        )
    return lines


def _floor_cell(row: episode_windows.LevelRow, setting: str) -> str:
    """A level's random floor, in the unit of its progress column."""
    f = reference.floor(row.level, setting)
    if f is None:
        return "–"
    if row.progress is None or f.mean_progress is None:
        return f"x {_num(f.mean_max_x, '{:,.0f}')}"
    return _num(f.mean_progress, "{:.1%}")


def _mean_floor_cell(rows: list[episode_windows.LevelRow], setting: str) -> str:
    """The mean of the floors of the levels in the mean progress, where each has one."""
    fs = [reference.floor(r.level, setting) for r in rows if r.progress is not None]
    if not fs or any(f is None or f.mean_progress is None for f in fs):
        return "–"
    return _num(float(np.mean([f.mean_progress for f in fs])), "{:.1%}")
