"""The rehearsal's machines: network namespaces on one bridge (scripts/dev/chaos/netns.py), each a
host with its own run directory, started the way docs/DEPLOY.md tells a user to:

    learner   the learner (`scripts.service exec learner`, as its systemd unit runs it, restarted
              after a kill as Restart=on-failure does), CURVE keys made there (`make keys`), and
              Prometheus scraping every host, with the project's alert rules
    actors-a  `make up N=2 FIRST_ACTOR=0 LEARNER_AUTOSTART=false LEARNER=<learner>:PORT KEYS=...
              METRICS_HOST=<its address>` with its actors' key directories copied over; so a relay
              beside them (RELAY's default)
    actors-b  the same for actors 2 and 3
    eval      the eval actor alone (`scripts.service exec eval`), id 5

Every host has its own network stack, so they all use the same ports. The only module of the
rehearsal that knows how the hosts are built, started, killed and addressed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common.curve import make_keys
from scripts.checkout import ROOT
from scripts.dev.chaos import netns
from scripts.service.host import Host, write_targets
from scripts.service.supervisor import Supervisor

PORT, LEARNER_METRICS, ACTOR_METRICS_BASE, PROMETHEUS_PORT = 5555, 9000, 9100, 9090
ACTORS = {"actors-a": (0, 1), "actors-b": (2, 3)}  # the actor hosts and their actor ids
EVAL_ID = 5  # the eval host's Host(first_actor=4, n=1): id first_actor + n
SCRAPE_INTERVAL_S = 2


class Cluster:
    def __init__(self, run: Path, net: netns.Network, *, levels: str, device: str,
                 learner_args: str, actor_args: str):  # fmt: skip
        self.run, self.net = run, net
        self.common = {"levels": levels, "port": PORT, "actor_args": actor_args}
        self.learner_args, self.device = learner_args, device
        self.hosts: dict[str, netns.Host] = {}
        self.settings: dict[str, Host] = {}  # the actor hosts' `make up` settings
        self.procs: dict[str, subprocess.Popen] = {}  # learner, eval, prometheus
        self.logs: list[Any] = []
        self.keys = run / "learner" / "keys"

    # -- addresses -----------------------------------------------------------------------------

    @property
    def learner_address(self) -> str:
        return f"{self.hosts['learner'].address}:{PORT}"

    def metrics_urls(self, label: str) -> dict[str, str]:
        """{process name: /metrics URL} of a host's processes."""
        address = self.hosts[label].address
        if label == "learner":
            return {"learner": f"http://{address}:{LEARNER_METRICS}/metrics"}
        if label == "eval":
            return {"eval": f"http://{address}:{ACTOR_METRICS_BASE + EVAL_ID}/metrics"}
        h = self.settings[label]
        urls = {f"actor-{i}": f"http://{address}:{h.actor_metrics_base + i}/metrics"
                for i in h.actor_ids}  # fmt: skip
        return urls | {f"relay-{label}": f"http://{address}:{h.relay_metrics_port}/metrics"}

    # -- starting ------------------------------------------------------------------------------

    def build(self) -> None:
        """Every host, its keys and run directory; the learner, Prometheus, the actor hosts and
        the eval host started, in that order."""
        for label in ("learner", *ACTORS, "eval"):
            self.hosts[label] = self.net.add_host(label)
        make_keys(self.keys, [*ACTORS["actors-a"], *ACTORS["actors-b"], EVAL_ID])
        self.start_learner()
        self.start_prometheus()
        for label in ACTORS:
            self.start_actor_host(label)
        self.start_eval()

    def _popen(
        self, name: str, label: str, argv: list[str], env: dict[str, str], log_dir: Path
    ) -> None:
        """`argv` started on host `label` as process `name`, its output in LOG_DIR/NAME.log."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log = open(log_dir / f"{name}.log", "ab")  # noqa: SIM115 (open while it runs)
        self.logs.append(log)
        self.procs[name] = subprocess.Popen(
            self.hosts[label].exec(argv), cwd=ROOT, env=os.environ | env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def _learner_host(self) -> Host:
        return Host(
            run=str(self.run / "learner"), host=self.hosts["learner"].address, port=PORT,
            device=self.device, metrics_host=self.hosts["learner"].address,
            learner_metrics_port=LEARNER_METRICS, n=1, eval=False, keys=str(self.keys),
            learner_args=self.learner_args, levels=self.common["levels"],
        ).resolved()  # fmt: skip

    def start_learner(self) -> None:
        argv = [sys.executable, "-m", "scripts.service", "exec", "learner"]
        logs = self.run / "learner" / "logs"
        self._popen("learner", "learner", argv, self._learner_host().environ(), logs)

    def learner_pid(self) -> int | None:
        p = self.procs.get("learner")
        return p.pid if p is not None and p.poll() is None else None

    def start_eval(self) -> None:
        label = "eval"
        keys = self.run / label / "keys"
        copy_keys(self.keys, keys, [EVAL_ID])
        h = Host(
            run=str(self.run / label), n=1, first_actor=EVAL_ID - 1, learner_autostart=False,
            eval=True, learner=self.learner_address, keys=str(keys), port=PORT,
            metrics_host=self.hosts[label].address, actor_metrics_base=ACTOR_METRICS_BASE,
            **{k: v for k, v in self.common.items() if k != "port"},
        ).resolved()  # fmt: skip
        argv = [sys.executable, "-m", "scripts.service", "exec", "eval"]
        self._popen("eval", label, argv, h.environ(), self.run / label / "logs")
        self.write_target(label, "mario-eval", "actor_id", {EVAL_ID: ACTOR_METRICS_BASE + EVAL_ID})

    def start_actor_host(self, label: str) -> None:
        """`make up` on an actor host, in a run directory of its own (a replacement host gets a
        fresh one: a new machine), with its actors' keys copied there."""
        ids = ACTORS[label]
        lives = sum(1 for p in self.run.glob(f"{label}*") if p.is_dir())
        run = self.run / (label if not lives else f"{label}.{lives}")
        copy_keys(self.keys, run / "keys", ids)
        h = Host(
            run=str(run), n=len(ids), first_actor=ids[0], learner_autostart=False,
            learner=self.learner_address, keys=str(run / "keys"),
            metrics_host=self.hosts[label].address, actor_metrics_base=ACTOR_METRICS_BASE,
            targets=str(run / "targets" / "actors.json"), **self.common,
        ).resolved()  # fmt: skip
        self.settings[label] = h
        self.make(label, "up")
        for path in write_targets(h):  # what the user copies to the Prometheus host
            target = self.run / "prometheus" / "targets" / f"{path.stem}-{label}.json"
            shutil.copyfile(path, target.with_suffix(".tmp"))
            os.replace(target.with_suffix(".tmp"), target)

    def make(self, label: str, target: str, timeout_s: float = 300) -> None:
        """`make TARGET` on an actor host, with its settings, as its user would type it."""
        settings = self.settings[label].environ()
        del settings["MARIO_CORES"]
        venv = Path(sys.executable).parent.parent
        argv = ["make", "--no-print-directory", "-o", f"{venv}/.installed", target, f"VENV={venv}"]
        argv += [f"{k.removeprefix('MARIO_')}={v}" for k, v in settings.items()]
        out = subprocess.run(self.hosts[label].exec(argv), cwd=ROOT, capture_output=True,
                             text=True, timeout=timeout_s, check=False)  # fmt: skip
        if out.returncode:
            raise RuntimeError(f"make {target} on {label} exited {out.returncode}:\n"
                               f"{out.stdout}{out.stderr}")  # fmt: skip

    def supervisor(self, label: str) -> Supervisor:
        return Supervisor(self.settings[label])

    def write_target(self, label: str, job: str, key: str, ports: dict[int, int]) -> None:
        address = self.hosts[label].address
        entries = [{"targets": [f"{address}:{p}"], "labels": {"job": job, key: str(i)}}
                   for i, p in ports.items()]  # fmt: skip
        path = self.run / "prometheus" / "targets" / f"{job}-{label}.json"
        path.with_suffix(".tmp").write_text(json.dumps(entries, indent=2) + "\n")
        os.replace(path.with_suffix(".tmp"), path)

    def start_prometheus(self) -> None:
        """Prometheus on the learner host: the learner, and every host's file_sd lists."""
        base = self.run / "prometheus"
        (base / "targets").mkdir(parents=True, exist_ok=True)
        jobs = [
            {
                "job_name": "mario-learner",
                "static_configs": [
                    {"targets": [f"{self.hosts['learner'].address}:{LEARNER_METRICS}"]}
                ],
            }
        ]
        for job, files in (
            ("mario-actor", "actors*.json"),
            ("mario-eval", "mario-eval-*.json"),
            ("mario-relay", "relay*.json"),
        ):
            jobs.append(
                {
                    "job_name": job,
                    "file_sd_configs": [
                        {"files": [str(base / "targets" / files)], "refresh_interval": "2s"}
                    ],
                }
            )
        config = {
            "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "scrape_timeout": "1s",
                       "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
            "rule_files": [str(ROOT / "deploy" / "prometheus" / "alerts.yml")],
            "scrape_configs": jobs,
        }  # fmt: skip
        (base / "prometheus.yml").write_text(json.dumps(config, indent=2) + "\n")  # YAML 1.2
        argv = ["prometheus", f"--config.file={base / 'prometheus.yml'}",
                f"--storage.tsdb.path={base / 'tsdb'}",
                f"--web.listen-address={self.hosts['learner'].address}:{PROMETHEUS_PORT}"]  # fmt: skip
        self._popen("prometheus", "learner", argv, {}, base / "logs")

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.hosts['learner'].address}:{PROMETHEUS_PORT}"

    # -- faults --------------------------------------------------------------------------------

    def kill_learner(self) -> int:
        pid = self.learner_pid()
        assert pid is not None, "the learner is not running"
        os.kill(pid, signal.SIGKILL)
        self.procs["learner"].wait(10)
        return pid

    def kill_host(self, label: str) -> None:
        """The host dies: all its processes killed at once (supervisord too), its link gone."""
        self.net.remove_host(self.hosts.pop(label))

    def replace_host(self, label: str) -> None:
        """A new machine takes a dead host's place: a new address, a new run directory."""
        self.hosts[label] = self.net.add_host(label)
        self.start_actor_host(label)

    # -- stopping ------------------------------------------------------------------------------

    def unexpected_exits(self) -> dict[str, int]:
        """{name: exit status} of the learner, eval or Prometheus processes that ended alone."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def stop(self) -> None:
        """`make down` on the actor hosts, SIGTERM to the rest, then every host removed (what
        is left in it killed)."""
        for label in list(self.settings):
            if label in self.hosts and self.supervisor(label).running_pid():
                try:
                    self.make(label, "down", timeout_s=300)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    print(f"make down on {label}: {exc}", flush=True)
        for name in ("eval", "learner", "prometheus"):
            if (p := self.procs.get(name)) is not None and p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 150  # the learner writes its final checkpoint
        for p in self.procs.values():
            try:
                p.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        for log in self.logs:
            log.close()


def copy_keys(keys: Path, to: Path, ids: list[int] | tuple[int, ...]) -> None:
    """What a user copies to an actor host: its actors' key directories, never the learner's."""
    for i in ids:
        shutil.copytree(keys / f"actor-{i}", to / f"actor-{i}", dirs_exist_ok=True)
