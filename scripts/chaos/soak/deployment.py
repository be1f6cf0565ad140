"""The deployment under test: what `make up` starts for one run dir, on ports of its own, and
supervisord's view of it (its processes now, and every exit it logged). The only module of the
soak that knows how the deployment is started, stopped and addressed."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import time
import xmlrpc.client
from pathlib import Path
from typing import Any, NamedTuple

from supervisor.xmlrpc import SupervisorTransport

from common import status
from scripts.ports import free_ports

ROOT = Path(__file__).resolve().parents[3]
RUNNING = 20  # supervisord's process state code
STARTSECS = 10.0  # deploy/supervisord/mario-impala.conf: a process younger than this is starting
# supervisord's own words for an exit and for giving up on a process
EXITED = re.compile(r"exited: (\S+) \((.+); (not )?expected\)")
GAVE_UP = re.compile(r"gave up: (\S+) entered FATAL state")


class Exit(NamedTuple):
    name: str  # supervisord's process name: learner, actor-<i>, eval
    how: str  # "terminated by SIGKILL", "exit status 3", ..., "gave up" (FATAL)
    expected: bool


class Deployment:
    """`make up` / `make down` of a learner (`device`), `actors` actors and the eval actor."""

    def __init__(self, run_dir: Path, actors: int, level: str, device: str, learner_args: str,
                 actor_args: str):  # fmt: skip
        self.run_dir = run_dir
        self.actors = [f"actor-{i}" for i in range(actors)]
        self.port = free_ports(2)  # the learner's chunk and weights ports
        self.learner_metrics = free_ports(1)
        self.actor_base = free_ports(actors + 1)  # actor i's /metrics on base + i, eval's on +N
        self.venv = Path(sys.executable).parent.parent
        self.settings = {
            "RUN": run_dir,
            "N": actors,
            "PORT": self.port,
            "LEARNER": f"127.0.0.1:{self.port}",
            "LEARNER_METRICS_PORT": self.learner_metrics,
            "ACTOR_METRICS_BASE": self.actor_base,
            "TARGETS": run_dir / "targets" / "actors.json",
            "LEVEL": level,
            "DEVICE": device,
            "LEARNER_ARGS": learner_args,
            "ACTOR_ARGS": actor_args,
        }
        self.transport: SupervisorTransport | None = None
        self.rpc: Any = None

    def make(self, target: str, timeout_s: float = 300) -> None:
        argv = ["make", "--no-print-directory", "-o", f"{self.venv}/.installed", target]
        argv += [f"VENV={self.venv}", *(f"{k}={v}" for k, v in self.settings.items())]
        out = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if out.returncode:
            raise RuntimeError(f"make {target} exited {out.returncode}:\n{out.stdout}{out.stderr}")

    def up(self) -> None:
        self.make("up")
        sock = self.run_dir / "supervisor.sock"
        deadline = time.monotonic() + 30
        while not sock.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"supervisord made no {sock} in 30 s")
            time.sleep(0.1)
        self.transport = SupervisorTransport(serverurl=f"unix://{sock}")
        self.rpc = xmlrpc.client.ServerProxy("http://localhost", transport=self.transport)

    def down(self) -> None:
        if (self.run_dir / "supervisord.pid").exists():
            self.make("down", timeout_s=400)

    def processes(self) -> dict[str, dict[str, Any]]:
        """{name: supervisord's process info} (pid, state, start, now, ...); {} if it is silent."""
        try:
            return {p["name"]: p for p in self.rpc.supervisor.getAllProcessInfo()}
        except (OSError, http.client.HTTPException, xmlrpc.client.Error):
            if self.transport is not None:
                self.transport.close()  # the next call connects afresh
            return {}

    def scrape(self, name: str) -> dict[str, float]:
        """The /metrics of "learner", "actor-<i>" or "eval" (id N); {} when it does not answer."""
        if name == "learner":
            port = self.learner_metrics
        else:
            port = self.actor_base + (len(self.actors) if name == "eval" else int(name[6:]))
        return status.scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=1.0)

    def exits(self) -> list[Exit]:
        """Every exit in supervisord's log (rotated files too), and each process it gave up on."""
        out = []
        for path in sorted((self.run_dir / "logs").glob("supervisord.log*")):
            for line in path.read_text(errors="replace").splitlines():
                if m := EXITED.search(line):
                    out.append(Exit(m[1], m[2], m[3] is None))
                elif m := GAVE_UP.search(line):
                    out.append(Exit(m[1], "gave up", False))
        return out


def running_for(procs: dict[str, dict[str, Any]], name: str) -> float:
    """Seconds `name` has been RUNNING (supervisord's clock); -1 if it is not."""
    p = procs.get(name)
    if not p or p["state"] != RUNNING or p["pid"] <= 0:
        return -1.0
    return p["now"] - p["start"]
