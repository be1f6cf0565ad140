"""The learning curves drawn: `scripts.learning_curve --plot` and `make report` (scripts/report.py).

Each figure draws the windows of `scripts.episode_windows` beside the references that fit them
(`scripts.reference`): Sample Factory's APPO on 1-1 (measured unperturbed) where every curve is of
1-1, and a uniformly random policy's floor on the level in the runs' setting, unperturbed or
perturbed (both where a run's setting is unknown); each legend says which setting a reference was
measured on. Per level, each level's floor is drawn in its row, or beside its curve in its colour.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.levels import ALL_STAGES, level_lengths
from scripts.episode_windows import MEAN, FrameWindow, Window
from scripts.reference import (
    NO_REFERENCES,
    PERTURBED,
    SAMPLE_FACTORY_1_1,
    SAMPLE_FACTORY_1_1_BY_FRAMES,
    Floor,
    References,
    describe,
    floor,
)

FLOOR_STYLE = {"unperturbed": ":", PERTURBED: "-."}  # a floor's line, by its setting
MAX_LEVEL_FLOORS = 8  # more levels on one panel than this: only the mean's floor is drawn


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


def _title(fig, refs: References) -> None:
    """What the curves are of, where every run shares one level and one setting."""
    if refs.level and len(refs.settings) == 1:
        fig.suptitle(
            f"{refs.level}: training episodes from the level's start, {describe(refs.settings[0])}",
            fontsize=10,
        )


def _floor_line(ax, f: Floor, y: float, color: str = "gray", label: str | None = None) -> None:
    ax.axhline(y, color=color, linestyle=FLOOR_STYLE.get(f.setting, ":"), lw=1.2, label=label)


def _max_x_floors(axes, refs: References) -> None:
    """Each random floor of `refs` as a line of mean max x on each of `axes`."""
    for f in refs.floors():
        for i, ax in enumerate(axes):
            _floor_line(ax, f, f.mean_max_x, label=f.label if i == 0 else None)


def plot_curves(
    runs: dict[str, list[Window]], path: Path, refs: References = NO_REFERENCES
) -> None:
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
    if refs.sample_factory:
        sf = SAMPLE_FACTORY_1_1
        axes[0, 0].plot([f / 1e6 for _, f, _ in sf.points], [x for *_, x in sf.points], "k--")
        axes[0, 1].plot(
            [t / 60 for t, *_ in sf.points], [x for *_, x in sf.points], "k--", label=sf.name
        )
    _max_x_floors([axes[0, 1], axes[0, 0]], refs)
    _title(fig, refs)
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


def _progress_floors(levels: list[str], settings: tuple[str, ...]) -> dict[str, list[Floor]]:
    """Each level's floors in `settings` on the progress axis (levels of known length), and
    MEAN's: the mean over the levels, where every one of them has a floor in the setting."""
    known = [lv for lv in levels if lv != MEAN and lv in level_lengths()]
    out: dict[str, list[Floor]] = {lv: [] for lv in levels}
    for s in settings:
        fs = [floor(lv, s) for lv in known]
        for lv, f in zip(known, fs, strict=True):
            if f is not None and f.mean_progress is not None:
                out[lv].append(f)
        if MEAN in levels and known and all(f is not None for f in fs):
            mean = float(np.mean([f.mean_progress for f in fs]))
            cmd = "the mean of the levels' floors"
            out[MEAN].append(Floor(MEAN, s, 0, float("nan"), mean, 0.0, cmd))
    return out


def plot_levels(
    by_level: dict[str, list[Window]], path: Path, title: str = "", settings: tuple[str, ...] = ()
) -> None:
    """One run: a curve per level and their mean (thick, black) of progress (top; a level of
    unknown length by its mean max x, on the right axis) and flag rate (bottom), against env
    frames (left) and minutes (right). Windows without an episode of the level are left out.
    The random floors of `settings`: each level's in its colour (up to MAX_LEVEL_FLOORS levels),
    the mean's in black."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharey="row")
    right = [None, None]  # twin axes for max x, made when a level of unknown length has one
    floors = _progress_floors(list(by_level), settings)
    few = len(by_level) <= MAX_LEVEL_FLOORS + 1
    labelled: set[str] = set()
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
                (line,) = axes[0, col].plot(
                    xs, [np.nan if y is None else 100 * y for y in ys], label=level, **style
                )
                for f in floors.get(level, []) if (mean or few) else []:
                    label = None
                    if col == 1 and f.setting not in labelled:
                        label = f"{f.label} (per level)"
                        labelled.add(f.setting)
                    _floor_line(axes[0, col], f, 100 * f.mean_progress, line.get_color(), label)
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


def plot_runs_by_level(
    runs: dict[str, dict[str, list[Window]]], path: Path, settings: tuple[str, ...] = ()
) -> None:
    """Several runs level by level: a row per level (then the mean over levels, for runs of
    several), a curve per run, of progress and flag rate against env frames and minutes; each
    row's random floors of `settings` (gray)."""
    plt = _pyplot()
    stages = {lv: i for i, lv in enumerate(ALL_STAGES)}
    levels = sorted(
        {lv for ls in runs.values() for lv in ls},
        key=lambda lv: (lv == MEAN, stages.get(lv, len(stages)), lv),
    )
    floors = _progress_floors(levels, settings)
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
        row_floors = floors.get(level, []) if known else [floor(level, s) for s in settings]
        for f in row_floors:
            if f is None:
                continue
            y = 100 * f.mean_progress if known else f.mean_max_x
            for c in (0, 1):
                _floor_line(axes[r, c], f, y, label=f.label if c == 0 else None)
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


def plot_frames(
    runs: dict[str, list[FrameWindow]], path: Path, refs: References = NO_REFERENCES
) -> None:
    """Mean max x and flag rate per window of env frames: each run thin (a legend entry each, by
    its label), their mean bold where every run has the window, Sample Factory's 1-1 curve dashed
    and the random floors dotted where `refs` has them (the README's curve)."""
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
            ax.plot(xs, means, "C3", lw=2.5, marker="o", label=f"mean of {len(runs)} runs")
        if refs.sample_factory:
            sf = SAMPLE_FACTORY_1_1_BY_FRAMES
            pts = sf.points
            ys = [x for _, x, _ in pts] if field == "mean_max_x" else [100 * f for *_, f in pts]
            ax.plot([f / 1e6 for f, *_ in pts], ys, "k--", label=sf.name)
        if field == "mean_max_x":
            _max_x_floors([ax], refs)
        ax.set_xlabel("env frames (millions)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()  # under both panels, off the curves
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
    _title(fig, refs)
    rows = -(-len(labels) // 5)
    fig.tight_layout(rect=(0, 0.07 * rows, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
