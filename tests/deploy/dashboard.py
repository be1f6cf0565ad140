"""Reading deploy/grafana/dashboards/mario-impala.json for tests: its queries, with Grafana's
variables replaced so Prometheus's HTTP API can run them, and the metric names they use."""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from common.metrics import ActorMetrics, EvalMetrics, LearnerMetrics, RelayMetrics
from learner.gpu import GpuCollector
from scripts.checkout import ROOT

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


_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (a small tokenizer, enough for dashboards)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range and subquery windows
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", s)  # numbers
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        if re.match(r"\s*\(", s[m.end() :]) or m.group().lower() in _KEYWORDS:
            continue  # a function call or a keyword
        names.add(m.group())
    return names


def known_metric_names() -> set[str]:
    """Every sample name common/metrics.py and learner/gpu.py expose, and `up`."""
    names = {"up"}
    for registry in (
        LearnerMetrics(levels=["1-1"]).registry,
        ActorMetrics(levels=["1-1"]).registry,
        EvalMetrics(levels=["1-1"]).registry,
        RelayMetrics().registry,
    ):
        text = generate_latest(registry).decode()
        for family in text_string_to_metric_families(text):
            names |= {s.name for s in family.samples}
    names |= {family.name for family in GpuCollector(nvml=None, handles={}).describe()}
    return names
