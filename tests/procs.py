"""Real processes for integration tests: free ports, learner/actor launchers, /metrics scraping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import status
from scripts.checkout import ROOT
from scripts.ports import free_ports as free_port  # noqa: F401  (free_port(span): P .. P+span-1 free)


class Proc:
    """A child process with its output in a log file; stopped (then killed) on `stop`."""

    def __init__(self, argv: list[str], log: Path):
        self.argv, self.log = argv, log
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(
                argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, then the exit status; SIGKILL only if it is still running after `timeout_s`
        (a loaded machine can take seconds to finish an update, checkpoint and close)."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def kill9(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def learner(run_dir: Path, port: int, metrics_port: int, *args: str) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "learner",
        "--run-dir",
        str(run_dir),
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--device",
        "cpu",
        *args,
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    return Proc(argv, run_dir.parent / f"{run_dir.name}-learner.log")


def actor(
    log_dir: Path, port: int, actor_id: int, metrics_port: int, *args: str, module: str = "actor"
) -> Proc:
    """A training actor (`module` "actor") or the eval actor ("actor.eval")."""
    argv = [
        sys.executable,
        "-m",
        module,
        "--learner",
        f"127.0.0.1:{port}",
        "--actor-id",
        str(actor_id),
        "--metrics-port",
        str(metrics_port),
        *args,
    ]
    return Proc(argv, log_dir / f"actor-{actor_id}.log")


def scrape(port: int) -> dict[str, float]:
    """{name or name{k=v,...}: value} from http://127.0.0.1:port/metrics; {} if unreachable."""
    return status.scrape(f"http://127.0.0.1:{port}/metrics")


def wait_until(
    what: str, check: Callable[[], bool], timeout_s: float, procs: list[Proc] = ()
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        for p in procs:
            if not p.alive():
                raise AssertionError(
                    f"{p.argv[2]} exited ({p.popen.returncode}) while waiting for {what}:\n{p.output()[-3000:]}"
                )
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.log}\n{p.output()[-2000:]}" for p in procs)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{logs}")
