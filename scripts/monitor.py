"""`make monitor` (`python -m scripts.monitor`): Prometheus and, where there is one, Grafana with
the mario-impala dashboard, in the foreground until Ctrl-C.

Prometheus is Debian's package (`apt-get install prometheus`), started as `make prometheus`
starts it: deploy/prometheus/prometheus.yml, data in runs/prometheus. Grafana is the first of: a
`grafana` or `grafana-server` on PATH, else docker with a daemon that answers (the grafana/grafana
image). Either is given deploy/grafana/provisioning as a copy in runs/grafana/provisioning whose
datasource points at this Prometheus and whose dashboard provider at deploy/grafana/dashboards,
with anonymous viewing on and the dashboard as its home page. With no Grafana, it says how to get
one and runs Prometheus alone.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from scripts.checkout import ROOT

PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
DASHBOARD = DASHBOARDS / "mario-impala.json"
IMAGE = "grafana/grafana"
CONTAINER_DASHBOARDS = "/var/lib/grafana/dashboards/mario-impala"  # the provider's path
NO_PROMETHEUS = "prometheus not found; install it (Debian/Ubuntu: apt-get install prometheus)"
NO_GRAFANA = """no Grafana here (no grafana or grafana-server on PATH, no docker daemon); the
dashboard needs one of:
  - Grafana's package: https://grafana.com/docs/grafana/latest/setup-grafana/installation/
    (Debian/Ubuntu: add https://apt.grafana.com, then apt-get install grafana)
  - docker with a running daemon (it pulls grafana/grafana)
  - any Grafana elsewhere: import deploy/grafana/dashboards/mario-impala.json with a Prometheus
    datasource of uid mario-prometheus (docs/MONITORING.md)
then run make monitor again. Prometheus runs meanwhile: graphs and alerts at {url}"""


def grafana_command(port: int, prometheus_url: str, data: Path) -> tuple[list[str], dict] | None:
    """How to start Grafana here, with its environment; None when there is none."""
    provisioning = provision(data / "provisioning", prometheus_url, DASHBOARDS)
    settings = {
        "GF_SERVER_HTTP_ADDR": "127.0.0.1",
        "GF_SERVER_HTTP_PORT": str(port),
        "GF_AUTH_ANONYMOUS_ENABLED": "true",
        "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": str(DASHBOARD),
    }
    for name in ("grafana", "grafana-server"):
        binary = shutil.which(name)
        if binary is None:
            continue
        home = Path("/usr/share/grafana")
        if not home.is_dir():  # an unpacked release: bin/ under its home
            home = Path(binary).resolve().parent.parent
        paths = {"GF_PATHS_PROVISIONING": str(provisioning), "GF_PATHS_DATA": str(data / "data")}
        paths["GF_PATHS_LOGS"] = str(data / "logs")
        argv = [binary, "server"] if name == "grafana" else [binary]
        return [*argv, "--homepath", str(home)], {**os.environ, **settings, **paths}
    if docker_answers():
        provision(data / "container", prometheus_url, Path(CONTAINER_DASHBOARDS))
        settings["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] = (
            f"{CONTAINER_DASHBOARDS}/{DASHBOARD.name}"
        )
        env = [a for k, v in settings.items() for a in ("-e", f"{k}={v}")]
        mounts = ["-v", f"{data / 'container'}:/etc/grafana/provisioning"]
        mounts += ["-v", f"{DASHBOARDS}:{CONTAINER_DASHBOARDS}:ro"]
        argv = ["docker", "run", "--rm", "--name", f"mario-grafana-{port}", "--network", "host"]
        return [*argv, *env, *mounts, IMAGE], dict(os.environ)
    return None


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=15)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def provision(out: Path, prometheus_url: str, dashboards: Path) -> Path:
    """deploy/grafana/provisioning copied to `out`, its datasource at `prometheus_url` and its
    dashboard provider reading `dashboards`."""
    for kind in ("datasources", "dashboards"):
        (out / kind).mkdir(parents=True, exist_ok=True)
        for src in (PROVISIONING / kind).glob("*.yml"):
            text = src.read_text()
            text = re.sub(r"(?m)^(\s*url:) \S+", rf"\1 {prometheus_url}", text)
            text = re.sub(r"(?m)^(\s*path:) \S+", rf"\1 {dashboards}", text)
            (out / kind / src.name).write_text(text)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.monitor", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--prometheus-port", type=int, default=9090)
    parser.add_argument("--grafana-port", type=int, default=3000)
    parser.add_argument(
        "--data", type=Path, default=ROOT / "runs", help="prometheus/ and grafana/ go here"
    )
    parser.add_argument("--prometheus-args", default="", help="more flags for prometheus")
    args = parser.parse_args(argv)
    args.data = args.data.resolve()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print(f"monitor: {NO_PROMETHEUS}", file=sys.stderr)
        return 1
    prometheus_url = f"http://127.0.0.1:{args.prometheus_port}"
    procs = [
        subprocess.Popen(
            [
                prometheus,
                f"--config.file={PROMETHEUS_CONFIG}",
                f"--storage.tsdb.path={args.data / 'prometheus'}",
                f"--web.listen-address=127.0.0.1:{args.prometheus_port}",
                *args.prometheus_args.split(),
            ]
        )
    ]
    grafana = grafana_command(args.grafana_port, prometheus_url, args.data / "grafana")
    if grafana is None:
        print(f"monitor: {NO_GRAFANA.format(url=prometheus_url)}", file=sys.stderr)
    else:
        procs.append(subprocess.Popen(grafana[0], env=grafana[1]))
        print(
            f"monitor: Grafana at http://127.0.0.1:{args.grafana_port} (the mario-impala dashboard)"
        )
    print(
        f"monitor: Prometheus at {prometheus_url} (alerts: {prometheus_url}/alerts); Ctrl-C stops"
    )
    sys.stdout.flush()
    return run(procs)


def run(procs: list[subprocess.Popen]) -> int:
    """Wait until Prometheus exits or a signal comes; then stop the others."""
    stop = lambda *_: procs[0].send_signal(signal.SIGTERM)  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = procs[0].wait()
    for p in procs[1:]:
        if p.poll() is None:
            p.terminate()
    for p in procs[1:]:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
