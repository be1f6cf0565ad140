"""The eval actor (`python -m actor.eval`) on a live run: mario_eval_* metrics of both policies,
played perturbed, and the best episode's video; a set of levels taken in turn; the best policy
kept after a challenge on fresh episodes, with the run's env frames, read back by a restarted
eval actor, and played by `make eval` when no checkpoint is named."""

from __future__ import annotations

import json
import math
import re

import av
import pytest

from common.levels import level_lengths
from common.rundir import RunDir
from scripts.evaluate import main as evaluate
from scripts.evaluate.checkpoint import load_checkpoint
from tests import procs
from tests.fakes import CORRIDOR_LEARNER_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LEVEL = "tests.fakes:Corridor-v0"
LOGGED = re.compile(r"eval v\d+ \S+ (greedy|sampled): max x (\d+), ")
SETTLED = re.compile(r"challenge of v\d+: .*; best policy v(\d+), score ([\d.]+), in ")


def key(name: str, policy: str) -> str:
    return f"{name}{{level={LEVEL},policy={policy}}}"


def logged_max_x(evaluator: procs.Proc, policy: str) -> list[int]:
    return [int(x) for p, x in LOGGED.findall(evaluator.output()) if p == policy]


def test_eval_actor_exports_both_policies_and_keeps_the_best_video(tmp_path):
    port, lport, eport = procs.free_port(2), procs.free_port(), procs.free_port()
    learner = procs.learner(
        tmp_path / "run", port, lport, "--unroll-length", "16", "--batch-chunks", "1",
        *CORRIDOR_LEARNER_ARGS,
    )  # fmt: skip
    trainer = procs.actor(tmp_path, port, 0, procs.free_port(), "--num-envs", "2")
    evaluator = procs.actor(
        tmp_path, port, 1, eport, "--eval-dir", str(tmp_path / "eval"),
        "--eval-interval-s", "0.5", "--eval-window", "3", "--eval-episodes", "1",
        "--eval-sampled-episodes", "2", module="actor.eval",
    )  # fmt: skip
    everyone = [learner, trainer, evaluator]
    episodes = "mario_eval_episodes_total"
    try:
        procs.wait_until(
            "2 greedy and 4 sampled eval episodes",
            lambda: (
                procs.scrape(eport).get(key(episodes, "greedy"), 0) >= 2
                and procs.scrape(eport).get(key(episodes, "sampled"), 0) >= 4
            ),
            120,
            everyone,
        )
        m = procs.scrape(eport)
        greedy, sampled = m[key(episodes, "greedy")], m[key(episodes, "sampled")]
        # each evaluation plays 1 greedy episode, then 2 sampled ones
        assert 2 * (greedy - 1) <= sampled <= 2 * greedy, (greedy, sampled)
        names = ("max_x", "median_max_x", "flag_rate", "return", "policy_version", "best_max_x")
        for policy in ("greedy", "sampled"):
            for name in names:
                assert key(f"mario_eval_{name}", policy) in m, (name, policy)
            assert 0.0 <= m[key("mario_eval_flag_rate", policy)] <= 1.0
        # every episode is logged with its policy, after its gauges are set
        procs.wait_until(
            "the counted episodes in the log",
            lambda: (
                len(logged_max_x(evaluator, "sampled")) >= sampled
                and len(logged_max_x(evaluator, "greedy")) >= greedy
            ),
            30,
            everyone,
        )
        for policy in ("greedy", "sampled"):
            xs = logged_max_x(evaluator, policy)
            for name in ("max_x", "median_max_x"):
                assert min(xs) <= m[key(f"mario_eval_{name}", policy)] <= max(xs)
        assert "mario_actor_chunks_sent_total" not in m  # an evaluator sends nothing
    finally:
        for p in everyone:
            p.stop()
    summary = json.loads((tmp_path / "eval" / "best-tests.fakes_Corridor-v0.json").read_text())
    assert summary["policy"] in ("greedy", "sampled")
    with av.open(str(tmp_path / "eval" / "best-tests.fakes_Corridor-v0.mp4")) as video:
        frames = [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]
    assert len(frames) == summary["length"] + 1 == summary["frames"]
    assert frames[0].shape == (84, 84, 3)


def test_eval_actor_takes_the_levels_of_a_set_in_turn(tmp_path):
    """Two Mario stages: evaluations alternate between them, each level with its own gauges
    (its progress among them) and its own best video."""
    levels = ("1-1", "1-2")
    port, lport, eport = procs.free_port(2), procs.free_port(), procs.free_port()
    learner = procs.learner(
        tmp_path / "run", port, lport, "--level", ",".join(levels), "--unroll-length", "8",
        "--no-progress-steps", "10",
    )  # fmt: skip
    evaluator = procs.actor(
        tmp_path, port, 1, eport, "--eval-dir", str(tmp_path / "eval"), "--eval-interval-s", "0",
        "--eval-episodes", "1", "--eval-sampled-episodes", "0", module="actor.eval",
    )  # fmt: skip
    everyone = [learner, evaluator]

    def counted(level: str) -> float:
        return procs.scrape(eport).get(
            f"mario_eval_episodes_total{{level={level},policy=greedy}}", 0
        )

    try:
        first = f"mario_eval_max_x{{level={levels[0]},policy=greedy}}"
        procs.wait_until(  # the series are made when the learner's Welcome names the levels
            "the eval metrics", lambda: first in procs.scrape(eport), 60, everyone
        )
        m = procs.scrape(eport)
        for level in levels:  # every level's series exists once the first does
            assert f"mario_eval_max_x{{level={level},policy=greedy}}" in m
        procs.wait_until(
            "2 evaluations of each level", lambda: min(map(counted, levels)) >= 2, 180, everyone
        )
        m = procs.scrape(eport)
    finally:
        for p in everyone:
            p.stop()
    played = re.findall(r"eval v\d+ (\S+) greedy: max x (\d+)", evaluator.output())
    assert [lv for lv, _ in played[:4]] == [*levels, *levels]  # in turn, one level each
    assert "every episode perturbed: sticky actions 0.25, no-op starts 0..30" in evaluator.output()
    lengths = level_lengths()
    for level in levels:
        xs = [int(x) for lv, x in played if lv == level]
        progress = m[f"mario_eval_progress{{level={level},policy=greedy}}"]
        assert min(xs) / lengths[level] <= progress <= max(xs) / lengths[level] and progress < 1
        summary = json.loads((tmp_path / "eval" / f"best-{level}.json").read_text())
        assert summary["level"] == level and summary["max_x"] == max(xs)
        assert (tmp_path / "eval" / f"best-{level}.mp4").stat().st_size > 0


def test_the_best_policy_is_kept_read_back_after_a_restart_and_played_by_make_eval(tmp_path):
    """Windows of 2 sampled episodes: once full, the score nominates the policy, which plays 2
    fresh episodes (alone: nothing is kept yet) and is written to RUN/eval/best-policy.pt with
    its policy version and the run's env frames at it; a restarted eval actor starts from that
    file; `make eval`'s entry point on the run dir plays that file, not the latest checkpoint."""
    run = tmp_path / "run"
    port, lport = procs.free_port(2), procs.free_port()
    learner = procs.learner(
        run, port, lport, "--unroll-length", "16", "--batch-chunks", "1", *CORRIDOR_LEARNER_ARGS
    )
    trainer = procs.actor(tmp_path, port, 0, procs.free_port(), "--num-envs", "2")
    flags = ["--eval-dir", str(RunDir(run).eval), "--eval-interval-s", "0.5"]
    flags += ["--eval-window", "2", "--eval-episodes", "1", "--eval-sampled-episodes", "2"]
    flags += ["--eval-challenge-episodes", "2"]

    def evaluator_on(eport: int) -> procs.Proc:
        return procs.actor(tmp_path, port, 1, eport, *flags, module="actor.eval")

    def settled(evaluator: procs.Proc) -> list[tuple[int, float]]:
        return [(int(v), float(s)) for v, s in SETTLED.findall(evaluator.output())]

    eport = procs.free_port()
    first = evaluator_on(eport)
    everyone = [learner, trainer, first]
    try:
        procs.wait_until(
            "a best policy",
            lambda: procs.scrape(eport).get("mario_eval_bests_total", 0) >= 1,
            180,
            everyone,
        )
        m = procs.scrape(eport)
        assert not math.isnan(m["mario_eval_score"]) and m["mario_eval_best_score"] >= 0
        assert m["mario_eval_best_policy_version"] >= 0
        assert (
            "challenge: v" in first.output() and "alone (no comparable best kept)" in first.output()
        )
        first.stop()
        kept = load_checkpoint(RunDir(run).best_policy)
        # the file says what the last challenge settled, the one scraped or a later one
        version, score = settled(first)[-1]
        assert (kept.policy_version, round(kept.best["score"], 3)) == (version, score)
        assert kept.best["policy"] == "sampled" and kept.best["noop_max"] == 30
        assert kept.best["episodes_per_level"] == 2 and "window_score" in kept.best
        if kept.policy_version > 0:  # the learner's env frames at that version, from its weights
            assert kept.env_frames > 0

        eport = procs.free_port()  # a restarted eval actor: the file's best from the start
        second = evaluator_on(eport)
        everyone[-1] = second
        procs.wait_until(  # its metrics are served before it reads the file
            "the restarted eval actor's best",
            lambda: procs.scrape(eport).get("mario_eval_best_policy_version", -1) >= 0,
            120,
            everyone,
        )
        restarted = procs.scrape(eport)
        if not settled(second):  # no challenge of its own yet: the file's best
            assert restarted["mario_eval_best_score"] == pytest.approx(kept.best["score"])
            assert restarted["mario_eval_best_policy_version"] == kept.policy_version
    finally:
        for p in everyone:
            p.stop()
    kept = load_checkpoint(RunDir(run).best_policy)  # the newest best, if it changed
    assert RunDir(run).checkpoints.is_dir()  # the learner's latest is there, and not played
    argv = ["--run-dir", str(run), "--levels", LEVEL, "--episodes", "1", "--no-video"]
    assert evaluate.main(argv) == 0
    o = json.loads((RunDir(run).eval / "summary.json").read_text())["overall"]
    assert o["checkpoint"] == str(RunDir(run).best_policy)
    assert o["chosen"] == "the best policy the eval actor kept"
    assert o["policy_version"] == kept.policy_version and o["best"] == kept.best
    assert o["env_frames"] == kept.env_frames >= 0
