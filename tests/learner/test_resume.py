"""Resuming from a checkpoint through the train loop: one of an older release is refused and the
run directory given back; a resumed learner counts its own work from zero."""

from __future__ import annotations

import pytest
import torch

from common.metrics import LearnerMetrics
from common.model import ActorCritic
from common.rundir import RunDir
from learner import checkpoint
from learner.config import LearnerConfig
from learner.loop import TrainLoop
from learner.popart import PopArt
from tests.procs import free_port


def save(run_dir, version: int, *, former: bool = False) -> None:
    """A checkpoint of this release; `former`: as written before the previous action and the
    input normalisation were part of the network (no such spec keys, no core) and before PopArt
    (no statistics)."""
    model = ActorCritic(LearnerConfig().model_spec())
    state = {
        "model": model.state_dict(),
        "optimizer": torch.optim.Adam(model.parameters()).state_dict(),
        "policy_version": version,
        "env_frames": 4096,
        "agent_steps": 1024,
        "model_spec": model.spec.to_wire(),
        "popart": PopArt(model.value).state_dict(),
        "config": {},
        "saved_at": 0.0,
    }
    if former:
        del state["popart"]
        state["model_spec"] = {
            k: v for k, v in state["model_spec"].items() if k not in ("core", "core_size")
        }
    checkpoint.save(RunDir(run_dir), state, version)


def loop(run_dir, **kw) -> TrainLoop:
    cfg = LearnerConfig(run_dir=str(run_dir), port=free_port(2), device="cpu", **kw)
    return TrainLoop(cfg, LearnerMetrics())


def test_a_checkpoint_of_an_older_release_is_refused_and_the_run_dir_given_back(tmp_path):
    save(tmp_path, 12, former=True)
    with pytest.raises(SystemExit, match=r"written by an older release .* start a new --run-dir"):
        loop(tmp_path)
    save(tmp_path, 13)  # the newest checkpoint is this release's
    resumed = loop(tmp_path)  # the refusal gave the run directory back
    try:
        assert resumed.learner.updates == 13 and resumed.totals.env_frames == 4096
    finally:
        resumed.close()


def test_a_resumed_learner_counts_its_own_work_from_zero_and_resumes_the_runs_totals(tmp_path):
    save(tmp_path, 12)
    resumed = loop(tmp_path)
    try:
        value = resumed.metrics.registry.get_sample_value
        # a counter that restarted at 12, below what Prometheus last scraped from the crashed
        # learner, would read as a reset: rate() would count all 12 updates again
        assert value("mario_learner_updates_total") == 0
        assert value("mario_learner_env_frames_total") == 0
        assert value("mario_policy_version") == 12
        assert value("mario_learner_run_env_frames") == 4096
    finally:
        resumed.close()
