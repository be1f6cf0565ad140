"""make monitor (scripts/monitor.py): a real Prometheus on the repository's config, and Grafana
where there is one (a packaged binary, else docker), provisioned with the dashboard; with
neither, the way to get one, and Prometheus all the same."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from scripts import monitor
from scripts.checkout import ROOT
from scripts.ports import free_ports

PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not on PATH (Debian/Ubuntu: apt-get install prometheus)"
)

# A stand-in for `grafana` / `docker` that records how it was started, then runs until stopped
FAKE = """#!{python}
import json, os, pathlib, signal, sys, time
out = pathlib.Path({out!r})
if sys.argv[1:] == ["info"]:
    sys.exit(0)
(out / "argv").write_text("\\n".join(sys.argv[1:]) + "\\n")
(out / "env").write_text(json.dumps(dict(os.environ)))
def stopped(*_):
    (out / "stopped").write_text("stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stopped)
while True:
    time.sleep(0.2)
"""


def bin_dir(tmp_path: Path, *fakes: str) -> Path:
    """A PATH of prometheus and the named fakes only (no grafana, no docker otherwise)."""
    path = tmp_path / "bin"
    path.mkdir()
    if PROMETHEUS:
        (path / "prometheus").symlink_to(PROMETHEUS)
    for name in fakes:
        (path / name).write_text(FAKE.format(python=sys.executable, out=str(tmp_path)))
        (path / name).chmod(0o755)
    return path


def start(tmp_path: Path, path: Path) -> tuple[subprocess.Popen, int, int]:
    port = free_ports(2)
    argv = [sys.executable, "-m", "scripts.monitor", "--prometheus-port", str(port)]
    argv += ["--grafana-port", str(port + 1), "--data", str(tmp_path / "runs")]
    env = {**os.environ, "PATH": f"{path}:{Path(sys.executable).parent}"}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, port, port + 1


def wait_ready(proc: subprocess.Popen, port: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"Prometheus not ready on {port} in {timeout_s} s")


def stop(proc: subprocess.Popen) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


@needs_prometheus
def test_without_grafana_it_says_how_to_get_one_and_runs_prometheus_with_the_rules(tmp_path):
    proc, port, _ = start(tmp_path, bin_dir(tmp_path))
    try:
        wait_ready(proc, port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5) as r:
            groups = json.load(r)["data"]["groups"]
        rules = {rule["name"] for g in groups for rule in g["rules"]}
        assert {"MarioLearnerDown", "MarioFlagRateCollapsed"} <= rules
    finally:
        code, out, err = stop(proc)
    assert code == 0, err
    assert "no Grafana here" in err and "apt-get install grafana" in err
    assert f"http://127.0.0.1:{port}" in err and "mario-impala.json" in err
    assert f"Prometheus at http://127.0.0.1:{port}" in out
    assert (tmp_path / "runs" / "prometheus").is_dir()


@needs_prometheus
def test_a_packaged_grafana_gets_the_dashboard_and_this_prometheus_and_stops_with_it(tmp_path):
    proc, port, grafana_port = start(tmp_path, bin_dir(tmp_path, "grafana"))
    try:
        wait_ready(proc, port)
        deadline = time.monotonic() + 30
        while not (tmp_path / "env").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        code, out, err = stop(proc)
    assert code == 0, err
    assert (tmp_path / "argv").read_text().split()[:2] == ["server", "--homepath"]
    env = json.loads((tmp_path / "env").read_text())
    assert env["GF_SERVER_HTTP_PORT"] == str(grafana_port)
    assert env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == str(monitor.DASHBOARD)
    provisioning = Path(env["GF_PATHS_PROVISIONING"])
    datasource = (provisioning / "datasources" / "prometheus.yml").read_text()
    assert f"url: http://127.0.0.1:{port}\n" in datasource and "uid: mario-prometheus" in datasource
    provider = (provisioning / "dashboards" / "mario.yml").read_text()
    assert f"path: {monitor.DASHBOARDS}\n" in provider
    assert (monitor.DASHBOARDS / "mario-impala.json").exists()
    assert (tmp_path / "stopped").exists()  # stopped with Prometheus
    assert f"Grafana at http://127.0.0.1:{grafana_port}" in out


@needs_prometheus
def test_with_docker_grafana_runs_in_a_container_with_the_provisioning_mounted(tmp_path):
    proc, port, grafana_port = start(tmp_path, bin_dir(tmp_path, "docker"))
    try:
        wait_ready(proc, port)
        deadline = time.monotonic() + 30
        while not (tmp_path / "argv").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        code, _, err = stop(proc)
    assert code == 0, err
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:2] == ["run", "--rm"] and argv[-1] == monitor.IMAGE
    assert f"{monitor.DASHBOARDS}:{monitor.CONTAINER_DASHBOARDS}:ro" in argv
    assert f"GF_SERVER_HTTP_PORT={grafana_port}" in argv
    mounted = Path(argv[argv.index("-v") + 1].split(":")[0])
    datasource = (mounted / "datasources" / "prometheus.yml").read_text()
    assert f"url: http://127.0.0.1:{port}\n" in datasource
    provider = (mounted / "dashboards" / "mario.yml").read_text()
    assert f"path: {monitor.CONTAINER_DASHBOARDS}\n" in provider


def test_without_prometheus_it_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert monitor.main(["--data", str(tmp_path)]) == 1
    assert "apt-get install prometheus" in capsys.readouterr().err
