"""Batch sizes: the rule, the one flag that sets it (--batch-chunks N or MIN-MAX), every
combination the learner cannot honour refused, and a real train loop over real sockets that
neither stalls on a slow actor nor trains on one chunk when many are queued, and that a pinned
batch keeps pinned."""

from __future__ import annotations

import math
import threading
import time

import pytest

from common import config as config_io
from common.metrics import LearnerMetrics
from learner.batch_size import BatchSize, chunks_to_take
from learner.config import LearnerConfig
from learner.loop import TrainLoop
from tests.learner.test_ingest import ENV, Client, chunk, register
from tests.procs import free_port

T = 4  # tests.learner.test_ingest's chunks: T = 4 steps of K = 2 envs, 84x84 frames, 7 actions

# ---- the rule ---------------------------------------------------------------------------------


def test_min_or_more_queued_takes_them_all_up_to_max():
    size = BatchSize(min_chunks=4, max_chunks=8, wait_s=2.0)
    assert chunks_to_take(4, size, waited_s=0.0) == 4
    assert chunks_to_take(6, size, waited_s=0.0) == 6
    assert chunks_to_take(8, size, waited_s=0.0) == 8
    assert chunks_to_take(11, size, waited_s=5.0) == 8


def test_fewer_than_min_waits_until_the_deadline_then_takes_what_is_there():
    size = BatchSize(min_chunks=4, max_chunks=8, wait_s=2.0)
    assert chunks_to_take(3, size, waited_s=1.9) == 0
    assert chunks_to_take(3, size, waited_s=2.0) == 3
    assert chunks_to_take(1, size, waited_s=30.0) == 1
    assert chunks_to_take(0, size, waited_s=30.0) == 0  # nothing to train on: keep waiting


def test_min_equal_to_max_is_a_fixed_batch_with_a_deadline():
    size = BatchSize(min_chunks=2, max_chunks=2, wait_s=0.5)
    assert [chunks_to_take(q, size, 0.0) for q in range(5)] == [0, 0, 2, 2, 2]
    assert chunks_to_take(1, size, 0.5) == 1


def test_a_pinned_batch_never_takes_fewer():
    size = BatchSize(min_chunks=4, max_chunks=4, wait_s=math.inf)
    assert size.pinned and not BatchSize(4, 4, 600.0).pinned
    assert [chunks_to_take(q, size, 1e9) for q in range(7)] == [0, 0, 0, 0, 4, 4, 4]


# ---- the config --------------------------------------------------------------------------------


def load(*argv: str) -> LearnerConfig:
    return config_io.load(LearnerConfig, list(argv), prog="learner", description="")


def refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        load(*argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_the_default_takes_four_to_eight_chunks_and_n_pins_the_batch():
    assert load().batch_size() == BatchSize(4, 8, 2.0)
    assert load("--batch-chunks", "2-6").batch_size() == BatchSize(2, 6, 2.0)
    assert load("--batch-chunks", "3-3", "--batch-wait-s", "0.5").batch_size() == (3, 3, 0.5)
    assert load("--batch-wait-s", "0.5").batch_size().wait_s == 0.5
    pinned = load("--batch-chunks", "4")  # what the studies pin a lone run's batch with
    assert pinned.batch_size() == BatchSize(4, 4, math.inf) and pinned.batch_size().pinned
    # RUN/config.json records what ran: a self-sized batch's wait, a pinned one's none
    assert (load().resolved().batch_wait_s, pinned.resolved().batch_wait_s) == (2.0, None)


def test_the_former_flags_are_refused_naming_the_one_flag(capsys):
    """--batch-chunks 6 --min-batch-chunks 4 used to drop the minimum without a word."""
    for argv in (
        ("--batch-chunks", "6", "--min-batch-chunks", "4"),
        ("--min-batch-chunks", "4", "--max-batch-chunks", "8"),
        ("--max-batch-chunks", "16"),
    ):
        err = refused(capsys, *argv)
        assert "the batch size is one flag now: --batch-chunks MIN-MAX" in err, argv
        assert "or --batch-chunks N (always N)" in err


def test_a_pinned_batch_with_a_wait_is_refused_naming_both_ways_out(capsys):
    """A pinned batch waits as long as it takes: a wait it would ignore is refused."""
    err = refused(capsys, "--batch-chunks", "4", "--batch-wait-s", "600")
    assert "--batch-wait-s 600 does nothing with a pinned --batch-chunks 4" in err
    assert "drop --batch-wait-s, or give --batch-chunks 4-4 to train on fewer after 600 s" in err


def test_a_queue_smaller_than_the_batch_is_refused_with_what_to_change(capsys):
    err = refused(capsys, "--batch-chunks", "4-16")
    assert "queue_chunks (8) must be >= the most chunks an update takes (16" in err
    assert "raise --queue-chunks to 16 or lower --batch-chunks" in err
    err = refused(capsys, "--batch-chunks", "12")
    assert "raise --queue-chunks to 12 or lower --batch-chunks" in err
    assert load("--batch-chunks", "4-16", "--queue-chunks", "16").batch_size().max_chunks == 16


def test_inconsistent_batch_limits_are_refused(capsys):
    err = refused(capsys, "--batch-chunks", "6-5")
    assert "--batch-chunks 6-5: MAX (5) must be >= MIN (6); give --batch-chunks 5-6" in err
    for bad in ("0", "0-4"):
        err = refused(capsys, "--batch-chunks", bad)
        assert f"--batch-chunks {bad}: an update takes at least 1 chunk" in err
    for bad in ("none", "4-", "four", "-4", "4-8-16"):
        err = refused(capsys, "--batch-chunks", bad)
        assert "--batch-chunks must be N (every update N chunks) or MIN-MAX" in err, bad
    err = refused(capsys, "--batch-wait-s", "-1")
    assert "--batch-wait-s: must be >= 0, got -1.0" in err


# ---- a real train loop ------------------------------------------------------------------------


class Running:
    """A real TrainLoop (CPU, real Ingest on 127.0.0.1) and one actor socket; `run` runs the loop
    in a thread, else only its ingest runs and a test takes batches by hand."""

    def __init__(self, tmp_path, *, run: bool = True, **cfg):
        port = free_port(2)
        self.cfg = LearnerConfig(
            run_dir=str(tmp_path / "run"),
            run_id="r",  # as tests.learner.test_ingest registers
            level=ENV.level,  # its chunks' level set
            port=port,
            device="cpu",
            unroll_length=T,
            queue_chunks=16,
            credits_per_actor=16,
            checkpoint_interval_s=3600,
            **cfg,
        )
        self.metrics = LearnerMetrics()
        self.loop = TrainLoop(self.cfg, self.metrics)
        self.thread = threading.Thread(target=self.loop.run, daemon=True) if run else None
        if self.thread:
            self.thread.start()
        else:
            self.loop.ingest.start()
        self.actor = Client(port)
        self.actor.send(register())
        assert self.actor.recv().credits == 16
        self.seq = 0

    def send(self, n: int) -> None:
        for _ in range(n):
            self.actor.send(chunk(seq=self.seq))
            self.seq += 1

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels or None) or 0.0

    def wait_until(self, what: str, check, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if self.thread:
                assert self.thread.is_alive(), f"the train loop stopped while waiting for {what}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def close(self) -> None:
        self.loop.stop()
        if self.thread:
            self.thread.join(30)
        self.loop.close()


@pytest.fixture
def running(tmp_path):
    made: list[Running] = []

    def make(**cfg) -> Running:
        made.append(Running(tmp_path / str(len(made)), **cfg))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_a_slow_actor_does_not_stall_the_learner(running):
    r = running(batch_chunks="4-8", batch_wait_s=0.5)
    r.send(1)  # and nothing more: the other three chunks of a minimum batch never come
    r.wait_until("an update", lambda: r.value("mario_learner_updates_total") >= 1)
    assert r.value("mario_learner_batch_chunks_count") == 1
    assert r.value("mario_learner_batch_chunks_sum") == 1
    assert r.value("mario_learner_wait_seconds_total") >= 0.5  # it waited for more first


def test_queued_chunks_are_trained_on_together_not_one_by_one(running):
    # a deadline no test reaches: every batch taken must hold at least the minimum
    r = running(batch_chunks="4-8", batch_wait_s=600)
    r.send(8)
    r.wait_until("an update", lambda: r.value("mario_learner_updates_total") >= 1)
    assert r.value("mario_learner_batch_chunks_bucket", le="2.0") == 0
    assert r.value("mario_learner_batch_chunks_sum") >= 4


def test_the_loop_takes_everything_queued_up_to_max_and_the_rest_at_the_deadline(running):
    r = running(run=False, batch_chunks="4-8", batch_wait_s=0.3)
    r.send(7)
    r.wait_until("7 chunks queued", lambda: r.loop.ingest.queued() == 7)
    assert len(r.loop._take_batch()) == 7  # all of them, not the minimum
    r.send(10)
    r.wait_until("10 chunks queued", lambda: r.loop.ingest.queued() == 10)
    assert len(r.loop._take_batch()) == 8  # the most one update takes
    start = time.monotonic()
    assert len(r.loop._take_batch()) == 2  # fewer than the minimum, once the deadline passed
    assert time.monotonic() - start >= 0.3
    r.loop.stop()
    assert r.loop._take_batch() is None  # a stopping loop takes nothing


def test_a_pinned_batch_waits_for_its_chunks_however_long(running):
    """The loop's own wait: past the self-sized default's 2 s, with 3 of 4 chunks queued, a
    pinned batch is still waiting; the 4th chunk makes the batch."""
    r = running(run=False, batch_chunks="4")
    r.send(3)
    r.wait_until("3 chunks queued", lambda: r.loop.ingest.queued() == 3)
    took: list = []
    taker = threading.Thread(target=lambda: took.append(r.loop._take_batch()), daemon=True)
    taker.start()
    taker.join(2.5)  # the default wait, and a margin: it has not given up
    assert taker.is_alive() and r.loop.ingest.queued() == 3
    r.send(1)
    taker.join(30)
    assert not taker.is_alive() and len(took[0]) == 4
