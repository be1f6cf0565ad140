"""deploy/grafana: the dashboard is valid Grafana JSON whose every query is valid PromQL over
metrics that common/metrics.py (or learner/gpu.py) defines; the provisioning files point at it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import Gauge

from common.metrics import _M, EvalMetrics
from scripts.dev.dashboard import __main__ as dashboard_cli
from scripts.dev.dashboard import build, rows_actors
from tests.deploy import dashboard as d

GRAFANA = d.ROOT / "deploy" / "grafana"


@pytest.fixture(scope="module")
def db():
    return d.load()


def test_dashboard_header(db):
    assert db["uid"] == "mario-impala"
    assert 36 <= db["schemaVersion"] <= 41
    assert db["templating"]["list"] == [] or all(
        v["type"] != "datasource" for v in db["templating"]["list"]
    )


def test_panel_ids_are_unique_and_panels_do_not_overlap(db):
    all_panels = [p for _, p in d.panels(db)] + [p for p in db["panels"] if p["type"] == "row"]
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    cells: dict[tuple[int, int], str] = {}
    for p in all_panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, f"panel {p['title']!r} is wider than the grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[x, y]!r}"
                cells[x, y] = p["title"]


def test_every_query_panel_uses_the_provisioned_datasource(db):
    for row, p in d.panels(db):
        if p["type"] == "text":
            continue
        assert p["type"] in ("timeseries", "stat", "table", "gauge", "bargauge"), p["type"]
        assert p["datasource"] == {"type": "prometheus", "uid": d.DATASOURCE_UID}, p["title"]
        assert p.get("targets"), f"{row} / {p['title']} has no queries"
        for t in p["targets"]:
            assert t.get("expr"), f"{p['title']} {t['refId']} has no expr"
            assert t.get("datasource", p["datasource"])["uid"] == d.DATASOURCE_UID


def test_the_rows_the_docs_describe_are_there(db):
    rows = [p["title"] for p in db["panels"] if p["type"] == "row"]
    for row in (
        "Bottleneck",
        "Throughput",
        d.GPU_ROW,
        "Learner",
        "Episodes",
        "Levels",
        "Actors",
        d.EVAL_ROW,
    ):
        assert row in rows
    titles = {p["title"] for _, p in d.panels(db)}
    assert {"Bottleneck", "Bottleneck indicators", "How to read the bottleneck panels"} <= titles


def test_metric_name_extraction():
    # The check below is only as good as this tokenizer.
    expr = (
        "histogram_quantile(0.9, sum by (le) (rate(mario_chunk_latency_seconds_bucket[1m]))) > bool 1"
        ' or on (job) 2e3 * up{job="mario-actor", x=~"a(b)"} / scalar(max(mario_policy_version))'
    )
    assert d.metric_names(expr) == {
        "mario_chunk_latency_seconds_bucket",
        "up",
        "mario_policy_version",
    }
    assert d.metric_names("rate(mario_nonexistent_total[$__rate_interval])") == {
        "mario_nonexistent_total"
    }
    assert d.substitute("rate(x[$__rate_interval]) + y[$__interval]") == "rate(x[1m]) + y[15s]"


def test_every_metric_a_query_uses_is_defined(db):
    known = d.known_metric_names()
    assert {"mario_learner_updates_total", "mario_gpu_utilization_ratio", "up"} <= known
    for q in d.queries(db):
        names = d.metric_names(q.expr)
        assert names, f"{q.title} {q.ref_id}: no metric in {q.expr!r}"
        unknown = names - known
        assert not unknown, f"{q.title} {q.ref_id} uses undefined metrics {sorted(unknown)}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not on PATH")
def test_every_query_is_valid_promql(db, tmp_path: Path):
    # promtool parses a rule file's expressions: one recording rule per dashboard query.
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for q in d.queries(db):
        lines += [
            f"      - record: dashboard:panel_{q.panel_id}_{q.ref_id}",
            f"        expr: {json.dumps(q.expr)}",  # a JSON string is a YAML string
        ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_provisioning_points_at_the_dashboard():
    ds = (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    assert f"uid: {d.DATASOURCE_UID}" in ds and "url: http://127.0.0.1:9090" in ds
    provider = (GRAFANA / "provisioning" / "dashboards" / "mario.yml").read_text()
    assert "type: file" in provider and "path: " in provider
    assert d.DASHBOARD.parent == GRAFANA / "dashboards"


# ---- built as code (scripts/dev/dashboard) ------------------------------------------------------


def test_the_committed_dashboard_is_what_the_generator_builds(capsys):
    assert dashboard_cli.main(["--check"]) == 0, capsys.readouterr().err


def test_a_hand_edit_of_the_committed_dashboard_fails_the_check(tmp_path, capsys):
    edited = tmp_path / "mario-impala.json"
    text = d.DASHBOARD.read_text()
    assert '"title": "Checkpoint age"' in text
    edited.write_text(text.replace('"title": "Checkpoint age"', '"title": "Checkpoint age!"'))
    assert dashboard_cli.main(["--check", "--out", str(edited)]) == 1
    err = capsys.readouterr().err
    assert "Checkpoint age!" in err and "run `python -m scripts.dev.dashboard`" in err


def test_a_panel_querying_an_undeclared_metric_is_refused(monkeypatch, tmp_path, capsys):
    typo = build.Timeseries("Updates/s", "", [build.Q("rate(mario_learner_update_total[1m])")])
    with pytest.raises(build.UndeclaredMetric, match="mario_learner_update_total, which common"):
        build.dashboard([build.Row("Learner", [typo])], title="t")
    # and the command says so, writing nothing
    monkeypatch.setattr(dashboard_cli, "ROWS", [*dashboard_cli.ROWS, build.Row("x", [typo])])
    out = tmp_path / "dashboard.json"
    assert dashboard_cli.main(["--out", str(out)]) == 1 and not out.exists()
    assert "'Updates/s' queries mario_learner_update_total" in capsys.readouterr().err


def test_a_metric_declared_without_a_panel_gets_one_in_the_last_row(monkeypatch):
    new = _M("new_figure", Gauge, "mario_eval_new_figure", "A new figure.", ("level", "policy"))
    old = EvalMetrics.TABLE
    monkeypatch.setattr(EvalMetrics, "TABLE", (*old, new))
    tables = tuple(EvalMetrics.TABLE if t is old else t for t in build.TABLES)
    monkeypatch.setattr(build, "TABLES", tables)
    db = dashboard_cli.build()
    (more,) = [p for p in db["panels"] if p["type"] == "row" and p["title"] == build.MORE_ROW]
    titles = {p["title"]: p for p in more["panels"]}
    assert titles["mario_eval_new_figure"]["targets"][0]["expr"] == "mario_eval_new_figure"
    assert not build.uncovered(
        [*dashboard_cli.ROWS, build.more_row(build.uncovered(dashboard_cli.ROWS))]
    )


def test_every_metric_the_docs_name_is_on_the_dashboard(db):
    on_dashboard = {n for q in d.queries(db) for n in d.metric_names(q.expr)}
    families = {s.removesuffix(x) for s in on_dashboard for x in ("_total", "_bucket", "_sum")}
    docs = [d.ROOT / "README.md", *sorted((d.ROOT / "docs").glob("*.md"))]
    named = {n for f in docs for n in re.findall(r"\bmario_[a-z0-9_]*[a-z0-9]\b", f.read_text())}
    known = d.known_metric_names()
    for name in sorted(named):
        if name in known or any(name + sfx in known for sfx in ("_total", "_bucket", "_info")):
            assert name in on_dashboard | families or name + "_info" in known, name


def test_the_panels_a_user_asked_for_query_what_they_show(db):
    hand_made = [q for q in d.queries(db) if q.row != build.MORE_ROW]
    exprs = " ".join(q.expr for q in hand_made)
    for metric in (
        "mario_learner_epochs",
        "mario_eval_progress",
        "process_start_time_seconds",  # restarts
        "process_resident_memory_bytes",  # memory
        "mario_learner_last_checkpoint_timestamp_seconds",  # checkpoint age
        "mario_learner_credits_outstanding",
        "mario_level_flag_rate_fall",  # a collapse
        "mario_level_progress_fall",
    ):
        assert metric in exprs, metric
    run_wide = ("mario_eval_score", "mario_eval_best_score")  # one figure over all the levels
    per_level = [
        q for q in hand_made
        if ("mario_level_" in q.expr or "mario_eval_" in q.expr) and q.expr not in run_wide
    ]  # fmt: skip
    assert per_level and all('level=~".*"' in q.expr for q in per_level)  # $level, substituted
    (variable,) = db["templating"]["list"]
    assert variable["name"] == "level" and variable["includeAll"] and variable["multi"]
    (videos,) = [p for _, p in d.panels(db) if p["title"] == "Eval videos and the report"]
    assert "RUN/eval/" in videos["options"]["content"]
    assert "make report" in videos["options"]["content"]


def test_the_collapse_panels_draw_the_alerts_thresholds():
    alerts = (d.ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()
    assert (
        f'mario_level_flag_rate_fall{{job="mario-learner"}} > {rows_actors.FLAG_RATE_FALL_ALERT}'
        in alerts
    )
    assert (
        f'mario_level_progress_fall{{job="mario-learner"}} > {rows_actors.PROGRESS_FALL_ALERT}'
        in alerts
    )
