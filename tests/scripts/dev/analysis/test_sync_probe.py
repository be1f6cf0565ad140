"""The learning-per-frame probe runs the real lane, wire, batching and update in one process."""

from __future__ import annotations

import json

import pytest
import torch

from scripts.dev.analysis import sync_probe


@pytest.mark.slow
@pytest.mark.rehearsal
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


def test_lagged_weights_are_those_of_lag_updates_ago():
    weights = [{"w": torch.full((2,), float(v))} for v in range(6)]
    lagged = sync_probe.Lagged(weights[0], lag=2)
    seen = []
    for v in range(1, 6):
        lagged.push(v, weights[v])
        weights[v]["w"] += 100  # the learner trains on: a kept version must not move with it
        seen.append((lagged.version, float(lagged.state["w"][0])))
    assert seen == [(0, 0.0), (0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)]
    now = sync_probe.Lagged(weights[0], lag=0)
    now.push(7, {"w": torch.zeros(2)})
    assert now.version == 7


@pytest.mark.slow
@pytest.mark.rehearsal
def test_a_lagging_probe_reports_the_acting_version_in_each_chunk(tmp_path, monkeypatch):
    """With --policy-lag 2 and one update per chunk, chunk i (made after i updates) carries
    policy version i - 2 (0 before there are two)."""
    out = tmp_path / "probe.jsonl"
    argv = ["--frames", "2000", "--envs", "2", "--policy-lag", "2", "--out", str(out)]
    argv += ["--", "--unroll-length", "8", "--batch-chunks", "1", "--epochs", "1"]
    versions = []
    real = sync_probe.to_wire_chunk

    def recorded(cfg, actor_id, seq, chunk, **kw):
        versions.append(chunk.policy_version)
        return real(cfg, actor_id, seq, chunk, **kw)

    monkeypatch.setattr(sync_probe, "to_wire_chunk", recorded)
    assert sync_probe.main(argv) == 0
    assert len(versions) > 5
    assert versions == [max(0, i - 2) for i in range(len(versions))]


def test_probe_refuses_a_negative_lag(tmp_path):
    with pytest.raises(SystemExit, match="policy-lag"):
        sync_probe.main(["--frames", "10", "--policy-lag", "-1", "--out", str(tmp_path / "x")])
