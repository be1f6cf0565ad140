"""The rehearsal's machines: network namespaces on one bridge (scripts/dev/chaos/netns.py), each a
host with its own run directory, started with docs/DEPLOY.md's own commands (layout.py):

    learner     the page's `make keys` and learner-host `make up`: the learner, its actors and the
                eval actor under supervisord (which restarts the learner after a kill), and
                Prometheus scraping every host with the project's alert rules
    actors-<k>  the page's k-th actor-host `make up` (LEARNER_AUTOSTART=false, a relay beside the
                actors: RELAY's default), with its actors' key directories copied over

Every host runs ACTORS_PER_HOST actors rather than the page's N (ids from the page's FIRST_ACTOR);
the page's addresses become the hosts' own. Every host has its own network stack, so they all use
the same ports. The only module of the rehearsal that knows how the hosts are built, started,
killed and addressed."""

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

from scripts.checkout import ROOT
from scripts.dev.chaos import netns
from scripts.dev.chaos.hosts import layout as page
from scripts.service.host import Host
from scripts.service.supervisor import Supervisor
from scripts.service.targets import write_targets

ACTORS_PER_HOST = 2
PROMETHEUS_PORT = 9090
SCRAPE_INTERVAL_S = 2


class Cluster:
    def __init__(self, run: Path, net: netns.Network, *, levels: str, device: str,
                 learner_args: str, actor_args: str):  # fmt: skip
        self.run, self.net = run, net
        self.layout = page.read()
        self.port = int(self.layout.learner.variables["LEARNER"].rpartition(":")[2])
        self.common = {"LEVELS": levels, "ACTOR_ARGS": actor_args}
        self.learner_vars = {"DEVICE": device, "LEARNER_ARGS": learner_args}
        self.hosts: dict[str, netns.Host] = {}
        self.settings: dict[str, Host] = {}  # each host's `make up` settings
        self.procs: dict[str, subprocess.Popen] = {}  # prometheus
        self.logs: list[Any] = []
        self.keys = run / "learner" / "keys"

    @property
    def actor_hosts(self) -> list[str]:
        return page.actor_host_labels(self.layout)

    # -- addresses -----------------------------------------------------------------------------

    @property
    def learner_address(self) -> str:
        return f"{self.hosts['learner'].address}:{self.port}"

    def actors_on(self, label: str) -> list[str]:
        return [f"actor-{i}" for i in self.settings[label].actor_ids]

    def metrics_urls(self, label: str) -> dict[str, str]:
        """{process name: /metrics URL} of a host's processes, as seen from inside it."""
        h = self.settings[label]
        address = self.hosts[label].address if h.metrics_host == "0.0.0.0" else h.metrics_host
        ports = {f"actor-{i}": h.actor_metrics_base + i for i in h.actor_ids}
        ports |= {"learner": h.learner_metrics_port} if h.learner_autostart else {}
        ports |= {"eval": h.eval_metrics_port} if h.eval else {}
        ports |= {f"relay-{label}": h.relay_metrics_port} if h.relay else {}
        return {name: f"http://{address}:{port}/metrics" for name, port in ports.items()}

    # -- starting ------------------------------------------------------------------------------

    def build(self) -> None:
        """Every host; the learner host's keys, make up there and Prometheus, then each actor
        host's make up."""
        for label in ("learner", *self.actor_hosts):
            self.hosts[label] = self.net.add_host(label)
        self.make_on("learner", "keys", self.layout.keys, {"RUN": str(self.run / "learner")})
        targets = self.run / "prometheus" / "targets"
        targets.mkdir(parents=True, exist_ok=True)
        self.start_host("learner", self.layout.learner, self.run / "learner",
                        {"TARGETS": str(targets), **self.learner_vars})  # fmt: skip
        self.start_prometheus()
        for label in self.actor_hosts:
            self.start_actor_host(label)

    def _page_variables(self, label: str, command: page.Command) -> dict[str, str]:
        """The page's line for a host, with this host's addresses for the page's, this
        rehearsal's keys and ACTORS_PER_HOST actors."""
        page_learner = self.layout.learner_address
        address = self.hosts[label].address
        out = {}
        for name, value in command.variables.items():
            value = value.replace(page_learner, self.hosts["learner"].address)
            if name == "METRICS_HOST" and value not in ("127.0.0.1", "0.0.0.0"):
                value = address  # the page's address of that host
            out[name] = value
        return out | {"N": str(ACTORS_PER_HOST)}

    def start_host(self, label: str, command: page.Command, run: Path, extra: dict) -> None:
        """`make up` on a host with the page's line for it (and `extra`)."""
        variables = self._page_variables(label, command)
        variables |= {"RUN": str(run), "KEYS": str(run / "keys"), **self.common, **extra}
        self.settings[label] = page.Command("up", variables).host()
        self.make_on(label, "up", page.Command("up", variables))

    def start_actor_host(self, label: str) -> None:
        """`make up` on an actor host, in a run directory of its own (a replacement host gets a
        fresh one: a new machine), with its actors' keys copied there."""
        command = self.layout.actor_hosts[self.actor_hosts.index(label)]
        lives = sum(1 for p in self.run.glob(f"{label}*") if p.is_dir())
        run = self.run / (label if not lives else f"{label}.{lives}")
        first = int(command.variables.get("FIRST_ACTOR", "0"))
        copy_keys(self.keys, run / "keys", range(first, first + ACTORS_PER_HOST))
        self.start_host(label, command, run, {"TARGETS": str(run / "targets")})
        for path in write_targets(self.settings[label]):  # what the user copies to Prometheus
            target = self.run / "prometheus" / "targets" / f"{path.stem}-{label}.json"
            shutil.copyfile(path, target.with_suffix(".tmp"))
            os.replace(target.with_suffix(".tmp"), target)

    def make_on(self, label: str, target: str, command: page.Command,
                extra: dict | None = None, timeout_s: float = 300) -> None:  # fmt: skip
        """`make TARGET` on a host with a page line's variables, as its user would type it."""
        venv = Path(sys.executable).parent.parent
        variables = {**command.variables, **(extra or {})}
        if target == "keys":
            variables["KEYS"] = str(self.keys)
        argv = ["make", "--no-print-directory", "-o", f"{venv}/.installed", target, f"VENV={venv}"]
        argv += [f"{k}={v}" for k, v in variables.items()]
        out = subprocess.run(self.hosts[label].exec(argv), cwd=ROOT, capture_output=True,
                             text=True, timeout=timeout_s, check=False)  # fmt: skip
        if out.returncode:
            raise RuntimeError(f"make {target} on {label} exited {out.returncode}:\n"
                               f"{out.stdout}{out.stderr}")  # fmt: skip

    def make_down(self, label: str) -> None:
        self.make_on(label, "down", page.Command("down", {"RUN": self.settings[label].run}))

    def supervisor(self, label: str) -> Supervisor:
        return Supervisor(self.settings[label])

    def start_prometheus(self) -> None:
        """Prometheus on the learner host: the learner, and every host's file_sd lists (the
        learner host's written there by its make up, the actor hosts' copied over)."""
        base = self.run / "prometheus"
        h = self.settings["learner"]
        jobs = [{"job_name": "mario-learner",
                 "static_configs": [{"targets": [f"{h.metrics_host}:{h.learner_metrics_port}"]}]}]  # fmt: skip
        for job, files in (
            ("mario-actor", "actors*.json"),
            ("mario-eval", "eval*.json"),
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
        log_dir = base / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log = open(log_dir / "prometheus.log", "ab")  # noqa: SIM115 (open while it runs)
        self.logs.append(log)
        self.procs["prometheus"] = subprocess.Popen(
            self.hosts["learner"].exec(argv), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.hosts['learner'].address}:{PROMETHEUS_PORT}"

    # -- faults --------------------------------------------------------------------------------

    def learner_pid(self) -> int | None:
        info = self.supervisor("learner").processes().get("learner", {})
        return info.get("pid") or None if info.get("statename") == "RUNNING" else None

    def kill_learner(self) -> int:
        """SIGKILL to the learner; supervisord starts it again (autorestart), as systemd's
        Restart=on-failure would."""
        pid = self.learner_pid()
        assert pid is not None, "the learner is not running"
        os.kill(pid, signal.SIGKILL)
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
        """{name: exit status} of the processes started outside supervisord that ended alone."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def stop(self) -> None:
        """`make down` on every host, the actor hosts first (the learner writes its final
        checkpoint), SIGTERM to Prometheus, then every host removed (what is left killed)."""
        for label in [*self.actor_hosts, "learner"]:
            if (
                label in self.hosts
                and label in self.settings
                and self.supervisor(label).running_pid()
            ):
                try:
                    self.make_down(label)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    print(f"make down on {label}: {exc}", flush=True)
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            try:
                p.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        for log in self.logs:
            log.close()


def copy_keys(keys: Path, to: Path, ids: range) -> None:
    """What a user copies to an actor host: its actors' key directories, never the learner's."""
    for i in ids:
        shutil.copytree(keys / f"actor-{i}", to / f"actor-{i}", dirs_exist_ok=True)
