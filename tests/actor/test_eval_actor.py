"""The eval-mode actor on a live run: mario_eval_* metrics and the best episode's video."""

from __future__ import annotations

import json

import av
import pytest

from tests import procs
from tests.fakes import CORRIDOR_ACTOR_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LEVEL = "tests.fakes:Corridor-v0"


def test_eval_actor_exports_metrics_and_keeps_the_best_video(tmp_path):
    port, lport, eport = procs.free_port(2), procs.free_port(), procs.free_port()
    learner = procs.learner(
        tmp_path / "run", port, lport, "--unroll-length", "16", "--batch-chunks", "1"
    )
    common = CORRIDOR_ACTOR_ARGS
    trainer = procs.actor(tmp_path, port, 0, procs.free_port(), *common, "--num-envs", "2")
    evaluator = procs.actor(
        tmp_path, port, 1, eport, *common, "--eval", "--eval-dir", str(tmp_path / "eval"),
        "--eval-interval-s", "0.5", "--eval-window", "3",
    )  # fmt: skip
    everyone = [learner, trainer, evaluator]
    key = "mario_eval_episodes_total{level=" + LEVEL + "}"
    try:
        procs.wait_until(
            "3 eval episodes", lambda: procs.scrape(eport).get(key, 0) >= 3, 120, everyone
        )
        m = procs.scrape(eport)
        for name in ("max_x", "flag_rate", "return", "policy_version", "best_max_x"):
            assert f"mario_eval_{name}{{level={LEVEL}}}" in m
        assert 0.0 <= m[f"mario_eval_flag_rate{{level={LEVEL}}}"] <= 1.0
        assert "mario_actor_chunks_sent_total" not in m  # an evaluator sends nothing
    finally:
        for p in everyone:
            p.stop()
    summary = json.loads((tmp_path / "eval" / "best-tests.fakes_Corridor-v0.json").read_text())
    with av.open(str(tmp_path / "eval" / "best-tests.fakes_Corridor-v0.mp4")) as video:
        frames = [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]
    assert len(frames) == summary["length"] + 1 == summary["frames"]
    assert frames[0].shape == (84, 84, 3)
