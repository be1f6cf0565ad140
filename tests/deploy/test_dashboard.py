"""deploy/grafana: the dashboard is valid Grafana JSON whose every query is valid PromQL over
metrics that common/metrics.py (or learner/gpu.py) defines; the provisioning files point at it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

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
