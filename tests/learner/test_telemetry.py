"""One path for every metric: each one declared in common/metrics.py reaches every output it
declares (the Prometheus exposition, GPU telemetry included, a row of RUN/metrics.jsonl, a
TensorBoard scalar, a field of the status line) with the value the loop gave it, and no output
holds anything undeclared; then the same through the learner's real telemetry after an update."""

from __future__ import annotations

import json
import math
import types
from collections import deque

import pytest
import torch
from prometheus_client import Counter, Gauge, Histogram, Info, generate_latest

from common import status
from common.metrics import (
    GPU_TABLE,
    ActorMetrics,
    EvalMetrics,
    LearnerMetrics,
    ProcessMetrics,
    RelayMetrics,
)
from common.rundir import RunDir
from common.wire import EpisodeStats
from learner import telemetry
from learner.checkpoint import Totals
from learner.gpu import GpuCollector
from learner.levels import LevelSummary
from learner.tensorboard import INSTALL, ScalarLog, scalars
from learner.update import Learner
from tests.learner.test_gpu import FakeNvml
from tests.learner.test_mixing import mixer
from tests.learner.test_update import hyper, make_batch, new_model, on_policy

LEVELS = ("1-1", "1-2")
KINDS = {Counter: "counter", Gauge: "gauge", Histogram: "histogram", Info: "info"}
# The keys of a metrics.jsonl row that its readers use (scripts/report.py, scripts/analysis,
# tests/integration): renaming one breaks them.
READ_KEYS = {"time", "env_frames", "agent_steps", "updates", "agent_steps_per_s", "mean_max_x"}
READ_KEYS |= {"mean_return", "flag_rate", "total_loss", "pg_loss", "baseline_loss", "entropy"}
READ_KEYS |= {"learning_rate", "replay_size", "grad_norm", "clip_fraction", "levels"}
READ_LEVEL_KEYS = {"progress", "flag_rate", "advantage_std", "entropy"}


def outputs(field: str) -> list:
    """The learner's metrics that declare `field` ("row", "tag" or "status")."""
    return [m for m in LearnerMetrics.TABLE if getattr(m, field)]


def distinct_figures(metrics: LearnerMetrics) -> dict:
    """A value of its own for every label value of every gauge with a row or a tag."""
    figures, n = {}, 0
    for m in LearnerMetrics.TABLE:
        if not (m.row or m.tag):
            continue
        if m.labels:
            figures[m.attr] = {v: (n := n + 1) + 0.25 for v in metrics.known[m.labels[0]]}
        else:
            figures[m.attr] = (n := n + 1) + 0.25
    return figures


def by_label(m, figure) -> list[tuple[dict[str, str], object]]:
    """[(labels, value)] of one metric's figure."""
    if not m.labels:
        return [({}, figure)]
    return [({m.labels[0]: k}, v) for k, v in figure.items()]


def expected_row(figures: dict, time_s: float) -> dict:
    """The row the declarations describe, written out from their fields."""
    row: dict = {"time": time_s}
    for m in outputs("row"):
        for labels, value in by_label(m, figures[m.attr]):
            if not labels:
                row[m.row] = value
            elif "level" in labels:
                row.setdefault("levels", {}).setdefault(labels["level"], {})[m.row] = value
            elif labels[m.labels[0]] in m.row:
                row[m.row[labels[m.labels[0]]]] = value
    return row


def row_keys() -> set[str]:
    """The top-level keys of a metrics.jsonl row that the declarations name."""
    keys = {"time"}
    for m in outputs("row"):
        if not m.labels:
            keys.add(m.row)
        elif m.labels == ("level",):
            keys.add("levels")
        else:
            keys |= set(m.row.values())
    return keys


def level_keys() -> set[str]:
    return {m.row for m in outputs("row") if m.labels == ("level",)}


def all_tags(metrics: LearnerMetrics) -> set[str]:
    return {
        m.tag.format(**{label: v for label in m.labels})
        for m in outputs("tag")
        for v in (metrics.known[m.labels[0]] if m.labels else [None])
    }


def expected_tags(figures: dict) -> dict[str, float]:
    return {
        m.tag.format(**labels): value
        for m in outputs("tag")
        for labels, value in by_label(m, figures[m.attr])
        if value is not None
    }


# ---------------------------------------------------------------------------------------------
# Each output, every declared metric
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls", [LearnerMetrics, ActorMetrics, RelayMetrics, EvalMetrics, ProcessMetrics]
)
def test_the_exposition_holds_every_declared_metric_and_nothing_else(cls):
    registry = cls(levels=LEVELS).registry
    families = {family.name: family for family in registry.collect()}
    declared = {m.name: m for m in cls.TABLE}
    assert families.keys() == declared.keys()
    text = generate_latest(registry).decode()
    for name, m in declared.items():
        family = families[name]
        assert family.type == KINDS[m.kind] and family.documentation == m.help, name
        assert name.startswith("mario_"), name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        assert labels == (set(m.labels) if m.kind is not Info else labels), name
        exposed = name + ("_total" if m.kind is Counter else "_info" if m.kind is Info else "")
        assert f"# TYPE {exposed} " in text or f"# TYPE {name} " in text, name


def test_a_gpu_learners_exposition_adds_the_declared_gpu_metrics_and_nothing_else():
    metrics = LearnerMetrics(levels=LEVELS)
    fake = FakeNvml()
    metrics.registry.register(GpuCollector(fake, {0: 0, 1: 1}))
    families = {family.name: family for family in metrics.registry.collect()}
    declared = {m.name: m for m in (*LearnerMetrics.TABLE, *GPU_TABLE)}
    assert families.keys() == declared.keys()
    for m in GPU_TABLE:
        family = families[m.name]
        assert family.documentation == m.help and family.type == "gauge", m.name
        assert [s.labels for s in family.samples] == [{"gpu": "0"}, {"gpu": "1"}], m.name


def test_every_row_and_tag_reaches_its_gauge_the_row_and_tensorboard(tmp_path):
    metrics = LearnerMetrics(levels=LEVELS)
    figures = distinct_figures(metrics)
    numbers = metrics.record(figures)
    for m in outputs("row") + outputs("tag"):
        for labels, value in by_label(m, figures[m.attr]):
            assert metrics.registry.get_sample_value(m.name, labels) == value, (m.name, labels)
    row = json.loads(json.dumps(telemetry.metrics_row(numbers, 12.5)))
    assert row == expected_row(figures, 12.5)  # each declared key, and nothing else
    assert row.keys() >= READ_KEYS
    assert all(f.keys() >= READ_LEVEL_KEYS for f in row["levels"].values())
    assert row["levels"].keys() == set(LEVELS)
    assert scalars(numbers) == expected_tags(figures)
    assert scalars(numbers).keys() == all_tags(metrics)


def test_a_missing_figure_is_null_in_the_row_absent_from_tensorboard_and_keeps_its_gauge():
    metrics = LearnerMetrics(levels=LEVELS)
    figures = distinct_figures(metrics)
    metrics.record(figures)
    gone = {"recent_return": None, "level_progress": {"1-2": None}, "entropy": None}
    numbers = metrics.record(gone)
    row, tags = telemetry.metrics_row(numbers, 0.0), scalars(numbers)
    assert row["mean_return"] is None and row["entropy"] is None
    assert row["levels"]["1-2"]["progress"] is None
    assert row["levels"]["1-1"]["progress"] == figures["level_progress"]["1-1"]  # as it stood
    assert not {"episodes/mean_return", "policy/entropy", "level/1-2/progress"} & tags.keys()
    assert tags["level/1-1/progress"] == figures["level_progress"]["1-1"]
    r = metrics.registry
    assert r.get_sample_value("mario_recent_episodes_return") == figures["recent_return"]
    assert (
        r.get_sample_value("mario_level_progress", {"level": "1-2"})
        == (figures["level_progress"]["1-2"])
    )


def test_only_gauges_are_recorded_and_only_declared_ones():
    metrics = LearnerMetrics()
    with pytest.raises(TypeError, match="updates is not a gauge"):
        metrics.record({"updates": 1.0})
    with pytest.raises(KeyError):
        metrics.record({"undeclared": 1.0})


def test_tensorboard_reads_back_every_declared_tag(tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason=f"tensorboard not installed: {INSTALL}",
    )
    metrics = LearnerMetrics(levels=LEVELS)
    figures = distinct_figures(metrics)
    log = ScalarLog(tmp_path)
    log.write(metrics.record(figures), 100.0)
    log.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    want = expected_tags(figures)
    assert set(acc.Tags()["scalars"]) == want.keys()
    for tag, value in want.items():
        (event,) = acc.Scalars(tag)
        assert event.step == int(figures["run_env_frames"])
        assert event.value == pytest.approx(value)


def test_every_status_field_shows_its_metric_in_table_order():
    metrics = LearnerMetrics(levels=LEVELS)
    before = status.flatten(metrics.registry.collect())
    want = []
    for n, m in enumerate(outputs("status"), start=1):
        value = 10.0 * n + 0.5
        metric = getattr(metrics, m.attr)
        one = metric.labels(*(metrics.known[lb][0] for lb in m.labels)) if m.labels else metric
        getattr(one, {Gauge: "set", Counter: "inc", Histogram: "observe"}[m.kind])(value)
        want.append(m.status.format(value).strip())
    line = status.status_line(status.flatten(metrics.registry.collect()), before, 5.0)
    parts = [p.strip() for p in line.split("|")]
    assert parts[: len(want)] == want
    # after them, the line's own figures: none is a declared metric's
    assert parts[len(want)].startswith("flags ")
    # a histogram with nothing observed in the window shows a dash as wide as its number
    now = status.flatten(metrics.registry.collect())
    dashed = status.status_line(now, now, 5.0).split(" | ")
    for i, m in enumerate(outputs("status")):
        if m.kind is Histogram:
            prefix = m.status.split("{")[0]
            width = len(m.status.format(0.5)) - len(prefix)
            assert dashed[i] == prefix + "-".rjust(width), dashed[i]


# ---------------------------------------------------------------------------------------------
# The learner's telemetry, after a real update
# ---------------------------------------------------------------------------------------------


class FakeLevels:
    """LevelStats' read: 1-1 played, 1-2 not yet."""

    levels = LEVELS

    def summary(self) -> dict[str, LevelSummary]:
        played = LevelSummary(3, 0.4, 1 / 3, 3, 0.5, 0.5, 0.1, 1 / 6, end_x=980.0)
        return {"1-1": played, "1-2": LevelSummary(0, None, None, 0)}


def test_the_train_loops_record_fills_every_output_from_one_set_of_gauges(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(telemetry, "RECORD_EVERY_S", 0.0)
    model = new_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    learner = Learner(model, optimizer, hyper())
    batch = on_policy(model, make_batch(4, 4, seed=3))
    replay = mixer(min_size=1)
    replay.after_update(replay.mix(batch, updates=0), torch.ones(4))
    episodes = [
        EpisodeStats(
            level="1-1", episode_return=120.0, length=90, max_x=700, flag=True, outcome="flag"
        ),
        EpisodeStats(
            level="1-1", episode_return=20.0, length=40, max_x=300, flag=False, outcome="death"
        ),
    ]
    ingest = types.SimpleNamespace(episodes=deque(episodes), drain_episodes=list)
    metrics, run = LearnerMetrics(levels=LEVELS), RunDir(tmp_path / "run")
    run.root.mkdir()
    tb = ScalarLog(run.tensorboard) if not _no_tensorboard() else None
    t = telemetry.Telemetry(metrics, run, learner, replay, ingest, 1e-9, FakeLevels(), tb)
    t.started(Totals(1000, 250))
    stats = learner.step(batch)
    t.updated(stats, Totals(1064, 266), steps=16, replayed=16, frames=64, compute_s=0.1)
    t.close()
    (line,) = run.metrics.read_text().splitlines()
    row = json.loads(line)
    assert row.keys() == row_keys()
    assert all(f.keys() == level_keys() for f in row["levels"].values())
    # the row says what Prometheus says
    r = metrics.registry
    for m in outputs("row"):
        for key_labels, value in _row_values(m, row):
            if value is not None:
                assert r.get_sample_value(m.name, key_labels) == pytest.approx(value), m.name
    assert row["env_frames"] == 1064 and row["agent_steps"] == 266 and row["updates"] == 1
    assert row["mean_max_x"] == 500 and row["flag_rate"] == 0.5 and row["mean_return"] == 70
    assert row["total_loss"] == pytest.approx(float(stats.total_loss))
    assert row["replay_size"] == 4 and row["sgd_steps"] == stats.sgd_steps
    assert row["levels"]["1-2"] == dict.fromkeys(level_keys())  # no episode of 1-2 yet
    assert row["levels"]["1-1"]["progress_best"] == 0.5  # FakeLevels: best 0.5, fall 0.1
    assert row["levels"]["1-1"]["progress_fall"] == 0.1
    assert row["levels"]["1-1"]["end_x"] == 980.0
    assert row["levels"]["1-1"]["progress"] == 0.4
    assert row["levels"]["1-1"]["entropy"] == pytest.approx(float(stats.level_entropy[0]))
    assert r.get_sample_value("mario_levels_mean_progress") == 0.4  # 1-2 has no figure
    # the status line, from the same registry
    printed = capsys.readouterr().err.strip().splitlines()[0].strip()
    steps_per_s = f"{row['agent_steps_per_s']:7.0f}".strip()
    assert printed.startswith(f"{steps_per_s} steps/s | updates       1 | policy v1 | actors 0 |")
    if tb is not None:  # every tag but those of 1-2's missing figures, at the row's values
        acc = _events(run.tensorboard)
        missing = {f"level/1-2/{k}" for k in level_keys()}
        assert set(acc.Tags()["scalars"]) == all_tags(metrics) - missing
        (entropy,) = acc.Scalars("policy/entropy")
        assert entropy.step == 1064 and entropy.value == pytest.approx(row["entropy"])


def _row_values(m, row) -> list[tuple[dict[str, str], object]]:
    """[(Prometheus labels, row value)] of one row-declared metric in `row`."""
    if not m.labels:
        return [({}, row[m.row])]
    if m.labels == ("level",):
        return [({"level": lv}, figures[m.row]) for lv, figures in row["levels"].items()]
    return [({m.labels[0]: k}, row[key]) for k, key in m.row.items()]


def _no_tensorboard() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return True
    return False


def _events(directory):
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(directory))
    acc.Reload()
    return acc


def test_distinct_figures_are_distinct():
    values = [
        v
        for f in distinct_figures(LearnerMetrics(levels=LEVELS)).values()
        for v in (f.values() if isinstance(f, dict) else [f])
    ]
    assert len(values) == len(set(values)) and all(math.isfinite(v) for v in values)


def test_closing_records_the_updates_and_episodes_since_the_last_record(tmp_path, monkeypatch):
    """A run that stops between two records (a planned run at its frames) still ends its files at
    its last update: the curves' last window of frames is full."""
    monkeypatch.setattr(telemetry, "RECORD_EVERY_S", 1e9)  # no record but the closing one
    model = new_model()
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-4), hyper())
    batch = on_policy(model, make_batch(4, 4, seed=3))
    late = EpisodeStats(
        level="1-1", episode_return=90.0, length=70, max_x=640, flag=False, outcome="death"
    )
    pending = deque([(123.0, 0, late)])
    ingest = types.SimpleNamespace(
        episodes=deque([late]), drain_episodes=lambda: [pending.popleft() for _ in list(pending)]
    )
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    t = telemetry.Telemetry(LearnerMetrics(), run, learner, None, ingest, 0.0)
    t.started(Totals(0, 0))
    for i in (1, 2):
        t.updated(learner.step(batch), Totals(64 * i, 16 * i), 16, 0, 64, compute_s=0.1)
    assert not run.metrics.exists()
    t.close()
    (line,) = run.metrics.read_text().splitlines()
    row = json.loads(line)
    assert row["env_frames"] == 128 and row["updates"] == 2
    start, episode = (json.loads(x) for x in run.episodes.read_text().splitlines())
    assert start["event"] == "start"
    assert episode["env_frames"] == 128 and episode["max_x"] == 640 and episode["time"] == 123.0
