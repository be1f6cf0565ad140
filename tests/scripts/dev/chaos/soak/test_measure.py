"""The soak's trackers: env builds read from real actor processes' /metrics, learner lives and
hangs, checkpoints that load, what a learner crash lost."""

from __future__ import annotations

import pytest

from common.rundir import RunDir
from learner import checkpoint
from scripts.dev.chaos.soak.faults import Restart
from scripts.dev.chaos.soak.measure import (
    HANG_S,
    ActorLives,
    Checkpoints,
    LearnerWatch,
    Memory,
    last_words,
)
from tests import procs


@pytest.mark.slow
@pytest.mark.rehearsal
@pytest.mark.integration
def test_env_builds_and_failed_attempts_are_read_from_each_actor_lifes_metrics(
    tmp_path, monkeypatch
):
    """Two lives of a real actor whose first build attempt fails: each life's own counts."""
    port, metrics = procs.free_port(2), procs.free_port()
    lives = ActorLives()
    monkeypatch.setenv("FLAKY_FAILURES", "1")  # each process's first attempt fails, then 2 builds
    args = ["--num-envs", "2", "--build-retries", "1"]
    level = ("--level", "tests.fakes:FlakyBuild-v0")  # the learner's, which the actors build
    learner = procs.learner(tmp_path / "run", port, procs.free_port(), *level)
    try:
        for life in range(2):
            actor = procs.actor(tmp_path, port, 0, metrics, *args)
            try:
                procs.wait_until(
                    f"life {life}'s builds",
                    lambda: procs.scrape(metrics).get("mario_actor_env_build_seconds_count") == 2,
                    120,
                    [actor, learner],
                )
                lives.observe("actor-0", procs.scrape(metrics))
                lives.observe("actor-0", {})  # a scrape that got no answer
            finally:
                actor.kill9()
    finally:
        learner.stop()
    got = lives.summary(watchdog_exits=1)
    assert (got["actor_lives"], got["builds"], got["failures"]) == (2, 4, 2 + 1)
    assert got["mean_s"] > 0


def test_a_life_keeps_its_highest_counts_and_no_life_means_no_count():
    assert ActorLives().summary(0)["builds"] is None  # cannot be read: the soak fails on it
    lives = ActorLives()
    life = {"process_start_time_seconds": 100.0, "mario_actor_env_build_seconds_count": 4.0}
    lives.observe("actor-0", life)
    lives.observe("actor-0", life | {"mario_actor_env_build_seconds_count": 3.0})
    lives.observe("eval", {"process_start_time_seconds": 100.0})  # exposes no build count
    got = lives.summary(0)
    assert (got["actor_lives"], got["builds"], got["failures"]) == (1, 4, 0)


def test_learner_lives_updates_and_hangs():
    watch = LearnerWatch(last_progress=0.0)
    life = {"mario_learner_start_time_seconds": 5.0, "mario_policy_version": 10.0}
    assert watch.observe(life, 6.0, actor_up=True)  # a new life
    assert not watch.observe(life | {"mario_policy_version": 11.0}, 7.0, actor_up=True)
    assert not watch.observe(life | {"mario_policy_version": 12.0}, 9.5, actor_up=True)
    assert watch.longest_spacing == 2.5 and watch.version == 12
    watch.observe({}, 9.5 + HANG_S + 1, actor_up=True)  # the learner silent for too long
    watch.observe({}, 9.5 + HANG_S + 2, actor_up=True)
    assert watch.hangs == 1
    again = {"mario_learner_start_time_seconds": 80.0, "mario_policy_version": 11.0}
    assert watch.observe(again, 81.0, actor_up=True) and watch.version == 11


def test_every_checkpoint_on_disk_is_loaded_and_a_broken_one_is_the_finding(tmp_path):
    run = RunDir(tmp_path)
    for version in (3, 7):
        checkpoint.save(run, {"policy_version": version, "saved_at": 1000.0 + version}, version)
    ckpts = Checkpoints(run)
    assert ckpts.newest_version() == 7
    assert ckpts.check() == {3: 1003.0, 7: 1007.0}
    (run.checkpoints / "ckpt-0000000009.pt").write_bytes(b"torn")
    (run.checkpoints / ".ckpt-0000000010.pt.tmp-123").write_bytes(b"cut short")
    got = ckpts.summary()
    assert (got["checked"], got["loaded"], got["stale_temp_files"]) == (5, 4, 1)
    assert got["errors"][0].startswith("ckpt-0000000009.pt:")


def test_a_crash_may_lose_one_interval_and_the_update_across_its_end():
    def crash(updates: int, lost_s: float) -> dict:
        return Restart("crash", 0.0, updates, 10, lost_s, bound_s=7.0, actors={}).summary()

    assert crash(13, lost_s=6.9)["within_interval"]
    assert not crash(13, lost_s=7.1)["within_interval"]
    assert crash(10, lost_s=60.0)["within_interval"]  # nothing lost
    assert crash(13, 1.0)["lost_updates"] == 3


def test_a_crashed_programs_last_words_are_its_last_traceback_or_its_last_lines():
    lives = [f"life {i} starting" for i in range(3)]
    first = ["Traceback (most recent call last):", '  File "a.py"', "KeyError: 'old'"]
    last = ["Traceback (most recent call last):", '  File "b.py"', "OSError: [Errno 98] in use"]
    log = "\n".join([*lives, *first, *lives, *last, "shutting down"])
    assert last_words(log) == "\n".join([*last, "shutting down"])
    assert last_words(log, lines=2) == "\n".join(last[:2])
    plain = "\n".join(f"line {i}" for i in range(40))
    assert last_words(plain, lines=3) == "line 37\nline 38\nline 39"
    assert last_words("") == ""


def test_memory_reports_the_heap_in_use_beside_resident_memory():
    """Resident memory that steps up while the heap in use stays flat: both slopes, per role."""
    memory = Memory()
    for i in range(60):  # 5 minutes, every 5 s, of a learner 100 s old at the first sample
        page = {"process_resident_memory_bytes": (800 + 2 * (i // 12)) * 2**20}
        memory.sample("learner", page | {"mario_process_heap_in_use_bytes": 250 * 2**20}, 5.0 * i, 100 + 5.0 * i)  # fmt: skip
        memory.sample("actor", page, 5.0 * i, 100 + 5.0 * i)  # a page without the heap gauge
    s = memory.summary(t0=0.0, warm_s=0.0)
    assert s["memory_slope_mib_per_min"]["learner"] == pytest.approx(2.0, abs=0.5)
    assert s["heap_slope_mib_per_min"]["learner"] == pytest.approx(0.0, abs=1e-9)
    assert s["heap_slope_mib_per_min"]["actor"] is None  # no heap samples: no slope
    assert s["memory_samples"]["learner"][0] == [0.0, 800.0, 100.0, 250.0]
