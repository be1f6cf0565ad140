"""The learner's config refuses combinations of settings that cannot train, naming the flags."""

from __future__ import annotations

import pytest

from learner.config import LearnerConfig


def test_settings_that_cannot_train_are_refused_with_the_flags_to_change():
    assert LearnerConfig().problems() == []
    problems = LearnerConfig(epochs=2, ppo_clip=0.0, max_epochs=1).problems()
    assert any("max_epochs (1) must be >= epochs (2)" in p for p in problems)
    assert any("set --ppo-clip (e.g. 0.1) or --epochs 1" in p for p in problems)


def test_the_env_spec_is_the_learners_settings_with_the_env_specs_defaults_but_the_recipes():
    from common.env_spec import EnvSpec

    # training is perturbed as evaluation is (Machado et al. 2018) and a quarter of a level's
    # episodes start near the frontier, none of a set's; EnvSpec stays the plain env
    recipe = EnvSpec(sticky_actions=0.25, noop_max=30, frontier_starts=0.25)
    assert LearnerConfig().env_spec() == recipe
    assert LearnerConfig().resolved().frontier_starts == 0.25
    for level in ("world:1", "1-1,1-2", "all"):
        assert LearnerConfig(level=level).env_spec().frontier_starts == 0
        assert LearnerConfig(level=level).resolved().frontier_starts == 0
    assert LearnerConfig(level="world:1", frontier_starts=0.5).env_spec().frontier_starts == 0.5
    assert LearnerConfig(frontier_starts=0).env_spec().frontier_starts == 0
    assert (EnvSpec().sticky_actions, EnvSpec().noop_max, EnvSpec().frontier_starts) == (0, 0, 0)
    plain = LearnerConfig(sticky_actions=0, noop_max=0, frontier_starts=0)
    assert plain.env_spec() == EnvSpec()
    cfg = LearnerConfig(
        level="1-2", frame_skip=2, sticky_actions=0.1, noop_max=0, death_penalty=5.0
    )
    assert cfg.env_spec() == EnvSpec(
        level="1-2", frame_skip=2, sticky_actions=0.1, death_penalty=5.0, frontier_starts=0.25
    )
    problems = LearnerConfig(level="1-1,9-9", frame_size=4).problems()
    assert any("'9-9'" in p for p in problems) and any("frame_size" in p for p in problems)


def test_a_cutoff_below_the_unroll_length_is_refused_with_the_flags_to_change():
    """A chunk holds one truncation per env: the cutoff must not fit twice in one."""
    for cutoff in (1, 31):
        problems = LearnerConfig(no_progress_steps=cutoff, unroll_length=32).problems()
        assert any("set --no-progress-steps to 0 or >= 32" in p for p in problems), problems
    for fine in (0, 32):
        assert LearnerConfig(no_progress_steps=fine, unroll_length=32).problems() == []


def test_a_device_is_auto_cpu_cuda_or_cuda_with_an_index():
    for device in ("auto", "cpu", "cuda", "cuda:0", "cuda:12"):
        assert LearnerConfig(device=device).problems() == []
    for device in ("gpu", "cuda:x", "cuda:", "cuda:0:1"):  # cuda:x once passed, then crashed
        assert LearnerConfig(device=device).problems() == [
            f"device must be auto, cpu, cuda or cuda:N (N: a GPU's index, from 0), got {device!r}"
        ]


def test_a_level_that_is_neither_a_stage_nor_a_registered_gym_id_is_refused():
    from common import config as config_io
    from common.config import ConfigError

    for level, problem in (("1-5", "'1-5': not a stage W-S"), ("9-9", "'9-9': not a stage W-S"),
                           ("Nope-v0", "neither a stage nor a registered Gymnasium id")):  # fmt: skip
        with pytest.raises(ConfigError) as exc:
            config_io.from_dict(LearnerConfig, {"level": level})
        assert any(problem in p for p in exc.value.problems), exc.value.problems
    assert LearnerConfig(level="tests.fakes:Corridor-v0").problems() == []


def test_the_switches_that_lost_to_per_level_popart_are_refused_naming_the_study(capsys):
    from common import config as config_io

    argv = ["--self-imitation", "0.5", "--level-sampling", "value-error"]
    with pytest.raises(SystemExit):
        config_io.load(LearnerConfig, argv, prog="learner", description="")
    assert capsys.readouterr().err.splitlines()[1:] == [
        "  - --self-imitation: self-imitation lost to per-level PopArt on World 1 and was removed "
        "(docs/lab/2026-12-many-levels-study.md): remove it",
        "  - --level-sampling: level sampling by value error lost to per-level PopArt on World 1 "
        "and was removed (docs/lab/2026-12-many-levels-study.md): remove it",
    ]


def test_per_level_popart_is_refused_naming_the_study(capsys):
    """Asked for by either flag or by a key, it is refused with what World 1 showed; the network
    it trained is refused at resume (tests/learner/test_checkpoint.py)."""
    from common import config as config_io
    from common.config import ConfigError

    why = (
        "per-level PopArt led World 1's set early and then fell behind today's defaults "
        "(docs/lab/2026-12-many-levels-study.md): remove it"
    )
    for flag in ("--popart-per-level", "--no-popart-per-level"):
        with pytest.raises(SystemExit):
            config_io.load(LearnerConfig, [flag], prog="learner", description="")
        assert capsys.readouterr().err.splitlines()[1:] == [f"  - --popart-per-level: {why}"]
    with pytest.raises(ConfigError) as exc:
        config_io.from_dict(LearnerConfig, {"popart_per_level": True})
    assert [p for p in exc.value.problems if why in p] == exc.value.problems != []


def test_frontier_starts_by_stall_rate_is_refused_naming_the_study(capsys):
    """Asked for by flag or by key, it is refused with what World 1 showed; --frontier-starts
    itself stays."""
    from common import config as config_io
    from common.config import ConfigError

    why = (
        "frontier starts by stall rate trailed today's defaults on World 1 "
        "(docs/lab/2026-12-many-levels-study.md): remove it; --frontier-starts alone starts that "
        "share of every level's episodes near its frontier"
    )
    argv = ["--level", "world:1", "--frontier-starts", "0.5", "--frontier-starts-by", "stall"]
    with pytest.raises(SystemExit):
        config_io.load(LearnerConfig, argv, prog="learner", description="")
    assert capsys.readouterr().err.splitlines()[1:] == [f"  - --frontier-starts-by: {why}"]
    with pytest.raises(ConfigError) as exc:
        config_io.from_dict(LearnerConfig, {"frontier_starts_by": "flat"})
    assert [p for p in exc.value.problems if why in p] == exc.value.problems != []
    cfg = config_io.load(LearnerConfig, argv[:4], prog="learner", description="")
    assert cfg.env_spec().frontier_starts == 0.5
