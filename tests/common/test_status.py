"""The one-line status: its episode means and flag rate span the window's episodes across levels,
from real learner metrics, compared with the figures of the episodes themselves."""

from __future__ import annotations

import re

import numpy as np
import pytest

from common import status
from common.metrics import LearnerMetrics


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
    m = re.fullmatch(r"(\d+) episodes in (\d+) s", parts[7])
    assert m, line
    out["episodes"], out["window_s"] = m.groups()
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
