"""deploy/prometheus: the config and the alert rules load in promtool, and the rules' unit tests
(alerts_test.yml: every alert firing and not firing) pass."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.deploy.dashboard import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
ALERTS = {
    "MarioLearnerDown",
    "MarioActorsMissing",
    "MarioThroughputCollapsed",
    "MarioGpuIdle",
    "MarioPolicyLagHigh",
    "MarioNoUpdates",
    "MarioRestarting",
    "MarioRelayBehind",
    "MarioFlagRateCollapsed",
    "MarioProgressCollapsed",
}

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not on PATH (Debian/Ubuntu: apt-get install prometheus; .ci/run does)",
)


def promtool(*args: str) -> str:
    result = subprocess.run(
        ["promtool", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def test_config_is_valid():
    out = promtool("check", "config", "deploy/prometheus/prometheus.yml")
    assert "1 rule files found" in out


def test_rules_are_valid():
    out = promtool("check", "rules", "deploy/prometheus/alerts.yml")
    assert f"{len(ALERTS)} rules found" in out


def test_rules_unit_tests_pass():
    assert "SUCCESS" in promtool("test", "rules", "deploy/prometheus/alerts_test.yml")


def test_every_alert_has_severity_summary_description_and_tests():
    text = (PROMETHEUS / "alerts.yml").read_text()
    blocks = re.split(r"\n\s*- alert: ", text)[1:]
    assert {b.split()[0] for b in blocks} == ALERTS
    for block in blocks:
        name = block.split()[0]
        for key in ("severity:", "summary:", "description:", "for:"):
            assert key in block, f"{name} has no {key}"
    tests = (PROMETHEUS / "alerts_test.yml").read_text()
    fired = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", tests))
    quiet = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts: \[\]", tests))
    assert fired == ALERTS, f"alerts never shown firing: {ALERTS - fired}"
    assert quiet == ALERTS, f"alerts never shown quiet: {ALERTS - quiet}"
