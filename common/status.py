"""The one-line training status, computed from Prometheus samples.

The learner prints it from its own registry and `make train` from the learner's /metrics page,
so both show exactly the numbers Prometheus and Grafana see. Samples are flattened to
{"name" or "name{k=v,...}": value}, labels sorted.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families


def flatten(families: Iterable[Metric]) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in families:
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def scrape(url: str, timeout_s: float = 2.0) -> dict[str, float]:
    """Flattened samples of a /metrics page; {} when it cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    return flatten(text_string_to_metric_families(text))


def _sum(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def status_line(now: dict[str, float], before: dict[str, float]) -> str:
    """Steps/s, updates, policy version, actors, and the mean return and max x of the episodes
    that ended between the samples `before` and `now`."""

    def delta_mean(name: str) -> str:
        count = _sum(now, name + "_count") - _sum(before, name + "_count")
        total = _sum(now, name + "_sum") - _sum(before, name + "_sum")
        return f"{total / count:7.1f}" if count > 0 else "      -"

    return (
        f"{now.get('mario_learner_agent_steps_per_second', 0):7.0f} steps/s | "
        f"updates {now.get('mario_learner_updates_total', 0):7.0f} | "
        f"policy v{now.get('mario_policy_version', 0):.0f} | "
        f"actors {now.get('mario_actors_connected', 0):.0f} | "
        f"return {delta_mean('mario_episode_return')} | "
        f"max x {delta_mean('mario_episode_max_x')}"
    )
