"""What a crash leaves in the run directory (half-written checkpoints), and resuming: a checkpoint
of another network is refused with the flag to change, one of an older release as such, the
learner untouched."""

from __future__ import annotations

import logging

import pytest
import torch

from common import config as config_io
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
    trained.popart.update(torch.randn(4, 3) * 50)  # statistics far from their start
    saved(run, trained, Totals(env_frames=4096, agent_steps=1024))
    fresh = learner_of(cfg)
    assert checkpoint.resume(run, fresh, CPU) == Totals(env_frames=4096, agent_steps=1024)
    assert (fresh.updates, fresh.sgd_steps) == (12, 96)
    torch.testing.assert_close(fresh.model.state_dict(), trained.model.state_dict())
    assert fresh.popart.state_dict() == trained.popart.state_dict()
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


def former_release(run: RunDir, learner: Learner, spec: dict, without: tuple = ()) -> None:
    """A checkpoint of `learner` as an older release wrote it: its network's spec updated with
    `spec` (None removes a key), the state's keys `without` left out."""
    state = checkpoint.learner_state(learner, Totals(), {})
    changed = {**state["model_spec"], **spec}
    state["model_spec"] = {k: v for k, v in changed.items() if v is not None}
    for key in without:
        del state[key]
    checkpoint.save(run, state, learner.updates)


@pytest.mark.parametrize(
    "spec, without, lacks",
    [
        ({"last_action": False, "input_norm": True}, (), "its network lacks the previous"),
        ({"last_action": True, "input_norm": False}, (), "its network lacks input norm"),
        (
            {"core": None, "core_size": None},
            (),
            "its network lacks the previous action as an input and",
        ),
        ({}, ("popart",), "its value head was trained without PopArt"),
    ],
)
def test_resume_refuses_a_checkpoint_of_an_older_release(tmp_path, spec, without, lacks):
    run = RunDir(tmp_path)
    former_release(run, learner_of(LearnerConfig(), 5), spec, without)
    learner = learner_of(LearnerConfig())
    with pytest.raises(
        SystemExit, match=rf"written by an older release \({lacks}.*cannot be resumed"
    ):
        checkpoint.resume(run, learner, CPU)
    assert learner.updates == 0


def test_resume_takes_a_checkpoint_whose_spec_names_the_switches_as_on(tmp_path):
    """The release before this one wrote last_action and input_norm into the spec: true is the
    network this release builds."""
    run = RunDir(tmp_path)
    former_release(run, learner_of(LearnerConfig(), 5), {"last_action": True, "input_norm": True})
    learner = learner_of(LearnerConfig())
    checkpoint.resume(run, learner, CPU)
    assert learner.updates == 5


def test_resume_takes_a_checkpoint_whose_spec_names_one_value_head(tmp_path):
    """Releases with per-level PopArt wrote value_heads into every spec: 1 (every run without
    --popart-per-level) is the network this release builds, and its run resumes."""
    run = RunDir(tmp_path)
    trained = learner_of(LearnerConfig(level="world:1"), 5)
    trained.popart.update(torch.randn(4, 3) * 50)
    former_release(run, trained, {"value_heads": 1})
    learner = learner_of(LearnerConfig(level="world:1"))
    checkpoint.resume(run, learner, CPU)
    assert learner.updates == 5
    torch.testing.assert_close(learner.model.state_dict(), trained.model.state_dict())
    assert learner.popart.state_dict() == trained.popart.state_dict()


def test_resume_refuses_a_checkpoint_of_per_level_popart(tmp_path):
    """A run of --popart-per-level on World 1 saved a value head and PopArt statistics per level;
    this release trains one of each, so its run cannot go on."""
    run, learner = RunDir(tmp_path), learner_of(LearnerConfig(level="world:1"), 5)
    state = checkpoint.learner_state(learner, Totals(), {"level": "world:1"})
    state["model_spec"] = {**state["model_spec"], "value_heads": 4}
    width = learner.model.value.in_features
    state["model"] |= {"value.weight": torch.zeros(4, width), "value.bias": torch.zeros(4)}
    state["popart"] = {"mean": [0.0] * 4, "mean_sq": [1.0] * 4}
    checkpoint.save(run, state, 5)
    fresh = learner_of(LearnerConfig(level="world:1"))
    with pytest.raises(SystemExit) as exc:
        checkpoint.resume(run, fresh, CPU)
    assert str(exc.value) == (
        f"learner: checkpoint {run.checkpoints / 'ckpt-0000000005.pt'} was written by an older "
        "release (its network has a value head for each of its 4 levels, per-level PopArt's, "
        "which this release no longer builds) and cannot be resumed: start a new --run-dir"
    )
    assert fresh.updates == 0


# unperturbed at a flat rate: the defaults until the recipe of docs/WHY-DEFAULTS.md
FORMER_DEFAULTS = "--sticky-actions 0 --noop-max 0 --lr-anneal-frames 0 --lr-final-fraction 0"


def test_resume_with_another_recipe_warns_once_naming_the_flags_that_keep_the_runs(
    tmp_path, caplog
):
    """A run trained unperturbed at a flat rate (the former defaults), resumed with today's:
    it resumes, warns, and the flags the warning names resume it without one."""

    def config(*argv: str) -> dict:
        return config_io.to_dict(
            config_io.load(LearnerConfig, list(argv), prog="learner", description="")
        )

    run, former = RunDir(tmp_path), config(*FORMER_DEFAULTS.split())
    checkpoint.save(
        run, checkpoint.learner_state(learner_of(LearnerConfig(), 5), Totals(), former), 5
    )
    with caplog.at_level(logging.WARNING, logger="learner.checkpoint"):
        checkpoint.resume(run, learner := learner_of(LearnerConfig()), CPU, config=config())
    assert learner.updates == 5
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for change in ("sticky_actions 0.0 -> 0.25", "noop_max 0 -> 30", "lr_anneal_frames 0 -> "):
        assert change in warning
    keep = warning.split('LEARNER_ARGS="')[1].split('"')[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="learner.checkpoint"):
        checkpoint.resume(run, learner_of(LearnerConfig()), CPU, config=config(*keep.split()))
        checkpoint.resume(run, learner_of(LearnerConfig()), CPU, config=former)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_resumed_learner_keeps_each_levels_best_window(tmp_path):
    # a run that collapses after a restart must still show its fall from the best before it
    def loop() -> TrainLoop:
        cfg = LearnerConfig(run_dir=str(tmp_path), port=free_port(2), device="cpu", level="1-1")
        return TrainLoop(cfg, LearnerMetrics(levels=["1-1"]))

    first = loop()
    try:
        for _ in range(50):  # a full window of flags
            first.levels.add("1-1", 3300, True)
        first.save_checkpoint()
    finally:
        first.close()
    resumed = loop()
    try:
        s = resumed.levels.summary()["1-1"]
        assert (s.best_flag_rate, s.best_progress, s.window) == (1.0, 1.0, 0)
        for _ in range(50):
            resumed.levels.add("1-1", 300, False)
        assert resumed.levels.summary()["1-1"].flag_rate_fall == 1.0
    finally:
        resumed.close()
