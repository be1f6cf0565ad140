"""scripts/milestones.py through `python -m scripts.learning_curve --window-frames`: the env
frames and minutes to a run's first flag, its first window with a flag and its first window with
half its episodes at the flag, counted on episodes from the level's start, per run and per level."""

from __future__ import annotations

import json
from pathlib import Path

from common.rundir import RunDir
from scripts import learning_curve


def write_lines(run: Path, rows: list[dict], config: dict | None = None) -> None:
    run.mkdir(parents=True)
    RunDir(run).episodes.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    if config is not None:
        RunDir(run).config.write_text(json.dumps(config))


def ep(t: float, frames: int, flag: bool, level: str = "1-1", start_x: int = -1) -> dict:
    x = 3161 if flag else 400
    return {"time": t, "env_frames": frames, "actor_id": 0, "level": level, "max_x": x,
            "flag": flag, "return": 1.0, "length": 9, "outcome": "flag" if flag else "death",
            "start_x": start_x}  # fmt: skip


def start(t: float, frames: int = 0) -> dict:
    return {"event": "start", "time": t, "env_frames": frames}


def test_milestones_are_the_first_flag_and_windows_of_level_start_episodes(tmp_path, capsys):
    """Windows of 1,000 frames. A frontier start's flag at 900 frames is no milestone; the first
    flag from the level's start is at 1,800 frames (2 minutes); its window (to 2,000) ends with an
    episode at 2.5 minutes. The run is stopped there and resumed a day later: its own time goes on
    from 2.5 minutes, and half the episodes of the window to 3,000 flag, the last at 3.8 minutes."""
    day = 86_400.0
    rows = [start(0.0), ep(30, 500, False), ep(60, 900, True, start_x=2000),
            ep(90, 1_500, False), ep(120, 1_800, True), ep(150, 1_900, False),
            start(day, 1_900), ep(day + 50, 2_500, True), ep(day + 80, 2_900, False),
            ep(day + 110, 3_100, False)]  # fmt: skip
    write_lines(tmp_path / "a", rows, {"seed": 4, "sticky_actions": 0.25, "noop_max": 30})
    write_lines(tmp_path / "b", [start(0.0), ep(30, 3_200, False)], {"seed": 5})
    argv = [str(tmp_path / "a"), str(tmp_path / "b"), "--window-frames", "1000"]
    assert learning_curve.main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "| seed 4 | 1,800 frames, 2.0 min | 2,000 frames, 2.5 min | 3,000 frames, 3.8 min |" in out
    )
    assert "| seed 5 | none by 3,000 frames | none by 3,000 frames | none by 3,000 frames |" in out
    assert "training episodes from the level's start" in out


def test_a_run_of_several_levels_gets_its_milestones_level_by_level(tmp_path, capsys):
    rows = [start(0.0), ep(60, 400, True, "1-1"), ep(90, 600, False, "1-2"),
            ep(120, 1_400, True, "1-2"), ep(150, 1_600, True, "1-1"), ep(180, 2_000, False, "1-2")]  # fmt: skip
    write_lines(tmp_path / "w", rows)
    argv = [str(tmp_path / "w"), "--window-frames", "1000", "--no-reference"]
    assert learning_curve.main(argv) == 0
    out = capsys.readouterr().out
    assert "| 1-1 | 400 frames, 1.0 min | 1,000 frames, 1.0 min | 1,000 frames, 1.0 min |" in out
    assert "| 1-2 | 1,400 frames, 2.0 min | 2,000 frames, 3.0 min | 2,000 frames, 3.0 min |" in out
    # the mean over levels: 1-1's 100% and 1-2's 0% in the first window are half
    assert "| mean | 400 frames, 1.0 min | 1,000 frames, 1.5 min | 1,000 frames, 1.5 min |" in out
