"""Reading deploy/grafana/dashboards/mario-impala.json for tests: its queries, with Grafana's
variables replaced so Prometheus's HTTP API can run them, and the metric names they use (by the
generator's own tokenizer, scripts/dev/dashboard/build.py)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from learner.gpu import GpuCollector
from scripts.checkout import ROOT
from scripts.dev.dashboard import build

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "mario-impala.json"
DATASOURCE_UID = "mario-prometheus"
GPU_ROW = "GPU"
EVAL_ROW = "Evaluation"

# What Grafana would put in place of its variables; the test server scrapes every second.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "${__rate_interval}": "1m",
    "${__interval}": "15s",
    "${__range}": "1h",
    "$level": ".*",  # the level variable's All
    "${level}": ".*",
}


class PanelQuery(NamedTuple):
    row: str  # title of the row the panel sits under
    panel_id: int
    title: str
    ref_id: str
    expr: str  # with Grafana variables substituted


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(row title, panel) for every panel that is not a row, rows' collapsed panels included."""
    out: list[tuple[str, dict[str, Any]]] = []
    row = ""
    for p in dashboard["panels"]:
        if p["type"] == "row":
            row = p["title"]
            out += [(row, child) for child in p.get("panels", [])]
        else:
            out.append((row, p))
    return out


def substitute(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    return expr


def queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    return [
        PanelQuery(row, p["id"], p["title"], t["refId"], substitute(t["expr"]))
        for row, p in panels(dashboard)
        for t in p.get("targets", [])
        if t.get("expr")
    ]


metric_names = build.metric_names


def known_metric_names() -> set[str]:
    """Every sample name common/metrics.py (GPU telemetry and process metrics included) and
    learner/gpu.py expose, and Prometheus's own per-target series."""
    names = set(build.declared())
    names |= {family.name for family in GpuCollector(nvml=None, handles={}).describe()}
    return names
