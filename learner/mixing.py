"""Mixing prioritized replay into the learner's batches, with a sample:insert rate limiter.

Each update trains on the fresh sequences of B chunks plus n_replay = round(N_fresh * f / (1 - f))
replayed ones for a replay fraction f. Replayed sequences keep their behaviour logits, so V-trace
corrects them like any off-policy data, and their losses are weighted by prioritized sampling's
importance weights. After the update, fresh sequences enter the buffer with the priorities this
update computed and the replayed ones get theirs refreshed (mean |v_s - V(x_s)|). The rate
limiter (after Reverb's SampleToInsertRatio) caps sequences sampled per sequence inserted at
`max_sample_insert_ratio`: a batch that would exceed it, or a buffer of fewer than `min_size`
sequences, **skips** replay (counted) and trains on fresh data alone, never a block. A run sets
--replay-capacity and --replay-fraction; the rest are the constants below (PER's, Schaul et al.
2016 Sec. 3.4, and the limiter's).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from learner.batching import Batch, concat, from_sequences, sequence_example, to_sequences
from learner.replay import PrioritizedReplay, check_fits, estimate_bytes

ALPHA = 0.6  # priority exponent: P(i) ~ p_i^alpha
BETA = 0.4  # importance-weight exponent at the start, annealed linearly to 1 ...
BETA_ANNEAL_UPDATES = 100_000  # ... over this many updates
MIN_SIZE = 64  # sequences in replay before it is sampled (a smaller buffer: once full)
MAX_SAMPLE_INSERT_RATIO = 8.0  # sequences trained on per fresh one, at most


class Mixed(NamedTuple):
    batch: Batch  # fresh sequences first, then replayed ones
    fresh: int  # number of fresh sequences
    indices: torch.Tensor | None  # replay slots of the replayed sequences, or None


class ReplayMixer:
    def __init__(
        self,
        replay: PrioritizedReplay,
        *,
        fraction: float,
        max_sample_insert_ratio: float,
        min_size: int,
        beta0: float,
        beta_anneal_updates: int,
    ):
        self.replay = replay
        self.fraction = fraction
        self.max_ratio = max_sample_insert_ratio
        self.min_size = min_size
        self.beta0 = beta0
        self.beta_anneal_updates = beta_anneal_updates
        self.inserted = 0
        self.sampled = 0
        self.skipped = 0

    @classmethod
    def create(cls, cfg, device: torch.device) -> ReplayMixer:
        """From the learner config; refuses a capacity that does not fit the device's memory."""
        S = cfg.frame_size
        sizes = {"T": cfg.unroll_length, "H": S, "W": S, "A": cfg.num_actions}
        example = sequence_example(sizes | {"C": cfg.model_spec().state_size})
        check_fits(
            estimate_bytes(example, cfg.replay_capacity), device, capacity=cfg.replay_capacity
        )
        replay = PrioritizedReplay(cfg.replay_capacity, ALPHA, BETA, device)
        return cls(
            replay, fraction=cfg.replay_fraction, max_sample_insert_ratio=MAX_SAMPLE_INSERT_RATIO,
            min_size=min(MIN_SIZE, cfg.replay_capacity), beta0=BETA,
            beta_anneal_updates=BETA_ANNEAL_UPDATES,
        )  # fmt: skip

    @property
    def sample_insert_ratio(self) -> float:
        return self.sampled / max(1, self.inserted)

    def mix(self, fresh: Batch, updates: int) -> Mixed:
        n_fresh = fresh.num_sequences
        n = round(n_fresh * self.fraction / (1.0 - self.fraction))
        too_early = self.replay.size < max(self.min_size, 1)
        too_fast = (self.sampled + n) > self.max_ratio * max(1, self.inserted)
        if n == 0 or too_early or too_fast:
            self.skipped += n > 0
            return Mixed(fresh, n_fresh, None)
        progress = min(1.0, updates / max(1, self.beta_anneal_updates))
        self.replay.beta = self.beta0 + (1.0 - self.beta0) * progress
        sample = self.replay.sample(n)
        self.sampled += n
        replayed = from_sequences(sample.batch, sample.weights)
        return Mixed(concat(fresh, replayed), n_fresh, sample.indices)

    def after_update(self, mixed: Mixed, priorities: torch.Tensor) -> None:
        """priorities: [N] from the update, fresh sequences first (see `mix`)."""
        if mixed.indices is not None:
            self.replay.update_priorities(mixed.indices, priorities[mixed.fresh :])
        fresh = {k: v[: mixed.fresh] for k, v in to_sequences(mixed.batch).items()}
        self.replay.add(fresh, priorities[: mixed.fresh].detach())
        self.inserted += mixed.fresh
