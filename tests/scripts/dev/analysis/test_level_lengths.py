"""The level-length search on real emulators: deterministic for a seed, honest when its budget
runs out, and its results kept with the command that produced them."""

from __future__ import annotations

import json

import pytest

from scripts.dev.analysis import level_lengths


@pytest.mark.slow
@pytest.mark.rehearsal
def test_a_short_budget_reports_no_flag_and_the_same_progress_for_a_seed(tmp_path):
    a = level_lengths.measure("1-1", budget_frames=2000, seed=5)
    b = level_lengths.measure("1-1", budget_frames=2000, seed=5)
    assert a == b
    assert a.flag_x is None and a.max_x > 100 and a.frames >= 2000

    out = tmp_path / "lengths.json"
    out.write_text(json.dumps({"levels": {"4-1": {"flag_x": 1, "command": "kept"}}}))
    assert level_lengths.main(["1-1", "--budget-frames", "500", "--out", str(out)]) == 0
    data = json.loads(out.read_text())["levels"]
    assert data["4-1"] == {"flag_x": 1, "command": "kept"}  # other levels' rows stay
    assert data["1-1"]["flag_x"] is None and data["1-1"]["search_frames"] >= 500
    assert data["1-1"]["command"].endswith(
        "level_lengths 1-1 --budget-frames 500 --out " + str(out)
    )
