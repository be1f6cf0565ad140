"""Plots and a one-page summary of a training run: `make report RUN=runs/x`.

Reads RUN/metrics.jsonl (one row per learner record, see learner/telemetry.py), skipping and
counting lines that are not JSON objects with a numeric `time` and `env_frames`. Writes to
RUN/report/: one PNG per figure, each plotted against env frames (left) and wall-clock hours since
the first row (right), and REPORT.md, which embeds them. Episode figures (`mean_max_x`,
`mean_return`, `flag_rate`) are null until the first episode ends; those points are left out.
Then the best policy the eval actor kept (RUN/eval/best-policy.pt: its version, score and the
figures behind it; what `make eval` plays by default) and the last `make eval` (RUN/eval/
summary.json: which file it played, then its figures per setting and policy, perturbed first).

From RUN/episodes.jsonl (scripts/episode_windows.py), when there is one (scripts/report_curves.py):
the learning curve per 2-minute window (curve.png, with the runs of --compare beside), then, level
by level, progress (max x as a share of the level; mean max x for a level of unknown length) and
flag rate per window with their mean over levels, each level alike (levels.png), a table of each
level's newest episodes, and with --compare every run level by level (levels-compare.png); each
beside a random policy's floor in the run's setting, unperturbed or perturbed, and on 1-1 Sample
Factory's curve (unperturbed), every one named with the setting it was measured on."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only: never look for a display
import matplotlib.pyplot as plt
import numpy as np

from actor.best import read_best
from common.rundir import RunDir
from scripts import episode_windows, report_curves


class Figure(NamedTuple):
    name: str  # file stem: RUN/report/<name>.png
    title: str
    panels: tuple[tuple[str, tuple[str, ...]], ...]  # (y label, metric keys) per row of panels


FIGURES = (
    Figure("max_x", "Mean max x position", (("x position", ("mean_max_x",)),)),
    Figure("return", "Mean episode return", (("game return", ("mean_return",)),)),
    Figure("flag_rate", "Flag rate", (("share of episodes", ("flag_rate",)),)),
    Figure("throughput", "Agent steps per second", (("agent steps / s", ("agent_steps_per_s",)),)),
    Figure(
        "losses",
        "Losses and entropy",
        (
            ("loss", ("total_loss", "pg_loss", "baseline_loss")),
            ("policy entropy (nats)", ("entropy",)),
        ),
    ),
)


class MetricsLog(NamedTuple):
    rows: list[dict[str, Any]]
    malformed: int  # lines skipped: not JSON, not an object, or no numeric time / env_frames


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def parse_metrics(lines: list[str]) -> MetricsLog:
    rows, malformed = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            malformed += 1
            continue
        if not isinstance(row, dict) or not all(
            _is_number(row.get(k)) for k in ("time", "env_frames")
        ):
            malformed += 1
            continue
        rows.append(row)
    return MetricsLog(rows, malformed)


def column(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    """[N] float64, NaN where a row lacks the key or holds null."""
    return np.array([float(r[key]) if _is_number(r.get(key)) else np.nan for r in rows])


def _last(values: np.ndarray) -> float | None:
    ok = values[~np.isnan(values)]
    return float(ok[-1]) if ok.size else None


def _peak(values: np.ndarray) -> float | None:
    ok = values[~np.isnan(values)]
    return float(ok.max()) if ok.size else None


def summarise(
    rows: list[dict[str, Any]], starts: list[float] | None = None, run_s: np.ndarray | None = None
) -> dict[str, Any]:
    """The report's numbers; None where the log never had a value. `starts`: the learner's start
    times (RUN/episodes.jsonl); `run_s` [R]: each row's seconds of the run's own time by them
    (`run_seconds`, computed here if not given); the duration is the run's own time, a resumed
    run's time down left out."""
    t = column(rows, "time")
    frames = column(rows, "env_frames")
    if run_s is None:
        run_s = run_seconds(rows, starts)
    duration_s = float(run_s[-1] - run_s[0])
    out: dict[str, Any] = {
        "rows": len(rows),
        "start": float(t[0]),
        "end": float(t[-1]),
        "duration_s": duration_s,
        "lives": max(1, sum(1 for s in starts or [] if s <= t[-1])),
        "env_frames": _last(frames),
        "agent_steps": _last(column(rows, "agent_steps")),
        "updates": _last(column(rows, "updates")),
        "env_frames_per_s": (frames[-1] - frames[0]) / duration_s if duration_s > 0 else None,
    }
    for key in ("mean_max_x", "mean_return", "flag_rate", "agent_steps_per_s"):
        values = column(rows, key)
        out[f"final_{key}"], out[f"peak_{key}"] = _last(values), _peak(values)
    sps = column(rows, "agent_steps_per_s")
    out["mean_agent_steps_per_s"] = float(np.nanmean(sps)) if np.isfinite(sps).any() else None
    for key in ("total_loss", "pg_loss", "baseline_loss", "entropy"):
        out[f"final_{key}"] = _last(column(rows, key))
    return out


def run_seconds(rows: list[dict[str, Any]], starts: list[float] | None) -> np.ndarray:
    """[R] each metrics row's seconds of the run's own time, by the learner's start times."""
    return episode_windows.run_seconds(column(rows, "time"), starts or [])


def plot(rows: list[dict[str, Any]], figure: Figure, path: Path, run_s: np.ndarray) -> None:
    """One row of two panels per (label, keys): vs env frames, vs the run's own hours since the
    first row (`run_s` [R]; a resumed run's time down left out, as in `summarise`)."""
    xs = (("env frames", column(rows, "env_frames")), ("hours", (run_s - run_s[0]) / 3600.0))
    n = len(figure.panels)
    fig, axes = plt.subplots(n, 2, figsize=(11, 3.6 * n), squeeze=False, sharex="col")
    for r, (ylabel, keys) in enumerate(figure.panels):
        for c, (xlabel, x) in enumerate(xs):
            ax = axes[r][c]
            for key in keys:
                y = column(rows, key)
                ok = ~np.isnan(y)
                ax.plot(x[ok], y[ok], marker="." if ok.sum() < 50 else None, label=key)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if r == n - 1:
                ax.set_xlabel(xlabel)
            if len(keys) > 1:
                ax.legend(fontsize="small")
    fig.suptitle(figure.title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _num(v: float | None, fmt: str = "{:,.1f}") -> str:
    return "–" if v is None else fmt.format(v)


def _si(v: float | None) -> str:
    if v is None:
        return "–"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.2f}{suffix}"
    return f"{v:.0f}"


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _lives(s: dict[str, Any]) -> str:
    lives = s.get("lives", 1)
    return f", the learner's own time over {lives} starts" if lives > 1 else ""


def render(
    run_dir: Path, s: dict[str, Any], malformed: int, evaluation: dict | None, video_link: str = ""
) -> str:
    """REPORT.md: the summary table, the best policy kept, the last evaluation if there is one,
    then the plots."""
    pct = "{:.1%}"
    lines = [
        f"# Training report: `{run_dir}`",
        "",
        "| | |",
        "|---|---|",
        f"| period | {_utc(s['start'])} → {_utc(s['end'])} |",
        f"| duration | {_duration(s['duration_s'])} (h:mm:ss){_lives(s)} |",
        f"| env frames | {_si(s['env_frames'])} ({_num(s['env_frames'], '{:,.0f}')}) |",
        f"| agent steps | {_si(s['agent_steps'])} |",
        f"| updates | {_num(s['updates'], '{:,.0f}')} |",
        f"| mean max x: final / peak | {_num(s['final_mean_max_x'])} / "
        f"{_num(s['peak_mean_max_x'])} |",
        f"| mean return: final / peak | {_num(s['final_mean_return'])} / "
        f"{_num(s['peak_mean_return'])} |",
        f"| flag rate: final / peak | {_num(s['final_flag_rate'], pct)} / "
        f"{_num(s['peak_flag_rate'], pct)} |",
        f"| agent steps/s: mean / final | {_num(s['mean_agent_steps_per_s'], '{:,.0f}')} / "
        f"{_num(s['final_agent_steps_per_s'], '{:,.0f}')} |",
        f"| env frames/s over the run | {_num(s['env_frames_per_s'], '{:,.0f}')} |",
        f"| final loss / entropy | {_num(s['final_total_loss'], '{:.3f}')} / "
        f"{_num(s['final_entropy'], '{:.3f}')} |",
        f"| log rows | {s['rows']} ({malformed} malformed lines skipped) |",
        "",
    ]
    lines += _best_policy(run_dir)
    if evaluation is not None:
        lines += _last_evaluation(evaluation, video_link)
    for figure in FIGURES:
        lines += [f"## {figure.title}", "", f"![{figure.title}]({figure.name}.png)", ""]
    return "\n".join(lines)


def _last_evaluation(evaluation: dict[str, Any], video_link: str) -> list[str]:
    """REPORT.md's lines for `make eval`'s summary.json: which checkpoint it played, then one
    table row per setting and policy, perturbed first (the headline); `video_link` is its
    best.mp4 as seen from REPORT.md's folder."""
    o = evaluation.get("overall", {})
    # summary.json from before per-setting summaries held the first setting's in `policies`, and
    # before per-policy summaries one policy's figures in `overall`
    policies = evaluation.get("policies") or {("greedy" if o.get("greedy") else "sampled"): o}
    first = next(iter(o.get("settings") or {"": None}))
    pooled = evaluation.get("pooled") or {first: policies}
    video = evaluation.get("video") or {}
    which = " ".join(str(video[k]) for k in ("policy", "episode") if video.get(k) is not None)
    best = f" ([best episode]({video_link}){': ' + which if which else ''})" if video else ""
    lines = [
        "## Last evaluation",
        "",
        f"Policy v{o.get('policy_version', '?')} on {o.get('level', '?')}{best}.",
    ]
    if o.get("chosen"):
        lines[-1] += f" `make eval` played `{o['checkpoint']}`, {o['chosen']}."
    lines += [
        "",
        "| setting | policy | episodes | mean max x | median max x | flag rate | mean return |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for setting, by_policy in pooled.items():
        for name, s in by_policy.items():
            lines.append(
                f"| {setting or '-'} | {name} | {s.get('episodes', '?')} "
                f"| {_num(s.get('mean_max_x'))} | {_num(s.get('median_max_x'))} "
                f"| {_num(s.get('flag_rate'), '{:.1%}')} | {_num(s.get('mean_return'))} |"
            )
    return [*lines, "", *_evaluation_by_level(evaluation, first)]


def _evaluation_by_level(evaluation: dict[str, Any], setting: str) -> list[str]:
    """REPORT.md's lines for the last evaluation level by level, in its headline `setting`
    (perturbed by default): each level's progress and flag rate per policy, and the x bin where
    most of its episodes without a flag ended (the matrix's most common end point)."""
    rows = [
        r
        for r in (evaluation.get("matrix") or {}).get("rows", [])
        if r.get("setting") == setting and r.get("level") != "mean"
    ]
    if not rows:
        return []
    lines = [
        f"By level ({setting or 'as trained'}):",
        "",
        "| level | policy | episodes | progress | flag rate | most end at x |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        ends = r.get("ends") or []
        end = f"{ends[0]['x_from']:,}-{ends[0]['x_to']:,} ({ends[0]['outcome']})" if ends else "-"
        lines.append(
            f"| {r['level']} | {r['policy']} | {r.get('episodes', '?')} "
            f"| {_num(r.get('mean_progress'), '{:.1%}')} | {_num(r.get('flag_rate'), '{:.1%}')} "
            f"| {end} |"
        )
    return [*lines, ""]


def _best_policy(run_dir: Path) -> list[str]:
    """REPORT.md's lines for the best policy the eval actor kept (actor/best.py), if any."""
    path = RunDir(run_dir).best_policy
    state = read_best(path)
    if state is None:
        return ["## Best policy kept", "", f"None yet (`{path}`): the eval actor keeps one once "
                "every level's window of perturbed episodes is full and the policy it nominates "
                "has played its challenge's fresh episodes.", ""]  # fmt: skip
    b = state["best"]
    saved = _utc(b["saved_at"]) if _is_number(b.get("saved_at")) else "?"
    frames = state.get("env_frames", -1)
    at = f" at {frames:,} env frames" if isinstance(frames, int) and frames >= 0 else ""
    # a best kept before challenges was judged on its window, its last episodes
    which = "fresh" if b.get("judged_on") == "challenge" else "last"
    lines = [
        "## Best policy kept",
        "",
        f"`{path}`: policy v{state.get('policy_version', '?')}{at}, score {b['score']:.3f} (the "
        f"mean over levels of the mean progress of {b.get('episodes_per_level', '?')} {which} "
        f"{b.get('policy', 'sampled')} episodes per level, perturbed: sticky actions "
        f"{b.get('sticky_actions', '?')}, no-op starts 0..{b.get('noop_max', '?')}), saved {saved}. "
        "`make eval` plays it when no checkpoint is named.",
        "",
        "| level | score | flag rate |",
        "|---|---:|---:|",
    ]
    flags = b.get("flag_rates") or {}
    for level, value in (b.get("levels") or {}).items():
        score = f"{value:.1%}" if value <= 1 else f"x {value:,.0f}"
        lines.append(f"| {level} | {score} | {_num(flags.get(level), '{:.1%}')} |")
    return [*lines, ""]


class ReportError(Exception):
    """Nothing to report: the run dir or its metrics log is missing or holds no rows."""


def report(
    run_dir: Path, out: Path, compare: list[Path] | None = None
) -> tuple[dict[str, Any], MetricsLog]:
    compare = compare or []
    path = RunDir(run_dir).metrics
    if not run_dir.is_dir():
        raise ReportError(f"run dir {run_dir} does not exist; pass RUN=<run dir>")
    if not path.is_file():
        raise ReportError(f"{path} does not exist; the learner writes it once training updates")
    log = parse_metrics(path.read_text(errors="replace").splitlines())
    if not log.rows:
        raise ReportError(f"{path} has no metric rows ({log.malformed} malformed lines)")
    starts = episode_windows.start_times(RunDir(run_dir).episodes)
    run_s = run_seconds(log.rows, starts)  # [R], once for the summary and every figure
    summary = summarise(log.rows, starts, run_s)
    out.mkdir(parents=True, exist_ok=True)
    for figure in FIGURES:
        plot(log.rows, figure, out / f"{figure.name}.png", run_s)
    evaluation = None
    eval_path = RunDir(run_dir).eval / "summary.json"
    if eval_path.is_file():
        try:
            evaluation = json.loads(eval_path.read_text())
        except ValueError:
            evaluation = None
    video_link = os.path.relpath(eval_path.parent / "best.mp4", out)
    text = render(run_dir, summary, log.malformed, evaluation, video_link)
    text += report_curves.curves(run_dir, compare, out)
    (out / "REPORT.md").write_text(text)
    return summary, log


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="report", description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True, help="run directory with metrics.jsonl")
    p.add_argument("--out", type=Path, help="output directory (default: RUN/report)")
    p.add_argument(
        "--compare", type=Path, nargs="*", default=[], help="other run dirs drawn on the curve"
    )
    args = p.parse_args(argv)
    out = args.out or args.run_dir / "report"
    try:
        summary, log = report(args.run_dir, out, args.compare)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{out / 'REPORT.md'}: {summary['rows']} rows ({log.malformed} malformed skipped), "
        f"{_si(summary['env_frames'])} env frames, {_duration(summary['duration_s'])}, "
        f"final mean max x {_num(summary['final_mean_max_x'])}, "
        f"flag rate {_num(summary['final_flag_rate'], '{:.1%}')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
