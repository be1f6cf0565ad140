"""`python -m scripts.dev.chaos.builds`: envs built one after another in a worker, failures counted."""

from __future__ import annotations

import json

import pytest

from scripts.dev.chaos import builds

pytestmark = [
    pytest.mark.slow,
    pytest.mark.rehearsal,
]  # a worker process imports the actor's env stack


def test_a_build_that_fails_every_attempt_fails_the_run_and_the_rest_are_timed(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("FLAKY_FAILURES", "3")  # the first env's 3 attempts (2 retries) fail
    out = tmp_path / "builds.json"
    argv = ["--count", "3", "--level", "tests.fakes:FlakyBuild-v0", "--out", str(out)]
    assert builds.main(argv) == 1
    result = json.loads(out.read_text())
    assert (result["builds"], result["failures"], result["worker_restarts"]) == (3, 1, 0)
    assert "after 3 attempts" in result["failure_messages"][0]
    assert 0 < result["p50_s"] <= result["max_s"]
    assert capsys.readouterr().out.rstrip().endswith("FAIL 3 env builds, 1 failures")
