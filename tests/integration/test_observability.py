"""Monitoring end to end: a real learner and two real actors train while a real Prometheus,
configured from deploy/prometheus, scrapes them; then every dashboard query is run through
Prometheus's HTTP API and must return numbers.

Not checked here: the GPU row (the learner runs on CPU, so no `mario_gpu_*` series exist; the
test asserts they are absent). An eval-mode actor runs too, so the Evaluation row is checked
like the rest. No Grafana server runs: the dashboard's queries
are what Grafana would send, with its variables replaced (tests/deploy/dashboard.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from scripts.ports import free_ports
from scripts.service.host import Host
from scripts.service.targets import write_targets
from tests.deploy import dashboard as d

ROOT = d.ROOT
DEPLOY = ROOT / "deploy" / "prometheus"
PY = sys.executable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.rehearsal,
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("prometheus") is None or shutil.which("promtool") is None,
        reason="prometheus/promtool not on PATH (Debian/Ubuntu: apt-get install prometheus)",
    ),
]

# Queries that may return nothing on a healthy run, each with the reason. Empty today: every
# non-GPU query returns numbers. Add (panel title, refId) with a comment only
# for a metric the learner or actor does not update yet.
MAY_BE_EMPTY: dict[tuple[str, str], str] = {}

MUST_EXIST = {
    "mario_learner_updates_total": "counter",
    "mario_learner_env_frames_total": "counter",
    "mario_learner_agent_steps_per_second": "gauge",
    "mario_policy_version": "gauge",
    "mario_policy_lag_updates": "histogram",
    "mario_chunk_latency_seconds": "histogram",
    "mario_actors_connected": "gauge",
    "mario_actor_env_frames_total": "counter",
}

LEVELS = "1-1,1-2"  # the learner's and the actors' set
DEADLINE_S = 120  # from the learner's start until every query has data
STARTUP_S = 300  # until the learner serves: importing torch on a loaded machine takes minutes
MIN_HISTORY_S = 20  # of scraped samples before the queries are judged


# ---- processes and ports -----------------------------------------------------------------------


def start(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def tails(logs: list[Path], lines: int = 15) -> str:
    return "\n".join(
        f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        for log in logs
        if log.exists()
    )


def get(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return resp.read().decode()


def api(base: str, path: str, **params: str) -> dict:
    query = "?" + urllib.parse.urlencode(params) if params else ""
    body = json.loads(get(f"{base}/api/v1/{path}{query}"))
    assert body["status"] == "success", body
    return body["data"]


def sample_value(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


# ---- the Prometheus config under test ----------------------------------------------------------


def prometheus_config(targets_dir: Path) -> str:
    """deploy/prometheus/prometheus.yml with this test's ports, targets and a 1 s scrape."""
    text = (DEPLOY / "prometheus.yml").read_text()
    replacements = {
        "scrape_interval: 5s": "scrape_interval: 1s",
        "scrape_timeout: 4s": "scrape_timeout: 1s",
        "evaluation_interval: 5s": "evaluation_interval: 1s",
        "../../runs/targets/learner*.json": str(targets_dir / "learner*.json"),
        "../../runs/targets/actors*.json": str(targets_dir / "actors*.json"),
        "../../runs/targets/eval*.json": str(targets_dir / "eval*.json"),
        "../../runs/targets/relay*.json": str(targets_dir / "relay*.json"),
        "  - alerts.yml": f"  - {DEPLOY / 'alerts.yml'}",
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, f"prometheus.yml no longer has exactly one {old!r}"
        text = text.replace(old, new)
    return text


def run_queries(base: str, queries: list[d.PanelQuery]) -> dict[d.PanelQuery, list[float]]:
    out = {}
    for q in queries:
        result = api(base, "query", query=q.expr)["result"]
        if isinstance(result, list):  # vector
            out[q] = [float(r["value"][1]) for r in result]
        else:  # scalar
            out[q] = [float(result[1])]
    return out


def has_numbers(values: list[float]) -> bool:
    return any(math.isfinite(v) for v in values)


# ---- the test ----------------------------------------------------------------------------------


def test_dashboard_queries_return_data_from_a_live_run(tmp_path: Path):
    dashboard = d.load()
    queries = d.queries(dashboard)
    gpu = [q for q in queries if q.row == d.GPU_ROW]
    evaluation = [q for q in queries if q.row == d.EVAL_ROW]
    checked = [q for q in queries if q not in gpu]
    assert gpu and evaluation and len(checked) > 30

    # One block of free ports, so that no two of them can collide.
    port = free_ports(9)  # learner chunks; port + 1: learner weights
    learner_metrics, actor_metrics, prom_port = port + 2, port + 3, port + 7
    eval_metrics = actor_metrics + 2  # 2 actors, then the eval actor (id 2)
    relay_port = port + 8  # actor 1 takes its weights from a relay, as on an actor host
    targets = tmp_path / "targets"
    host = Host(
        run=str(tmp_path / "run"), n=2, learner_metrics_port=learner_metrics,
        actor_metrics_base=actor_metrics, targets=str(targets), relay=True,
    ).resolved()  # fmt: skip
    relay_metrics = host.relay_metrics_port  # after the eval actor's: port + 6
    assert relay_metrics == port + 6
    written = write_targets(host)
    assert [p.name.split("-")[0] for p in written] == ["learner", "actors", "eval", "relay"]
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config(targets))
    check = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr

    logs = [
        tmp_path / n
        for n in (
            "learner.log",
            "actor-0.log",
            "actor-1.log",
            "prometheus.log",
            "eval.log",
            "relay.log",
        )  # fmt: skip
    ]
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        procs.append(
            start(
                [
                    *(PY, "-m", "learner", "--run-dir", str(tmp_path / "run")),
                    *("--port", str(port), "--metrics-port", str(learner_metrics)),
                    *("--device", "cpu", "--batch-chunks", "2", "--unroll-length", "16"),
                    *("--checkpoint-interval-s", "600"),
                    *("--replay-fraction", "0.5"),  # replay is off by default; its panels too
                    *("--level", LEVELS),  # two levels: the Levels row has a series per level
                ],
                logs[0],
            )
        )
        for i in range(2):
            relayed = ["--weights-from", f"127.0.0.1:{relay_port}"] if i == 1 else []
            procs.append(
                start(
                    [
                        *(PY, "-m", "actor", "--learner", f"127.0.0.1:{port}"),
                        *("--actor-id", str(i), "--metrics-port", str(actor_metrics + i)),
                        *("--num-envs", "2", *relayed),
                    ],
                    logs[1 + i],
                )
            )
        procs.append(
            start(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                logs[3],
            )
        )
        procs.append(
            start(
                [
                    *(PY, "-m", "actor.eval", "--learner", f"127.0.0.1:{port}"),
                    *("--actor-id", "2", "--metrics-port", str(eval_metrics)),
                    *("--eval-interval-s", "1", "--eval-challenge-episodes", "1"),
                    *("--eval-dir", str(tmp_path / "eval")),
                ],
                logs[4],
            )
        )
        procs.append(
            start(
                [
                    *(PY, "-m", "actor.relay", "--learner", f"127.0.0.1:{port}"),
                    *("--bind", f"127.0.0.1:{relay_port}", "--metrics-port", str(relay_metrics)),
                ],
                logs[5],
            )
        )
        prom = f"http://127.0.0.1:{prom_port}"
        learner_url = f"http://127.0.0.1:{learner_metrics}/metrics"

        # Wait for updates, then for history, then until every query has numbers.
        first_update = serving = None
        results: dict[d.PanelQuery, list[float]] = {}
        missing: list[d.PanelQuery] = checked
        while (
            time.monotonic() - started < STARTUP_S
            if serving is None
            else time.monotonic() - serving < DEADLINE_S
        ):
            dead = [
                (log.name, p.returncode)
                for p, log in zip(procs, logs, strict=True)
                if p.poll() is not None
            ]
            assert not dead, f"exited: {dead}\n{tails(logs)}"
            time.sleep(2)
            if first_update is None:
                with contextlib.suppress(OSError):
                    updates = sample_value(get(learner_url), "mario_learner_updates_total")
                    serving = serving or time.monotonic()
                    if updates >= 1:
                        first_update = time.monotonic()
                continue
            if time.monotonic() - first_update < MIN_HISTORY_S:
                continue
            results = run_queries(prom, queries)
            missing = [
                q
                for q in checked
                if not has_numbers(results[q]) and (q.title, q.ref_id) not in MAY_BE_EMPTY
            ]
            if not missing:
                break
        waited_s = time.monotonic() - started
        assert serving is not None, f"the learner did not serve in {STARTUP_S} s\n{tails(logs)}"
        assert first_update is not None, f"no learner update in {DEADLINE_S} s\n{tails(logs)}"
        assert not missing, (
            f"after {waited_s:.0f} s these dashboard queries return no numbers:\n"
            + "\n".join(f"  {q.row} / {q.title} [{q.ref_id}]: {q.expr}" for q in missing)
            + f"\n{tails(logs)}"
        )
        print(f"every dashboard query had data {waited_s:.0f} s after the start")

        # No GPU here: the GPU row's series must be absent, not zero.
        for q in gpu:
            assert results[q] == [], f"{q.title}: {results[q]} without a GPU"

        # Scrape targets: the learner, both actors, the eval actor and the relay, each from the
        # file_sd list scripts/service writes for its run, labelled with the run.
        active = api(prom, "targets", state="active")["activeTargets"]
        by_job = {}
        for t in active:
            by_job.setdefault(t["labels"]["job"], []).append(t)
        assert {t["labels"]["actor_id"] for t in by_job["mario-actor"]} == {"0", "1"}
        assert [t["labels"]["first_actor"] for t in by_job["mario-relay"]] == ["0"]
        assert all(t["health"] == "up" for t in active), [
            (t["scrapeUrl"], t["lastError"]) for t in active
        ]
        assert len(by_job["mario-learner"]) == 1
        assert {t["labels"]["run"] for t in active} == {"run"}

        # The names users and alerts rely on, with their types.
        metadata = api(prom, "metadata")
        for name, kind in MUST_EXIST.items():
            # Keyed by family name: with _total in the text format, without in OpenMetrics.
            meta = metadata.get(name) or metadata.get(name.removesuffix("_total")) or [{}]
            assert meta[0].get("type") == kind, (name, meta)
            series = name + ("_bucket" if kind == "histogram" else "")
            assert api(prom, "query", query=f"count({series})")["result"], f"{series} absent"

        # The alert rules load and evaluate in the server.
        groups = api(prom, "rules", type="alert")["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        names = set(re.findall(r"- alert: (\w+)", (DEPLOY / "alerts.yml").read_text()))
        assert set(rules) == names
        assert all(r["health"] == "ok" for r in rules.values()), {
            n: r.get("lastError") for n, r in rules.items()
        }
        firing = [n for n, r in rules.items() if r["state"] == "firing"]
        assert not firing, f"alerts firing on a healthy run: {firing}"

        # Each live exposition passes promtool's linter.
        for url in (learner_url, f"http://127.0.0.1:{actor_metrics}/metrics"):
            lint = subprocess.run(
                ["promtool", "check", "metrics"],
                input=get(url),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert lint.returncode == 0, f"{url}:\n{lint.stdout}{lint.stderr}"
    finally:
        stop_all(procs)
    assert all(p.returncode is not None for p in procs)
