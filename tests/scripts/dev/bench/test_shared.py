"""The benchmarks' shared parts against the real emulator and the learner's real ingest."""

from __future__ import annotations

import pytest

from scripts.dev.bench import pipeline
from scripts.dev.bench.shared import raw_frames_per_s, summed_rate

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]  # real emulators and processes


def test_rates_of_several_processes_add_up():
    one = raw_frames_per_s(0.3, emulators=2)
    assert one > 100  # frames/s: even a slow machine emulates far more
    assert summed_rate(raw_frames_per_s, (0.3,), 2) > 100


def test_the_learners_ingest_accepts_the_streamed_synthetic_chunks():
    assert pipeline.ingest_mb_per_s(1.0, unroll=8, num_envs=2, senders=1) > 0
