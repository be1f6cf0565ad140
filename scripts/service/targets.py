"""This host's Prometheus targets: a file_sd list per process kind, each run its own files.

A run writes `learner-NAME.json`, `actors-NAME.json`, `eval-NAME.json` and `relay-NAME.json` (for
the processes it runs here) into the `TARGETS` directory, `runs/targets` by default. NAME is the
run directory's name and a digest of its absolute path (`default-3f9a0c1e`), so two runs on one
machine never write one file, however their directories are named. deploy/prometheus/
prometheus.yml reads `runs/targets/learner*.json`, `actors*.json`, `eval*.json` and `relay*.json`,
so Prometheus finds every run's processes; each entry carries its `job` and the `run` label (the
run directory's name), which tells two runs' series apart. `make train` on stopping and `make
down` remove their run's files, so a finished run leaves no target for Prometheus to find down;
the next start of the same run directory writes the same names again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from common.rundir import atomic_write
from scripts.service.host import Host

ROLES = ("learner", "actors", "eval", "relay")  # the files' prefixes, the jobs' kinds
_JOBS = {"learner": "mario-learner", "actors": "mario-actor", "eval": "mario-eval"}
_JOBS["relay"] = "mario-relay"


def run_name(h: Host) -> str:
    """The run's part of its files' names: the directory's name and a digest of its path."""
    path = Path(h.run).absolute()
    return f"{path.name}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"


def paths(h: Host) -> dict[str, Path]:
    """Every file of this host's run, by role, whether it runs that role or not."""
    return {role: Path(h.targets) / f"{role}-{run_name(h)}.json" for role in ROLES}


def _lists(h: Host) -> dict[str, tuple[str, dict[int, int]]]:
    """The processes this host runs that serve /metrics, by role: (their label, {id: port})."""
    out: dict[str, tuple[str, dict[int, int]]] = {}
    if h.learner_autostart and h.learner_metrics_port:
        out["learner"] = ("", {0: h.learner_metrics_port})
    if h.actor_metrics_base:
        out["actors"] = ("actor_id", {i: h.actor_metrics_base + i for i in h.actor_ids})
        if h.eval:
            out["eval"] = ("actor_id", {h.eval_id: h.eval_metrics_port})
        if h.relay:  # labelled by the first actor it serves, which names the host's actors
            out["relay"] = ("first_actor", {h.first_actor: h.relay_metrics_port})
    return out


def write_targets(h: Host, roles: Iterable[str] = ROLES) -> list[Path]:
    """The file_sd lists of `roles` that this host runs (a process without /metrics has none),
    each written whole or not at all; the paths written."""
    host = "127.0.0.1" if h.metrics_host in ("0.0.0.0", "::") else h.metrics_host
    name, files, written = Path(h.run).name, paths(h), []
    for role, (label, by_id) in _lists(h).items():
        if role not in roles:
            continue
        entries = []
        for i, port in by_id.items():
            labels = {"job": _JOBS[role], "run": name} | ({label: str(i)} if label else {})
            entries.append({"targets": [f"{host}:{port}"], "labels": labels})
        files[role].parent.mkdir(parents=True, exist_ok=True)
        atomic_write(files[role], (json.dumps(entries, indent=2) + "\n").encode())
        written.append(files[role])
    return written


def remove_targets(h: Host) -> list[Path]:
    """Remove the files `write_targets(h)` writes (`make learner` beside `make actors` on one run
    directory keeps its own); the paths removed."""
    removed = []
    for role in _lists(h):
        path = paths(h)[role]
        if path.is_file():
            path.unlink()
            removed.append(path)
    return removed
