"""The learner's config refuses combinations of settings that cannot train, naming the flags."""

from __future__ import annotations

from learner.config import LearnerConfig


def test_popart_and_return_norm_together_are_refused_with_the_flags_to_change():
    problems = LearnerConfig(return_norm=True).problems()
    assert any("--no-popart --return-norm" in p for p in problems)
    assert LearnerConfig(popart=False, return_norm=True).problems() == []


def test_orthogonal_init_with_the_resnet_is_refused_with_the_flag_to_change():
    problems = LearnerConfig(arch="resnet", init="orthogonal").problems()
    assert any("--init torch" in p for p in problems)
