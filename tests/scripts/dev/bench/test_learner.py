"""The learner benchmark runs the learner's own update on chunks shaped like an actor's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from learner.batching import collate
from learner.config import LearnerConfig
from learner.ingest import to_host
from scripts.dev.bench import learner as bench_learner
from scripts.dev.bench.shared import synthetic_chunk


def test_synthetic_chunks_collate_into_the_learners_batch_layout():
    rng = np.random.default_rng(0)
    chunks = [to_host(synthetic_chunk(rng, 8, 3), 4, pin=False) for _ in range(2)]
    batch = collate(chunks, torch.device("cpu"))
    assert batch.frames.shape == (12, 6, 84, 84) and batch.frames.dtype == torch.uint8
    assert batch.behaviour_logits.shape == (8, 6, 7)
    assert batch.unroll_length == 8 and batch.num_sequences == 6
    # an episode ends at step t exactly where the next one starts at frame 4 + t
    assert torch.equal(batch.terminated, batch.first[4:])
    assert chunks[0].payload_bytes > 12 * 3 * 84 * 84


def test_update_timing_trains_on_mixed_batches():
    cfg = LearnerConfig(batch_chunks="1", unroll_length=8, replay_capacity=16, replay_fraction=0.5)
    row = bench_learner.time_updates(cfg, 4, torch.device("cpu"), iters=2, repeats=1)
    assert row["sequences_per_update"] == 8  # 4 fresh + 4 replayed at fraction 0.5
    assert row["replay_skipped_in_timed_updates"] == 0
    assert row["ms_per_update"] > 0
    assert row["fresh_env_frames_per_s"] == pytest.approx(
        4 * 8 * 4 / row["ms_per_update"] * 1e3, rel=0.01, abs=0.5
    )  # the bench rounds to whole frames/s: on a loaded machine that is more than 1%


def test_update_timing_with_a_recurrent_core_in_bf16_replays_its_states():
    cfg = LearnerConfig(
        batch_chunks="1", unroll_length=8, replay_capacity=16, replay_fraction=0.5, core="lstm",
        core_size=16, precision="bf16",
    )  # fmt: skip
    row = bench_learner.time_updates(cfg, 4, torch.device("cpu"), iters=2, repeats=1)
    assert row["sequences_per_update"] == 8 and row["replay_skipped_in_timed_updates"] == 0


@pytest.mark.slow
@pytest.mark.rehearsal
@pytest.mark.integration
def test_e2e_learner_process_trains_on_streamed_chunks(capsys):
    argv = ["--device", "cpu", "--batch-chunks", "1", "--unroll-length", "8", "--iters", "2",
            "--repeats", "1", "--e2e", "--senders", "1", "--seconds", "3"]  # fmt: skip
    assert bench_learner.main(argv) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    e2e = row["e2e"]
    assert e2e["updates_per_s"] > 0 and e2e["fresh_env_frames_per_s"] > 0
    assert 0.5 < e2e["wait_share"] + e2e["compute_share"] < 1.1  # the train loop's whole time
