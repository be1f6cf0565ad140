"""The learner's config refuses combinations of settings that cannot train, naming the flags."""

from __future__ import annotations

from learner.config import LearnerConfig


def test_settings_that_cannot_train_are_refused_with_the_flags_to_change():
    assert LearnerConfig().problems() == []
    problems = LearnerConfig(epochs=2, ppo_clip=0.0, max_epochs=1).problems()
    assert any("max_epochs (1) must be >= epochs (2)" in p for p in problems)
    assert any("set --ppo-clip (e.g. 0.1) or --epochs 1" in p for p in problems)
    problems = LearnerConfig(lr_final_fraction=0.1).problems()
    assert any("set --lr-anneal-frames" in p for p in problems)
