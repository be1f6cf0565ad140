"""What a crash leaves in the run directory (half-written checkpoints), and resuming: a checkpoint
of another network or PopArt setting is refused with the flag to change, the learner untouched."""

from __future__ import annotations

import pytest
import torch

from common.metrics import LearnerMetrics
from common.rundir import RunDir
from learner import checkpoint
from learner.checkpoint import Totals
from learner.config import LearnerConfig
from learner.loop import TrainLoop, build_training
from learner.update import Learner
from tests.procs import free_port


def test_a_learner_starting_removes_checkpoint_writes_a_crash_interrupted(tmp_path):
    first = TrainLoop(
        LearnerConfig(run_dir=str(tmp_path), port=free_port(2), device="cpu"), LearnerMetrics()
    )
    try:
        saved = first.save_checkpoint()
    finally:
        first.close()
    ckpts = RunDir(tmp_path).checkpoints
    # what kill -9 during checkpoint.save leaves: the temp file of the next checkpoint, or of
    # the `latest` pointer, named as atomic_write names them
    torn = [ckpts / ".ckpt-0000000007.pt.tmp-4242", ckpts / ".latest.tmp-4242"]
    for path in torn:
        path.write_bytes(saved.read_bytes()[:1000])

    second = TrainLoop(
        LearnerConfig(run_dir=str(tmp_path), port=free_port(2), device="cpu"), LearnerMetrics()
    )
    try:
        assert [p for p in torn if p.exists()] == []
        assert checkpoint.latest_path(RunDir(tmp_path)) == saved  # the complete checkpoint stays
        assert sorted(p.name for p in ckpts.iterdir()) == [saved.name, "latest"]
    finally:
        second.close()


def test_the_newest_complete_checkpoint_wins_over_a_pointer_a_crash_left_behind(tmp_path):
    run = RunDir(tmp_path)
    state = {"policy_version": 0}
    older = checkpoint.save(run, state, 10)
    pointer = run.latest.read_bytes()
    newer = checkpoint.save(run, state, 20)
    run.latest.write_bytes(pointer)  # killed after the rename, before the pointer
    assert checkpoint.latest_path(run) == newer != older
    assert checkpoint.latest_path(RunDir(tmp_path / "none")) is None


# ---- resuming a learner ------------------------------------------------------------------------

CPU = torch.device("cpu")


def learner_of(cfg: LearnerConfig, updates: int = 0) -> Learner:
    learner, _ = build_training(cfg, CPU)
    learner.updates, learner.sgd_steps = updates, 8 * updates
    return learner


def saved(run: RunDir, learner: Learner, totals: Totals | None = None) -> None:
    state = checkpoint.learner_state(learner, totals or Totals(), {})
    checkpoint.save(run, state, learner.updates)


def test_resume_restores_the_learner_and_the_runs_totals(tmp_path):
    run, cfg = RunDir(tmp_path), LearnerConfig()
    trained = learner_of(cfg, 12)
    torch.nn.init.normal_(trained.model.policy.weight)
    trained.value_norm.update(torch.randn(4, 3) * 50)  # statistics far from their start
    saved(run, trained, Totals(env_frames=4096, agent_steps=1024))
    fresh = learner_of(cfg)
    assert checkpoint.resume(run, fresh, CPU) == Totals(env_frames=4096, agent_steps=1024)
    assert (fresh.updates, fresh.sgd_steps) == (12, 96)
    torch.testing.assert_close(fresh.model.state_dict(), trained.model.state_dict())
    assert fresh.value_norm.state_dict() == trained.value_norm.state_dict()
    assert checkpoint.resume(RunDir(tmp_path / "new"), learner_of(cfg), CPU) == Totals()


def test_resume_refuses_another_network_naming_the_flag_and_leaves_the_learner_alone(tmp_path):
    run = RunDir(tmp_path)
    saved(run, learner_of(LearnerConfig(arch="nature"), 5))
    learner = learner_of(LearnerConfig())
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    with pytest.raises(SystemExit, match=r"arch is 'nature' there, 'small' here \(--arch nature\)"):
        checkpoint.resume(run, learner, CPU)
    assert learner.updates == 0
    torch.testing.assert_close(learner.model.state_dict(), before)
    saved(RunDir(tmp_path / "lstm"), learner_of(LearnerConfig(core="lstm"), 5))
    with pytest.raises(SystemExit, match=r"core is 'lstm' there, 'none' here \(--core lstm\)"):
        checkpoint.resume(RunDir(tmp_path / "lstm"), learner, CPU)


def test_resume_refuses_a_value_normalisation_other_than_the_checkpoints(tmp_path):
    run = RunDir(tmp_path)
    saved(run, learner_of(LearnerConfig(popart=False), 5))
    with pytest.raises(SystemExit, match=r"with no value normalisation.*asks for PopArt"):
        checkpoint.resume(run, learner_of(LearnerConfig()), CPU)
    saved(run, learner_of(LearnerConfig(), 6))
    with pytest.raises(SystemExit, match=r"with PopArt.*resume it with --popart"):
        checkpoint.resume(run, learner_of(LearnerConfig(popart=False)), CPU)
    with pytest.raises(SystemExit, match=r"asks for return normalisation.*with --popart"):
        checkpoint.resume(run, learner_of(LearnerConfig(popart=False, return_norm=True)), CPU)
    saved(run, learner_of(LearnerConfig(popart=False, return_norm=True), 7))
    with pytest.raises(SystemExit, match=r"resume it with --no-popart --return-norm"):
        checkpoint.resume(run, learner_of(LearnerConfig()), CPU)


def test_return_norm_moments_survive_a_resume(tmp_path):
    run = RunDir(tmp_path)
    cfg = LearnerConfig(popart=False, return_norm=True)
    trained = learner_of(cfg, 5)
    trained.value_norm.update(torch.randn(4, 3) * 50 + 7)
    saved(run, trained)
    fresh = learner_of(cfg)
    checkpoint.resume(run, fresh, CPU)
    assert fresh.value_norm.state_dict() == trained.value_norm.state_dict()
