"""`make eval`'s tables: the evaluation matrix (scripts/evaluate/matrix.py) as Markdown and as
JSON-ready dicts, and the summary files that hold them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.rundir import atomic_write
from scripts.evaluate.matrix import END_BIN_PX, Cell, EndPoint, Matrix, episode_progress


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _ends(ends: Sequence[EndPoint]) -> str:
    return ", ".join(f"{e.outcome} {e.x_from}–{e.x_to} ({e.count})" for e in ends) or "-"


def markdown(matrix: Matrix, setting_notes: dict[str, str] | None = None) -> str:
    """One table per (setting, policy), in play order (the headline first): a row per level, then
    the mean row; with two settings a side-by-side table of progress and flag rate follows."""
    notes = setting_notes or {}
    out = []
    head = (
        "| level | episodes | progress mean | progress median | max x mean | max x best "
        "| flag | death | cutoff | where the others end (top 3) |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for s in matrix.settings:
        for p in matrix.policies:
            rows = [c for c in (*matrix.cells, *matrix.means) if (c.setting, c.policy) == (s, p)]
            title = f"### {p}" + (f", {s}" if len(matrix.settings) > 1 else "")
            lines = [title + (f" ({notes[s]})" if s in notes else ""), "", head]
            for c in rows:
                level = "**mean**" if c.level == "mean" else c.level
                lines.append(
                    f"| {level} | {c.episodes} | {_pct(c.mean_progress)} "
                    f"| {_pct(c.median_progress)} | {_x(c.mean_max_x)} | {_x(c.best_max_x)} "
                    f"| {_pct(c.flag_rate)} | {_pct(c.death_rate)} | {_pct(c.cutoff_rate)} "
                    f"| {_ends(c.ends)} |"
                )
            out.append("\n".join(lines))
    if len(matrix.settings) == 2:
        out.append(_side_by_side(matrix, *matrix.settings))
    foot = [
        f"Progress: max x as a share of the level's length (100% at the flag). Ends: outcome, "
        f"the {END_BIN_PX}-px bin of the episode's max x, and how many episodes ended there."
    ]
    if matrix.unmeasured:
        foot.append(f"Progress is unknown (-) for {', '.join(matrix.unmeasured)}: not measured.")
    return "\n\n".join([*out, " ".join(foot)]) + "\n"


def _side_by_side(matrix: Matrix, first: str, second: str) -> str:
    """Each level's progress and flag rate in both settings, in play order (the headline
    first), and the change from `plain` to the other setting."""
    base, other = (first, second) if first == "plain" else (second, first)
    lines = [
        f"### {first} vs {second}",
        "",
        f"| level | policy | progress {first} | progress {second} | change "
        f"| flag {first} | flag {second} |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    levels = [*matrix.levels, *(["mean"] if matrix.means else [])]
    for level in levels:
        for p in matrix.policies:
            a, b = matrix.row(first, level, p), matrix.row(second, level, p)
            frm, to = matrix.row(base, level, p), matrix.row(other, level, p)
            change = "-"
            if frm.mean_progress is not None and to.mean_progress is not None:
                change = f"{100 * (to.mean_progress - frm.mean_progress):+.1f} pp"
            name = "**mean**" if level == "mean" else level
            lines.append(
                f"| {name} | {p} | {_pct(a.mean_progress)} | {_pct(b.mean_progress)} | {change} "
                f"| {_pct(a.flag_rate)} | {_pct(b.flag_rate)} |"
            )
    return "\n".join(lines)


def cell_json(c: Cell) -> dict[str, Any]:
    return c._asdict() | {"ends": [e._asdict() for e in c.ends]}


def matrix_json(matrix: Matrix) -> dict[str, Any]:
    """`rows` (one per setting, level and policy) and `means` (per setting and policy)."""
    return {
        "settings": list(matrix.settings),
        "levels": list(matrix.levels),
        "policies": list(matrix.policies),
        "unmeasured": list(matrix.unmeasured),
        "rows": [cell_json(c) for c in matrix.cells],
        "means": [cell_json(c) for c in matrix.means],
    }


def episodes_json(matrix: Matrix) -> list[dict[str, Any]]:
    """One row per episode: setting, level, policy, index (within those), max_x, progress, flag,
    return, length, outcome."""
    return [
        {"setting": s, "level": lv, "policy": p, "index": i, "max_x": e.max_x}
        | {"progress": episode_progress(lv, e), "flag": e.flag}
        | {"return": e.episode_return, "length": e.length, "outcome": e.outcome}
        for s, lv, p, i, e in matrix.episodes
    ]


def best_table(bests: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of the levels' best episodes (`write_best`'s dicts), linking their
    still and video by file name (they sit beside the table's file)."""
    lines = [
        "| level | setting | policy | episode | max x | still | video |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for b in bests:
        still, video = Path(b["still"]).name, Path(b["path"]).name
        lines.append(
            f"| {b['level']} | {b['setting']} | {b['policy']} | {b['episode']} | {b['max_x']} "
            f"| [{still}]({still}) | [{video}]({video}) |"
        )
    return "\n".join(lines)


# ---- IO -------------------------------------------------------------------------------------


def write_summary(out: Path, summary: dict[str, Any], table: str) -> None:
    """`summary.json` and `summary.md` in `out`, each written to a temp file then renamed."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    atomic_write(out / "summary.md", table.encode())
