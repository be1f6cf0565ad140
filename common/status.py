"""The one-line training status, computed from Prometheus samples.

The learner prints it from its own registry and `make train` from the learner's /metrics page,
so both show exactly the numbers Prometheus and Grafana see. Samples are flattened to
{"name" or "name{k=v,...}": value}, labels sorted.
"""

from __future__ import annotations

import time
import urllib.request
from collections import deque
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


def _sum(samples: dict[str, float], name: str, label: str = "") -> float:
    """The sum of `name`'s samples over all label values; only those with `label` ("k=v")."""

    def match(key: str) -> bool:
        if not label:
            return key == name or key.startswith(name + "{")
        return key.startswith(name + "{") and label in key[len(name) + 1 : -1].split(",")

    return sum(v for k, v in samples.items() if match(k))


def status_line(now: dict[str, float], before: dict[str, float], window_s: float) -> str:
    """Steps/s, updates, policy version, actors, and the mean return, mean max x and flag rate
    of the episodes that ended between the samples `before` and `now`, taken `window_s` seconds
    apart."""
    episodes = _sum(now, "mario_episode_return_count") - _sum(before, "mario_episode_return_count")

    def delta_mean(name: str) -> str:
        total = _sum(now, name + "_sum") - _sum(before, name + "_sum")
        return f"{total / episodes:7.1f}" if episodes > 0 else "      -"

    flags = _sum(now, "mario_episodes_total", "outcome=flag")
    flags -= _sum(before, "mario_episodes_total", "outcome=flag")
    flag_rate = f"{flags / episodes:6.1%}" if episodes > 0 else "     -"

    return (
        f"{now.get('mario_learner_agent_steps_per_second', 0):7.0f} steps/s | "
        f"updates {now.get('mario_learner_updates_total', 0):7.0f} | "
        f"policy v{now.get('mario_policy_version', 0):.0f} | "
        f"actors {now.get('mario_actors_connected', 0):.0f} | "
        f"return {delta_mean('mario_episode_return')} | "
        f"max x {delta_mean('mario_episode_max_x')} | "
        f"flags {flag_rate} | "
        f"{episodes:.0f} episodes in {window_s:.0f} s"
    )


class StatusWindow:
    """The status line with its episode means over the last `window_s` seconds.

    A line every few seconds would otherwise average the handful of episodes that ended since the
    previous one. Until `window_s` has passed, the means cover everything since construction.
    """

    def __init__(self, window_s: float = 60.0, *, start: float | None = None):
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        t0 = time.monotonic() if start is None else start
        self._samples: deque[tuple[float, dict[str, float]]] = deque([(t0, {})])

    def line(self, now: dict[str, float], t: float | None = None) -> str:
        """The status line for the sample `now`, taken at monotonic time `t`."""
        t = time.monotonic() if t is None else t
        # keep exactly one sample at least window_s old: the start of the window
        while len(self._samples) > 1 and t - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        t_before, before = self._samples[0]
        self._samples.append((t, now))
        return status_line(now, before, t - t_before)
