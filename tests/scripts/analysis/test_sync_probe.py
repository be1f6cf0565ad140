"""The learning-per-frame probe runs the real lane, wire, batching and update in one process."""

from __future__ import annotations

import json

import pytest

from scripts.analysis import sync_probe


@pytest.mark.slow
def test_probe_plays_trains_and_tabulates(tmp_path, capfd):
    out = tmp_path / "probe.jsonl"
    argv = ["--frames", "3000", "--envs", "2", "--window-frames", "1000", "--out", str(out)]
    argv += ["--", "--unroll-length", "8", "--batch-chunks", "2", "--epochs", "2"]
    assert sync_probe.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows, "a random-ish policy ends some episodes within 3,000 frames"
    assert all(r["env_frames"] <= 3000 + 2 * 4 and r["max_x"] > 0 for r in rows)
    updates = [json.loads(line) for line in sync_probe.updates_path(out).read_text().splitlines()]
    assert [u["update"] for u in updates] == list(range(1, len(updates) + 1))
    assert len(updates) >= 3000 // (4 * 2 * 8 * 2)  # frames / (skip x envs x T x chunks)
    assert all(u["grad_norm"] > 0 and 0 <= u["clip_fraction"] <= 1 for u in updates)
    table = capfd.readouterr().out
    assert "| env frames | episodes | mean max x | flag rate |" in table


def test_probe_refuses_replay(tmp_path):
    with pytest.raises(SystemExit, match="replay"):
        sync_probe.main(
            ["--frames", "10", "--out", str(tmp_path / "x"), "--", "--replay-fraction", "0.5"]
        )
