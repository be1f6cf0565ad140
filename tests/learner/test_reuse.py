"""The pass-count controller: fewer passes while data queues up, more while the learner waits."""

from __future__ import annotations

from learner.reuse import ReuseLimits, epoch_cap, next_epochs
from tests.learner.test_resume import loop

LIMITS = ReuseLimits(
    min_epochs=1, max_epochs=4, max_sample_insert_ratio=8.0, sequences_per_fresh=1.0
)


def step(current: int, queued: int, wait_s: float, compute_s: float, limits=LIMITS) -> int:
    return next_epochs(
        current, limits, queued_chunks=queued, batch_chunks=8, wait_s=wait_s, compute_s=compute_s
    )


def test_a_learner_behind_its_actors_makes_fewer_passes_down_to_one():
    assert step(4, queued=8, wait_s=0.0, compute_s=2.0) == 3
    assert step(1, queued=30, wait_s=0.0, compute_s=2.0) == 1


def test_a_waiting_learner_makes_more_passes_up_to_the_cap():
    assert step(1, queued=0, wait_s=1.0, compute_s=1.0) == 2
    assert step(4, queued=0, wait_s=5.0, compute_s=1.0) == 4


def test_a_balanced_learner_keeps_its_pass_count():
    assert step(3, queued=4, wait_s=0.1, compute_s=2.0) == 3


def test_the_sample_insert_limit_caps_the_passes():
    with_replay = ReuseLimits(1, max_epochs=8, max_sample_insert_ratio=4.0, sequences_per_fresh=2.0)
    assert epoch_cap(with_replay) == 2  # 2 passes x 2 sequences per fresh one = ratio 4
    assert step(2, queued=0, wait_s=9.0, compute_s=1.0, limits=with_replay) == 2
    tight = ReuseLimits(1, max_epochs=8, max_sample_insert_ratio=1.5, sequences_per_fresh=2.0)
    assert epoch_cap(tight) == 1  # never below one pass


def test_a_lowered_cap_applies_at_once():
    assert step(6, queued=0, wait_s=0.0, compute_s=1.0) == 4


def test_never_below_the_configured_passes():
    """A CPU learner sharing cores with its actors is always behind: it keeps --epochs."""
    limits = ReuseLimits(4, max_epochs=8, max_sample_insert_ratio=32.0, sequences_per_fresh=1.0)
    assert step(4, queued=8, wait_s=0.0, compute_s=2.0, limits=limits) == 4
    assert step(4, queued=0, wait_s=3.0, compute_s=1.0, limits=limits) == 5
    assert step(6, queued=8, wait_s=0.0, compute_s=2.0, limits=limits) == 5


def test_without_replay_the_passes_are_capped_by_max_epochs_alone(tmp_path):
    fresh_only = ReuseLimits(1, max_epochs=16, max_sample_insert_ratio=None, sequences_per_fresh=1)
    assert epoch_cap(fresh_only) == 16
    assert step(15, queued=0, wait_s=9.0, compute_s=1.0, limits=fresh_only) == 16
    for fraction, cap in ((0.0, 16), (0.5, 4)):  # replay's 8 sequences per fresh one, 2 a batch
        run = loop(tmp_path / str(fraction), max_epochs=16, replay_fraction=fraction)
        try:
            assert epoch_cap(run.reuse_limits) == cap
        finally:
            run.close()
