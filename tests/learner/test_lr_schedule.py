"""--lr-anneal-frames: the rate falls linearly over the run's env frames to its final share and is
held there (against a slow reference); a real learner trained by a real actor applies it, reports
it, and ends at the final rate; by default it falls to a tenth over 1.5 M frames, and a length of 0
is a flat rate."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest

from common.rundir import RunDir
from learner.config import LearnerConfig
from learner.lr_schedule import learning_rate
from tests import procs


def reference(base: float, frames: int, anneal: int, final: float) -> float:
    """np.interp between the two ends of the ramp, clamped past them."""
    if anneal == 0:
        return base
    return float(np.interp(frames, [0, anneal], [base, base * final]))


@pytest.mark.parametrize("anneal", [0, 1, 1000, 2_000_000])
@pytest.mark.parametrize("final", [0.0, 0.1, 1.0])
def test_the_rate_matches_the_reference_at_every_frame_count(anneal, final):
    for frames in [0, 1, 7, 499, 500, 999, 1000, 1001, 1_000_000, 2_000_000, 3_000_000]:
        got = learning_rate(6e-4, frames, anneal, final)
        assert got == pytest.approx(reference(6e-4, frames, anneal, final), rel=1e-12, abs=1e-18)


def test_the_rate_falls_monotonically_and_is_held_at_its_end():
    rates = [learning_rate(1e-3, f, 10_000, 0.25) for f in range(0, 20_000, 97)]
    assert all(a >= b for a, b in pairwise(rates))
    assert rates[0] == 1e-3 and learning_rate(1e-3, 5_000, 10_000, 0.25) == pytest.approx(6.25e-4)
    assert learning_rate(1e-3, 10_000, 10_000, 0.25) == learning_rate(1e-3, 10**9, 10_000, 0.25)


def test_by_default_the_rate_falls_to_a_tenth_over_1_5_m_frames_and_is_held_there():
    cfg = LearnerConfig()
    base, anneal, final = cfg.learning_rate, cfg.lr_anneal_frames, cfg.lr_final_fraction
    rate = {f: learning_rate(base, f, anneal, final) for f in (0, 750_000, 1_500_000, 4_000_000)}
    assert rate[0] == 1e-3 and rate[750_000] == pytest.approx(5.5e-4)
    assert rate[1_500_000] == rate[4_000_000] == pytest.approx(1e-4)


def test_an_anneal_length_of_0_is_a_flat_rate_whatever_the_final_share():
    """--lr-anneal-frames 0 alone turns the default fall off: the final share is then unused."""
    cfg = LearnerConfig(lr_anneal_frames=0)
    assert cfg.problems() == [] and cfg.lr_final_fraction == 0.1
    assert learning_rate(1e-3, 3_000_000, cfg.lr_anneal_frames, cfg.lr_final_fraction) == 1e-3


@pytest.mark.slow
@pytest.mark.integration
def test_a_learner_anneals_its_rate_over_the_frames_its_actors_send(tmp_path):
    run, anneal, base, final = RunDir(tmp_path / "run"), 1_536, 2e-3, 0.25
    port, lport = procs.free_port(2), procs.free_port()
    learner = procs.learner(
        run.root, port, lport, "--unroll-length", "16", "--batch-chunks", "1",
        "--learning-rate", str(base), "--lr-anneal-frames", str(anneal),
        "--lr-final-fraction", str(final),
    )  # fmt: skip
    actor = procs.actor(tmp_path, port, 0, procs.free_port(), "--num-envs", "2")

    def rows() -> list[dict]:
        out = []
        for line in run.metrics.read_text().splitlines() if run.metrics.exists() else []:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line still being written
        return out

    def at_the_final_rate() -> bool:
        """A record written after an update that began past the ramp's end."""
        return any(r.get("learning_rate") == pytest.approx(base * final) for r in rows())

    try:
        procs.wait_until("a record at the final rate", at_the_final_rate, 600, [learner, actor])
        assert procs.scrape(lport)["mario_learner_learning_rate"] == pytest.approx(base * final)
    finally:
        actor.stop()
        learner.stop()
    rates = [r["learning_rate"] for r in rows() if "learning_rate" in r]
    assert all(a >= b for a, b in pairwise(rates)), rates
    # each update ran at the rate of the frames before it: a record's rate is at most a chunk's
    # frames (16 steps of 4 frames) behind the schedule at the record's own frames
    for r in rows():
        if "learning_rate" in r:
            late = learning_rate(base, r["env_frames"], anneal, final)
            early = learning_rate(base, max(r["env_frames"] - 16 * 4, 0), anneal, final)
            assert late - 1e-12 <= r["learning_rate"] <= early + 1e-12, r
