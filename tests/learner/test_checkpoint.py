"""What a crash leaves in the run directory: half-written checkpoints and cut-off log lines."""

from __future__ import annotations

import json
import os

from common.metrics import LearnerMetrics
from learner import checkpoint
from learner.config import LearnerConfig
from learner.main import TrainLoop
from tests.procs import free_port


def test_a_learner_starting_removes_checkpoint_writes_a_crash_interrupted(tmp_path):
    first = TrainLoop(
        LearnerConfig(run_dir=str(tmp_path), port=free_port(2), device="cpu"), LearnerMetrics()
    )
    try:
        saved = first.save_checkpoint()
    finally:
        first.close()
    ckpts = tmp_path / "checkpoints"
    # what kill -9 during checkpoint.save leaves: the temp file of the next checkpoint, or of
    # the `latest` pointer, named as _atomic_write names them
    torn = [ckpts / ".ckpt-0000000007.pt.tmp-4242", ckpts / ".latest.tmp-4242"]
    for path in torn:
        path.write_bytes(saved.read_bytes()[:1000])

    second = TrainLoop(
        LearnerConfig(run_dir=str(tmp_path), port=free_port(2), device="cpu"), LearnerMetrics()
    )
    try:
        assert [p for p in torn if p.exists()] == []
        assert checkpoint.latest_path(ckpts) == saved  # the complete checkpoint stays
        assert sorted(p.name for p in ckpts.iterdir()) == [saved.name, "latest"]
    finally:
        second.close()


def test_append_lines_writes_whole_lines(tmp_path):
    path = tmp_path / "episodes.jsonl"
    checkpoint.append_lines(path, [json.dumps({"a": 1}), json.dumps({"b": 2})])
    checkpoint.append_lines(path, [])
    checkpoint.append_lines(path, [json.dumps({"c": 3})])
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"a": 1},
        {"b": 2},
        {"c": 3},
    ]
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_a_line_cut_short_by_a_crash_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"time": 1.0, "max_x": 300}\n{"time": 2.0, "ma')  # killed mid-line
    checkpoint.append_lines(path, [json.dumps({"event": "start", "time": 3.0})])
    lines = path.read_text().splitlines()
    assert lines[1] == '{"time": 2.0, "ma'  # the fragment stays apart (readers skip it)
    assert json.loads(lines[2]) == {"event": "start", "time": 3.0}


def test_the_newest_complete_checkpoint_wins_over_a_pointer_a_crash_left_behind(tmp_path):
    ckpts = tmp_path / "checkpoints"
    state = {"policy_version": 0}
    older = checkpoint.save(ckpts, state, 10)
    pointer = (ckpts / "latest").read_bytes()
    newer = checkpoint.save(ckpts, state, 20)
    (ckpts / "latest").write_bytes(pointer)  # killed after the rename, before the pointer
    assert checkpoint.latest_path(ckpts) == newer != older
    assert checkpoint.latest_path(tmp_path / "none") is None
