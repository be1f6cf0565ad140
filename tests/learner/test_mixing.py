"""Replay mixing: layout round trip, batch composition, the rate limiter, priorities."""

from __future__ import annotations

import torch

from learner.batching import Batch, concat, from_sequences, to_sequences
from learner.mixing import ReplayMixer
from learner.replay import PrioritizedReplay

T, A, S = 3, 5, 6


def batch(n: int, seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        frames=torch.randint(0, 256, (T + 4, n, S, S), dtype=torch.uint8, generator=g),
        first=torch.rand(T + 4, n, generator=g) < 0.3,
        actions=torch.randint(0, A, (T, n), generator=g),
        rewards=torch.randn(T, n, generator=g),
        terminated=torch.rand(T, n, generator=g) < 0.2,
        truncated=torch.zeros(T, n, dtype=torch.bool),
        behaviour_logits=torch.randn(T, n, A, generator=g),
        final_frames=torch.randint(0, 256, (n, S, S), dtype=torch.uint8, generator=g),
        final_t=torch.full((n,), -1),
        last_actions=torch.randint(0, A + 1, (n,), generator=g),
        core_state=torch.randn(n, 4, generator=g),  # replay keeps a recurrent core's state too
        level=torch.randint(0, 4, (T, n), generator=g),  # and each step's level
        weights=torch.ones(n),
    )


def same(a: Batch, b: Batch) -> None:
    assert vars(a).keys() == vars(b).keys()
    for name, tensor in vars(a).items():
        torch.testing.assert_close(tensor, getattr(b, name), rtol=0, atol=0)


def mixer(fraction=0.5, ratio=4.0, min_size=4, capacity=64) -> ReplayMixer:
    replay = PrioritizedReplay(capacity, alpha=0.6, beta=0.4, device="cpu")
    return ReplayMixer(replay, fraction=fraction, max_sample_insert_ratio=ratio, min_size=min_size,
                       beta0=0.4, beta_anneal_updates=100)  # fmt: skip


def test_sequence_layout_round_trips():
    b = batch(4, 0)
    same(from_sequences(to_sequences(b), b.weights), b)
    two = concat(b, batch(2, 1))
    assert two.num_sequences == 6 and two.frames.shape == (T + 4, 6, S, S)


def test_skips_until_min_size_then_mixes_the_configured_share():
    m = mixer(fraction=0.5, min_size=4)
    fresh = batch(4, 0)
    first = m.mix(fresh, updates=0)
    assert first.indices is None and first.batch is fresh and m.skipped == 1  # empty buffer
    m.after_update(first, torch.ones(4))
    assert m.replay.size == 4 and m.inserted == 4
    mixed = m.mix(batch(4, 1), updates=1)
    assert mixed.fresh == 4 and mixed.batch.num_sequences == 8  # f = 0.5: as many replayed
    assert mixed.indices is not None and mixed.indices.shape == (4,)
    torch.testing.assert_close(mixed.batch.weights[:4], torch.ones(4))  # fresh data: weight 1
    assert float(mixed.batch.weights[4:].max()) == 1.0  # replay: normalised IS weights
    # The replayed sequences are stored copies of what was inserted.
    stored = {bytes(f.numpy()) for f in fresh.frames.transpose(0, 1)}
    assert all(bytes(f.numpy()) in stored for f in mixed.batch.frames[:, 4:].transpose(0, 1))


def test_rate_limiter_skips_replay_above_the_sample_insert_ratio():
    m = mixer(fraction=0.75, ratio=1.0, min_size=1)
    m.after_update(m.mix(batch(4, 0), 0), torch.ones(4))  # 4 inserted
    mixed = m.mix(batch(4, 1), 1)  # would sample 12 > 1.0 x 4 inserted
    assert mixed.indices is None and m.skipped == 2 and m.sampled == 0
    assert m.sample_insert_ratio <= 1.0


def test_after_update_sets_priorities_of_fresh_and_replayed():
    m = mixer(fraction=0.5, min_size=1)
    m.after_update(m.mix(batch(2, 0), 0), torch.tensor([1.0, 1.0]))
    mixed = m.mix(batch(2, 1), 1)
    m.after_update(mixed, torch.tensor([5.0, 6.0, 50.0, 60.0]))
    p = m.replay._priorities[: m.replay.size]  # replayed slots get 50/60, fresh ones 5/6
    assert {5.0, 6.0} <= set(p.tolist())
    assert set(p[mixed.indices].tolist()) <= {50.0, 60.0}


def test_beta_anneals_to_one():
    m = mixer(fraction=0.5, min_size=1)
    m.after_update(m.mix(batch(2, 0), 0), torch.ones(2))
    m.mix(batch(2, 1), updates=50)
    assert abs(m.replay.beta - 0.7) < 1e-9
    m.mix(batch(2, 2), updates=10_000)
    assert m.replay.beta == 1.0
