"""The dashboard's building blocks, on Grafana's typed builders (grafana-foundation-sdk), and the
one rule they keep: a query selects only metrics that common/metrics.py declares.

A panel is a small description (`Timeseries`, `Stat`, `Text`) of its title, help and queries;
`dashboard(rows)` builds each with the SDK's builders, lays the rows out on Grafana's 24-column
grid, and adds a row of every declared metric that no panel queries (`uncovered`), so that a
metric declared tomorrow is on the dashboard as soon as it is regenerated.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, text, timeseries
from grafana_foundation_sdk.builders.common import (
    GraphThresholdsStyleConfig,
    ReduceDataOptions,
    StackingConfig,
    VizLegendOptions,
    VizTooltipOptions,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import QueryEditorMode
from grafana_foundation_sdk.models.text import TextMode
from prometheus_client import CollectorRegistry, Counter, Histogram, Info

from common.metrics import (
    GPU_TABLE,
    ActorMetrics,
    EvalMetrics,
    LearnerMetrics,
    ProcessMetrics,
    RelayMetrics,
    add_process_metrics,
)

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="mario-prometheus")
TABLES = (LearnerMetrics.TABLE, ActorMetrics.TABLE, RelayMetrics.TABLE, EvalMetrics.TABLE)
TABLES += (GPU_TABLE, ProcessMetrics.TABLE)
# Prometheus's own series of every target
SCRAPE_SERIES = ("up", "scrape_duration_seconds")
# The last row: a panel for each declared metric that no other panel queries
MORE_ROW = "More metrics"


class UndeclaredMetric(ValueError):
    """A panel's query selects a metric that common/metrics.py does not declare."""


def series_names(m: Any) -> tuple[str, ...]:
    """The names a metric of a table row is exposed under."""
    if m.kind is Counter:
        return (f"{m.name}_total",)
    if m.kind is Histogram:
        return tuple(f"{m.name}_{s}" for s in ("bucket", "sum", "count"))
    if m.kind is Info:
        return (f"{m.name}_info",)
    return (m.name,)


def declared() -> frozenset[str]:
    """Every series name a query may select: those of common/metrics.py's tables, the process
    metrics it adds, and Prometheus's own per-target series."""
    names = {s for table in TABLES for m in table for s in series_names(m)}
    registry = CollectorRegistry()
    add_process_metrics(registry, "any")
    names |= {s.name for family in registry.collect() for s in family.samples}
    return frozenset(names | set(SCRAPE_SERIES))


_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
_KEYWORDS |= {"group_left", "group_right", "inf", "nan"}


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


# ---- panels -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Q:
    """One query: a PromQL expression and its legend; `instant` for a stat's last value."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Timeseries:
    title: str
    description: str
    queries: Sequence[Q]
    unit: str = "short"
    w: int = 8
    h: int = 8
    min: float | None = 0  # None: the axis follows the data below 0 too
    max: float | None = None
    stack: bool = False  # stacked areas (shares of a whole)
    threshold: float | None = None  # a red line at this value
    bold: str = ""  # the series drawn thick in the text colour (a mean over the others)


@dataclass(frozen=True)
class Stat:
    title: str
    description: str
    queries: Sequence[Q]
    unit: str = "short"
    w: int = 6
    h: int = 7
    decimals: float | None = None
    steps: Sequence[tuple[float | None, str]] = ((None, "blue"),)  # (from value, colour)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # value: (text, colour)
    by_query: dict[str, dict[str, Any]] = field(default_factory=dict)  # refId: {unit, steps...}
    value_only: bool = False  # the value without its legend


@dataclass(frozen=True)
class Text:
    title: str
    content: str  # markdown
    w: int = 8
    h: int = 7


Panel = Timeseries | Stat | Text


@dataclass(frozen=True)
class Row:
    title: str
    panels: Sequence[Panel]


def _thresholds(steps: Iterable[tuple[float | None, str]]) -> gd.ThresholdsConfig:
    return (
        gd.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=v, color=c) for v, c in steps])
    )


def _targets(panel: Panel) -> list[prometheus.Dataquery]:
    out = []
    for ref_id, q in zip("ABCDEFGHIJ", panel.queries, strict=False):
        unknown = metric_names(q.expr) - declared()
        if unknown:
            raise UndeclaredMetric(
                f"panel {panel.title!r} queries {', '.join(sorted(unknown))}, which "
                "common/metrics.py does not declare: declare it there (a row of a metrics "
                "table) or fix the name"
            )
        target = prometheus.Dataquery().ref_id(ref_id).expr(q.expr).legend_format(q.legend)
        target = target.instant() if q.instant else target.range()
        out.append(target.datasource(DATASOURCE).editor_mode(QueryEditorMode.CODE))
    return out


def _timeseries(p: Timeseries) -> timeseries.Panel:
    b = (
        timeseries.Panel()
        .title(p.title)
        .description(p.description)
        .datasource(DATASOURCE)
        .targets(_targets(p))
        .unit(p.unit)
        .span(p.w)
        .height(p.h)
        .line_width(1)
        .fill_opacity(40 if p.stack else 10)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(True)
        .stacking(
            StackingConfig()
            .mode(common.StackingMode.NORMAL if p.stack else common.StackingMode.NONE)
            .group("A")
        )
        .legend(
            VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if p.min is not None:
        b = b.min(p.min).axis_soft_min(p.min)
    if p.max is not None:
        b = b.max(p.max)
    if p.threshold is not None:
        b = b.thresholds(_thresholds([(None, "transparent"), (p.threshold, "red")]))
        line = common.GraphTresholdsStyleMode.LINE_AND_AREA
        b = b.thresholds_style(GraphThresholdsStyleConfig().mode(line))
    if p.bold:
        b = b.override_by_name(
            p.bold,
            [
                model.DynamicConfigValue(id_val="custom.lineWidth", value=3),
                model.DynamicConfigValue(
                    id_val="color", value={"mode": "fixed", "fixedColor": "text"}
                ),
            ],
        )
    return b


def _stat(p: Stat) -> stat.Panel:
    b = (
        stat.Panel()
        .title(p.title)
        .description(p.description)
        .datasource(DATASOURCE)
        .targets(_targets(p))
        .unit(p.unit)
        .span(p.w)
        .height(p.h)
        .color_scheme(gd.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .thresholds(_thresholds(p.steps))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .justify_mode(common.BigValueJustifyMode.CENTER)
        .text_mode(common.BigValueTextMode.VALUE if p.value_only else common.BigValueTextMode.AUTO)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False).fields(""))
    )
    if p.decimals is not None:
        b = b.decimals(p.decimals)
    if p.names:
        results = {
            value: model.ValueMappingResult(text=t, color=c, index=i)
            for i, (value, (t, c)) in enumerate(p.names.items())
        }
        b = b.mappings([model.ValueMap(options=results)])
    for ref_id, settings in p.by_query.items():
        props = [
            model.DynamicConfigValue(
                id_val=k, value=_thresholds(v).build() if k == "thresholds" else v
            )
            for k, v in settings.items()
        ]
        b = b.override_by_query(ref_id, props)
    return b


def _text(p: Text) -> text.Panel:
    return (
        text.Panel().title(p.title).mode(TextMode.MARKDOWN).content(p.content).span(p.w).height(p.h)
    )


def build_panel(p: Panel):
    if isinstance(p, Timeseries):
        return _timeseries(p)
    if isinstance(p, Stat):
        return _stat(p)
    return _text(p)


# ---- the dashboard ----------------------------------------------------------------------------


def uncovered(rows: Sequence[Row]) -> list[Any]:
    """The declared metrics (table rows) that no panel of `rows` queries, in table order; the
    build info (a label set, not a number) aside."""
    queries = [q for row in rows for p in row.panels if not isinstance(p, Text) for q in p.queries]
    used = {name for q in queries for name in metric_names(q.expr)}
    metrics = [m for table in TABLES for m in table if m.kind is not Info]
    return [m for m in metrics if not used & set(series_names(m))]


def more_row(metrics: Sequence[Any]) -> Row:
    """A panel for each of `metrics`: a gauge's value, a counter's rate, a histogram's mean."""
    panels = []
    for m in metrics:
        by = f" by ({', '.join(m.labels)})" if m.labels else ""
        legend = " ".join(f"{{{{{label}}}}}" for label in m.labels) or m.name
        if m.kind is Counter:
            q = Q(f"sum{by} (rate({m.name}_total[1m]))", legend)
        elif m.kind is Histogram:
            rate = "sum{by} (rate({name}_{s}[5m]))"
            q = Q(
                " / ".join(rate.format(by=by, name=m.name, s=s) for s in ("sum", "count")), legend
            )
        else:
            q = Q(m.name, "{{instance}} " + legend if not m.labels else legend)
        panels.append(Timeseries(m.name, m.help + " (common/metrics.py)", [q], w=6, h=6, min=None))
    return Row(MORE_ROW, panels)


def dashboard(rows: Sequence[Row], *, variables=(), links=(), **settings: Any) -> dict:
    """The dashboard of `rows` (and a last row of every declared metric they leave out) as
    Grafana's JSON model, its panels numbered from 1 in order."""
    rows = [*rows, more_row(left)] if (left := uncovered(rows)) else list(rows)
    b = gd.Dashboard(settings.pop("title"))
    for key, value in settings.items():
        b = getattr(b, key)(*value) if isinstance(value, tuple) else getattr(b, key)(value)
    for v in variables:
        b = b.with_variable(v)
    for link in links:
        b = b.link(link)
    for row in rows:
        if row.title == MORE_ROW:  # folded: long, and for those who look for one metric
            folded = gd.Row(row.title).collapsed(True)
            for p in row.panels:
                folded = folded.with_panel(build_panel(p))
            b = b.with_row(folded)
            continue
        b = b.with_row(gd.Row(row.title))
        for p in row.panels:
            b = b.with_panel(build_panel(p))
    out = json.loads(json.dumps(b.build(), cls=JSONEncoder))
    ids = itertools.count(1)
    for p in out["panels"]:
        p["id"] = next(ids)
        for child in p.get("panels", []) if p["type"] == "row" else []:
            child["id"] = next(ids)
    return out
