"""The deployment under test: what `make up` starts for one run dir, on ports of its own, and
supervisord's view of it (its processes now, and every exit it logged). The only module of the
soak that knows how the deployment is started, stopped and addressed."""

from __future__ import annotations

import http.client
import subprocess
import sys
import xmlrpc.client
from pathlib import Path
from typing import Any

from common import status
from scripts.checkout import ROOT
from scripts.ports import free_ports
from scripts.service.host import Host
from scripts.service.supervisor import Supervisor

STARTSECS = 10.0  # deploy/supervisord/mario-impala.conf: a process younger than this is starting


class Deployment:
    """`make up` / `make down` of a learner, `actors` actors and the eval actor, on ports of their
    own; `settings`: more Host fields (levels, device, learner_args, actor_args)."""

    def __init__(self, run_dir: Path, actors: int, **settings: Any):
        self.actors = [f"actor-{i}" for i in range(actors)]
        self.host = Host(
            run=str(run_dir),
            n=actors,
            port=free_ports(2),  # the learner's chunk and weights ports
            learner_metrics_port=free_ports(1),
            actor_metrics_base=free_ports(actors + 1),  # actor i's on base + i, eval's on +N
            targets=str(run_dir / "targets"),
            **settings,
        ).resolved()
        self.supervisor = Supervisor(self.host)

    def make(self, target: str, timeout_s: float = 300) -> None:
        """`make TARGET` with this deployment's settings, as a user would type them."""
        settings = self.host.environ()
        del settings["MARIO_CORES"]  # the host's cores are the machine's own, not a make setting
        venv = Path(sys.executable).parent.parent
        argv = ["make", "--no-print-directory", "-o", f"{venv}/.installed", target, f"VENV={venv}"]
        argv += [f"{k.removeprefix('MARIO_')}={v}" for k, v in settings.items()]
        out = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if out.returncode:
            raise RuntimeError(f"make {target} exited {out.returncode}:\n{out.stdout}{out.stderr}")

    def down(self) -> None:
        if self.supervisor.running_pid():
            self.make("down", timeout_s=400)

    def processes(self) -> dict[str, dict[str, Any]]:
        """{name: supervisord's process info} (pid, state, start, now, ...); {} if it is silent."""
        try:
            return self.supervisor.processes()
        except (OSError, http.client.HTTPException, xmlrpc.client.Error):
            return {}

    def scrape(self, name: str) -> dict[str, float]:
        """The /metrics of "learner", "actor-<i>" or "eval"; {} when it does not answer."""
        if name == "learner":
            port = self.host.learner_metrics_port
        elif name == "eval":
            port = self.host.eval_metrics_port
        else:
            port = self.host.actor_metrics_base + int(name[6:])
        return status.scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=1.0)


def running_for(procs: dict[str, dict[str, Any]], name: str) -> float:
    """Seconds `name` has been RUNNING (supervisord's clock); -1 if it is not."""
    p = procs.get(name)
    return p["now"] - p["start"] if p and p["statename"] == "RUNNING" else -1.0
