"""The run directory's two ways of writing: a file replaced whole or not at all, and log lines
appended so that a crash mid-line never swallows the next record."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from common.rundir import append_lines, atomic_write, temp_files


def test_atomic_write_replaces_the_file_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "config.json"
    atomic_write(path, b"old")
    atomic_write(path, lambda f: f.write(b"new"))  # replaces the old file
    assert path.read_bytes() == b"new"

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write(path, b"lost")
    assert path.read_bytes() == b"new"  # the old file, whole
    assert os.listdir(tmp_path) == ["config.json"]  # no temp file left behind


def test_the_temp_file_is_named_where_the_learners_cleanup_finds_it(tmp_path: Path) -> None:
    path = tmp_path / "latest"
    atomic_write(path, b"ckpt-1.pt\n")

    def interrupted(f) -> None:
        f.write(b"ckpt-")  # a kill -9 now would leave this temp file; the learner removes it
        assert temp_files(tmp_path) == [tmp_path / f".latest.tmp-{os.getpid()}"]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, interrupted)
    assert path.read_bytes() == b"ckpt-1.pt\n" and temp_files(tmp_path) == []


def test_append_lines_writes_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    append_lines(path, [json.dumps({"a": 1}), json.dumps({"b": 2})])
    append_lines(path, [])
    append_lines(path, [json.dumps({"c": 3})])
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"a": 1},
        {"b": 2},
        {"c": 3},
    ]
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_a_line_cut_short_by_a_crash_does_not_swallow_the_next_record(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"time": 1.0, "max_x": 300}\n{"time": 2.0, "ma')  # killed mid-line
    append_lines(path, [json.dumps({"event": "start", "time": 3.0})])
    lines = path.read_text().splitlines()
    assert lines[1] == '{"time": 2.0, "ma'  # the fragment stays apart (readers skip it)
    assert json.loads(lines[2]) == {"event": "start", "time": 3.0}
