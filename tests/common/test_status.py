"""The one-line status: its episode means and flag rate span the window's episodes across levels,
from real learner metrics, compared with the figures of the episodes themselves; its bottleneck
verdict follows the Grafana dashboard's table row by row, from real learner and actor metrics."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from prometheus_client.core import GaugeMetricFamily

from common import status
from common.levels import level_lengths, progress
from common.metrics import ActorMetrics, EvalMetrics, LearnerMetrics
from scripts.checkout import ROOT

DASHBOARD = ROOT / "deploy/grafana/dashboards/mario-impala.json"


def sample(metrics: LearnerMetrics) -> dict[str, float]:
    return status.flatten(metrics.registry.collect())


def fields(line: str) -> dict[str, str]:
    """{"steps/s": "240", "return": "12.5", ..., "flags": "33.3", "episodes": "3", ...}."""
    parts = [p.strip() for p in line.split("|")]
    out = {"steps/s": parts[0].split()[0], "updates": parts[1].split()[1]}
    out["policy"] = parts[2].removeprefix("policy v")
    out["actors"] = parts[3].split()[1]
    out["return"] = parts[4].split()[1]
    out["max x"] = parts[5].split()[2]
    out["flags"] = parts[6].split()[1].removesuffix("%")
    out["levels"] = parts[7]
    m = re.fullmatch(r"(\d+) episodes in (\d+) s", parts[8])
    assert m, line
    out["episodes"], out["window_s"] = m.groups()
    if parts[9].startswith("gpu "):
        out["gpu"] = parts[9].split()[1].removesuffix("%")
    out["verdict"] = parts[-1]
    return out


def test_the_line_shows_the_counters_and_the_means_of_episodes_between_two_samples():
    m = LearnerMetrics()
    m.agent_steps_per_second.set(240.4)
    m.updates.inc(17)
    m.policy_version.set(17)
    m.actors_connected.set(3)
    m.observe_episode("1-1", "flag", 100.0, 3161.0, 50)  # before the window: not counted
    before = sample(m)
    episodes = [
        ("1-1", "death", 10.0, 300.0),
        ("1-2", "flag", 40.0, 900.0),
        ("1-1", "no_progress", 70.0, 1200.0),
    ]
    for level, outcome, ret, x in episodes:
        m.observe_episode(level, outcome, ret, x, 80)
    f = fields(status.status_line(sample(m), before, 12.0))
    assert f["steps/s"] == "240" and f["updates"] == "17" and f["policy"] == "17"
    assert f["actors"] == "3" and f["episodes"] == "3" and f["window_s"] == "12"
    assert float(f["return"]) == pytest.approx(np.mean([e[2] for e in episodes]), abs=0.05)
    assert float(f["max x"]) == pytest.approx(np.mean([e[3] for e in episodes]), abs=0.05)
    flag_pct = 100 * np.mean([e[1] == "flag" for e in episodes])
    assert float(f["flags"]) == pytest.approx(flag_pct, abs=0.05)


def test_a_set_shows_its_mean_progress_and_flag_rate_over_levels_and_its_weakest_level():
    m = LearnerMetrics(levels=["1-1", "1-3"])
    m.observe_episode("1-3", "death", 1.0, 100.0, 10, progress("1-3", 100))  # before the window
    before = sample(m)
    episodes = [("1-1", "flag", 3161), ("1-1", "death", 1000), ("1-3", "death", 600)]
    episodes += [("1-3", "no_progress", 1200), ("1-3", "death", 300)]
    for level, outcome, x in episodes:
        m.observe_episode(level, outcome, 1.0, x, 9, progress(level, x, outcome == "flag"))
    f = fields(status.status_line(sample(m), before, 5.0))
    per_level = {
        lv: [progress(lv, x, o == "flag") for lv2, o, x in episodes if lv2 == lv]
        for lv in ("1-1", "1-3")
    }
    mean = np.mean([np.mean(p) for p in per_level.values()])  # each level alike
    flags = np.mean([0.5, 0.0])
    weakest = 100 * np.mean(per_level["1-3"])
    line = f"set of 2: progress {mean:4.0%} flags {flags:4.0%}, weakest 1-3 {weakest / 100:4.0%}"
    assert f["levels"] == line  # no mario_level_end_x recorded yet: no end
    m.record({"level_end_x": {"1-1": 1000.0, "1-3": 600.0}})  # the learner's gauge
    f = fields(status.status_line(sample(m), before, 5.0))
    assert f["levels"] == line + " (ends x 600)"  # the weakest level's
    one = LearnerMetrics(levels=["1-1"])
    one.observe_episode("1-1", "death", 1.0, 1000, 9, progress("1-1", 1000))
    assert fields(status.status_line(sample(one), {}, 5.0))["levels"] == (
        f"progress {1000 / level_lengths()['1-1']:4.0%}"
    )
    # a level of unknown length (a Gymnasium id) has no progress
    gym = LearnerMetrics(levels=["tests.fakes:Corridor-v0"])
    gym.observe_episode("tests.fakes:Corridor-v0", "death", 1.0, 5, 9, None)
    assert fields(status.status_line(sample(gym), {}, 5.0))["levels"] == "progress    -"


def test_no_episode_in_the_window_shows_dashes():
    m = LearnerMetrics()
    m.observe_episode("1-1", "death", 5.0, 300.0, 10)
    now = sample(m)
    f = fields(status.status_line(now, now, 2.0))
    assert f["return"] == "-" and f["max x"] == "-" and f["flags"] == "-"
    assert f["episodes"] == "0"


def test_the_window_averages_the_last_window_s_seconds_of_episodes():
    m = LearnerMetrics()
    window = status.StatusWindow(60.0, start=0.0)
    returns = {}  # sample time -> return of the one episode that ended just before it
    lines = {}
    flagged = set(range(10, 201, 10))  # every fifth episode reaches the flag
    for t in range(2, 201, 2):  # a line every 2 s, one episode before each
        returns[t] = float(t)
        m.observe_episode("1-1", "flag" if t in flagged else "death", float(t), 10.0 * t, 10)
        lines[t] = fields(window.line(sample(m), float(t)))
    # before 60 s have passed: everything since the start
    assert lines[30]["episodes"] == "15" and lines[30]["window_s"] == "30"
    assert float(lines[30]["return"]) == pytest.approx(np.mean(range(2, 31, 2)), abs=0.05)
    # afterwards: the episodes after the newest sample at least 60 s old
    for t in (62, 120, 200):
        expect = [r for s, r in returns.items() if t - 60 < s <= t]
        assert lines[t]["episodes"] == str(len(expect)) and lines[t]["window_s"] == "60"
        assert float(lines[t]["return"]) == pytest.approx(np.mean(expect), abs=0.05)
        assert float(lines[t]["max x"]) == pytest.approx(10 * np.mean(expect), abs=0.05)
        flags = [s in flagged for s in returns if t - 60 < s <= t]
        assert float(lines[t]["flags"]) == pytest.approx(100 * np.mean(flags), abs=0.05)


def test_the_window_must_be_positive():
    with pytest.raises(ValueError, match="window_s must be > 0"):
        status.StatusWindow(0.0)


# ---- the bottleneck verdict ----------------------------------------------------------------


def window(
    *,
    wait_s: float,
    compute_s: float,
    queued: int,
    credit_waits_s: list[float] | None = None,
    window_s: float = 60.0,
) -> tuple[dict[str, float], dict[str, float]]:
    """(now, before) of a learner that waited `wait_s` and computed `compute_s` in the window,
    with `queued` of 8 chunks queued now, and actors blocked on credits `credit_waits_s` each
    (None: no actor samples, as in the learner's own registry)."""
    learner = LearnerMetrics()
    learner.ingest_queue_capacity.set(8)
    actors = [ActorMetrics() for _ in credit_waits_s or []]
    for a in actors:
        a.flow_control_wait_seconds.inc(3.0)  # before the window

    def merged() -> dict[str, float]:
        out = sample(learner)
        for i, a in enumerate(actors):
            out |= status.actor_samples(status.flatten(a.registry.collect()), i)
        return out

    before = merged()
    learner.wait_seconds.inc(wait_s)
    learner.compute_seconds.inc(compute_s)
    learner.ingest_queue_depth.set(queued)
    for a, w in zip(actors, credit_waits_s or [], strict=True):
        a.flow_control_wait_seconds.inc(w)
    return merged(), before


@pytest.mark.parametrize(
    ("row", "wait_s", "queued", "credit_waits_s", "expected"),
    [
        # learner wait share (of 60 s) | ingest queue (of 8) | actors' credit wait (of 60 s)
        ("queue full, starved, blocked", 50.0, 7, [40.0, 50.0], "learner-bound"),
        ("queue full, busy, free", 5.0, 8, [1.0, 0.0], "learner-bound"),
        ("busy learner, blocked actors", 20.0, 2, [25.0, 35.0], "learner-bound"),
        ("starved learner, blocked actors", 45.0, 0, [30.0, 20.0], "transport-bound"),
        ("starved learner, free actors", 45.0, 0, [6.0, 12.0], "actor-bound"),
        ("busy learner, free actors", 20.0, 3, [6.0, 12.0], "balanced"),
    ],
)
def test_the_verdict_follows_the_dashboards_table(row, wait_s, queued, credit_waits_s, expected):
    now, before = window(
        wait_s=wait_s, compute_s=60.0 - wait_s, queued=queued, credit_waits_s=credit_waits_s
    )
    assert status.verdict(now, before, 60.0) == expected, row
    assert fields(status.status_line(now, before, 60.0))["verdict"] == expected


@pytest.mark.parametrize(
    ("wait_s", "queued", "expected"),
    [(45.0, 0, "actor-bound"), (20.0, 3, "balanced"), (45.0, 7, "learner-bound")],
)
def test_without_actor_samples_the_verdict_rests_on_the_learners_own_numbers(
    wait_s, queued, expected
):
    now, before = window(wait_s=wait_s, compute_s=60.0 - wait_s, queued=queued)
    assert status.indicators(now, before, 60.0).credit_wait is None
    assert status.verdict(now, before, 60.0) == expected


def test_the_indicators_are_the_dashboards_numbers_over_the_window():
    now, before = window(wait_s=15.0, compute_s=45.0, queued=2, credit_waits_s=[6.0, 30.0])
    ind = status.indicators(now, before, 60.0)
    assert ind.wait_share == pytest.approx(0.25)
    assert ind.queue_fill == pytest.approx(0.25)
    assert ind.credit_wait == pytest.approx((0.1 + 0.5) / 2)  # the mean over actors
    # an actor restarted within the window (its counter reset) is left out, not counted negative
    restarted = {**now, f"{status.CREDIT_WAIT}{{actor_id=1}}": 1.0}
    assert status.indicators(restarted, before, 60.0).credit_wait == pytest.approx(0.1)


def test_an_idle_learner_with_no_data_reads_balanced():
    m = LearnerMetrics()
    now = sample(m)
    assert status.verdict(now, now, 10.0) == "balanced"
    assert fields(status.status_line(now, now, 10.0))["verdict"] == "balanced"


def test_the_thresholds_are_the_dashboards():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    panel = next(p for p in panels if p["title"] == "Bottleneck" and p["type"] == "stat")
    expr = panel["targets"][0]["expr"]
    assert f"mario_learner_ingest_queue_capacity) or vector(0)) > bool {status.QUEUE_FULL}" in expr
    assert f"{status.CREDIT_WAIT}[1m])) or vector(0)) > bool {status.CREDIT_WAIT_HIGH}" in expr
    assert f"mario_learner_compute_seconds_total[1m])))) > bool {status.WAIT_SHARE_HIGH}" in expr
    words = {m["text"] for m in panel["fieldConfig"]["defaults"]["mappings"][0]["options"].values()}
    assert words == {"balanced", "actor-bound", "transport-bound", "learner-bound"}


def test_the_line_shows_gpu_utilisation_only_on_a_gpu():
    now, before = window(wait_s=45.0, compute_s=15.0, queued=0)
    assert "gpu" not in fields(status.status_line(now, before, 60.0))
    gpu = GaugeMetricFamily("mario_gpu_utilization_ratio", "util", labels=["gpu"])
    gpu.add_metric(["0"], 0.37)
    line = status.status_line(now | status.flatten([gpu]), before, 60.0)
    assert fields(line)["gpu"] == "37" and fields(line)["verdict"] == "actor-bound"
    assert line.endswith("| gpu  37% | actor-bound")


def test_a_planned_run_shows_its_frames_against_its_length():
    m = LearnerMetrics()
    assert "frames" not in status.status_line(sample(m), {}, 10.0)  # an endless run
    m.train_frames.set(2_000_000)
    m.run_env_frames.set(1_234_567)
    line = status.status_line(sample(m), {}, 10.0)
    assert " | frames 1.23M of 2.00M | " in line
    assert fields(line)["episodes"] == "0"  # the fields before it stay where they were


def eval_line(score: float | None, best: float | None, version: int = 12) -> str:
    """The status line with the eval actor's samples merged in, from its real registry."""
    e = EvalMetrics(levels=["1-1"])
    if score is not None:
        e.score.set(score)
    if best is not None:
        e.best_score.set(best)
        e.best_policy_version.set(version)
    now = sample(LearnerMetrics()) | status.eval_samples(status.flatten(e.registry.collect()))
    return status.status_line(now, {}, 10.0)


@pytest.mark.parametrize(
    ("score", "best", "shown"),
    [
        (None, None, "| eval - |"),  # no figure yet: NaN, not a collapse
        (None, 0.88, "| eval - best 88% v12 |"),  # a restarted eval actor, its window filling
        (0.5, None, "| eval 50% |"),
        (0.7, 0.88, "| eval 70% best 88% v12 |"),
        (0.62, 0.88, "| eval below best: 62% vs 88% v12 |"),  # under 3/4 of the best
        (0.88, 0.88, "| eval 88% best 88% v12 |"),
        (6.0, 7.5, "| eval x 6 best x 8 v12 |"),  # a level of unknown length: max x
    ],
)
def test_the_line_shows_the_eval_score_and_says_when_it_is_well_below_the_best(score, best, shown):
    assert shown in eval_line(score, best)


def test_below_best_is_a_quarter_under_the_best():
    assert status.BELOW_BEST == 0.75
    assert "below best" in eval_line(0.6599, 0.88) and "below best" not in eval_line(0.6601, 0.88)


def test_without_the_eval_actors_samples_the_line_has_no_eval_field():
    assert "eval" not in status.status_line(sample(LearnerMetrics()), {}, 10.0)
    assert status.eval_samples({"mario_eval_max_x{level=1-1,policy=greedy}": 1.0}) == {}
