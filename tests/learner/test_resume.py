"""Resuming from a checkpoint: the network it holds must be the one the config describes."""

from __future__ import annotations

import pytest
import torch

from common.metrics import LearnerMetrics
from common.model import ActorCritic
from common.rundir import RunDir
from learner import checkpoint
from learner.config import LearnerConfig
from learner.loop import TrainLoop
from tests.procs import free_port


def save_without_last_action(run_dir, version: int) -> None:
    """A checkpoint as written before the previous action and the input normalisation were part
    of the network (no such spec keys) and before PopArt (no statistics)."""
    spec = LearnerConfig(last_action=False, input_norm=False).model_spec()
    model = ActorCritic(spec)
    state = {
        "model": model.state_dict(),
        "optimizer": torch.optim.Adam(model.parameters()).state_dict(),
        "policy_version": version,
        "env_frames": 4096,
        "agent_steps": 1024,
        "model_spec": {
            k: v for k, v in spec.to_wire().items() if k not in ("last_action", "input_norm")
        },
        "config": {},
        "saved_at": 0.0,
    }
    checkpoint.save(RunDir(run_dir), state, version)


def loop(run_dir, **kw) -> TrainLoop:
    cfg = LearnerConfig(run_dir=str(run_dir), port=free_port(2), device="cpu", **kw)
    return TrainLoop(cfg, LearnerMetrics())


def test_a_checkpoint_of_another_network_is_refused_with_the_flag_to_change(tmp_path):
    save_without_last_action(tmp_path, 12)
    with pytest.raises(
        SystemExit, match=r"last_action is False there, True here \(--no-last-action\)"
    ):
        loop(tmp_path)
    with pytest.raises(
        SystemExit, match=r"with no value normalisation.*resume it with --no-popart"
    ):
        loop(tmp_path, last_action=False, input_norm=False)
    # the refusals gave the run directory back
    resumed = loop(tmp_path, last_action=False, input_norm=False, popart=False)
    try:
        assert resumed.learner.updates == 12 and resumed.totals.env_frames == 4096
        assert resumed.model.last_action is None
    finally:
        resumed.close()


def test_a_resumed_learner_counts_its_own_work_from_zero_and_resumes_the_runs_totals(tmp_path):
    save_without_last_action(tmp_path, 12)
    resumed = loop(tmp_path, last_action=False, input_norm=False, popart=False)
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
