"""supervisord for one run directory, with deploy/supervisord/mario-impala.conf.

Started in the background (`make up`) or in the foreground under the watcher (`make train`,
`make actors`); asked and stopped over its XML-RPC socket, RUN/supervisor.sock, with supervisor's
own transport. Its programs run `python -m scripts.service exec ...` with the MARIO_* variables
it was started with (`Host.environ`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
import xmlrpc.client
from typing import Any, NamedTuple

from supervisor.xmlrpc import SupervisorTransport

from common.rundir import RunDir
from scripts.checkout import ROOT
from scripts.service.host import Host

CONF = ROOT / "deploy" / "supervisord" / "mario-impala.conf"
# supervisord's own words for an exit and for giving up on a process
EXITED = re.compile(r"exited: (\S+) \((.+); (not )?expected\)")
GAVE_UP = re.compile(r"gave up: (\S+) entered FATAL state")


class Exit(NamedTuple):
    """One exit supervisord logged."""

    name: str  # its program name: learner, actor-<i>, eval
    how: str  # "terminated by SIGKILL", "exit status 3", ..., "gave up" (FATAL)
    expected: bool  # an exit status it was told to expect (0, 2)

    def __str__(self) -> str:
        return f"{self.how}; {'expected' if self.expected else 'not expected'}"


class SupervisorError(RuntimeError):
    """supervisord could not be started, reached or stopped; the message says what to do."""


class Supervisor:
    def __init__(self, host: Host):
        self.host = host
        self.run = RunDir(host.run)
        self.env = {**os.environ, **host.environ(), "MARIO_PYTHON": sys.executable}
        self.popen: subprocess.Popen | None = None

    # ---- starting ------------------------------------------------------------------------

    def running_pid(self) -> int | None:
        """The pid of a live supervisord for this run directory, if there is one."""
        try:
            pid = int(self.run.supervisord_pid.read_text())
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        return pid

    def _check_free(self) -> None:
        if pid := self.running_pid():
            raise SupervisorError(
                f"supervisord (pid {pid}) already runs for {self.run.root}: stop it with "
                f"`make down RUN={self.host.run}`, or pass another RUN"
            )
        self.run.supervisord_pid.unlink(missing_ok=True)  # a dead supervisord's

    def start(self, *, foreground: bool) -> None:
        """Start supervisord; in the foreground it is this process's child (in its own session,
        so that Ctrl-C reaches only the watcher, which stops it in order) and gets SIGTERM should
        this process die. Returns once it answers on its socket."""
        self._check_free()
        self.run.logs.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "supervisor.supervisord", "-c", str(CONF)]
        out = open(self.run.logs / "supervisord.out", "ab")  # noqa: SIM115 (child owns it)
        with out:
            self.popen = subprocess.Popen(
                [*argv, "--nodaemon", "--silent"] if foreground else argv,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=foreground,
                preexec_fn=_die_with_parent if foreground else None,
            )
        self._wait_serving(foreground)

    def _wait_serving(self, foreground: bool) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            exited = self.popen.poll()
            if foreground and exited is not None or not foreground and exited not in (None, 0):
                raise SupervisorError(f"supervisord exited ({exited}):\n{self._output()}")
            with contextlib.suppress(OSError, xmlrpc.client.Error):
                if self.rpc().getState()["statename"] == "RUNNING":
                    return
            time.sleep(0.1)
        raise SupervisorError(f"supervisord did not answer within 60 s:\n{self._output()}")

    def _output(self) -> str:
        out = self.run.logs / "supervisord.out"
        return "\n".join(out.read_text(errors="replace").splitlines()[-20:])

    # ---- asking --------------------------------------------------------------------------

    def rpc(self) -> Any:
        transport = SupervisorTransport(None, None, f"unix://{self.run.supervisor_socket}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor

    def processes(self) -> dict[str, dict[str, Any]]:
        """{program name: supervisord's process info (state, pid, exitstatus, ...)}."""
        return {p["name"]: p for p in self.rpc().getAllProcessInfo()}

    def exits(self, *, rotated: bool = True) -> list[Exit]:
        """Every exit in supervisord's log, oldest first (`rotated`: its older files too), and
        each process it gave up on."""
        out = []
        logs = sorted(self.run.logs.glob("supervisord.log*" if rotated else "supervisord.log"))
        for path in reversed(logs):  # supervisord.log.2, .1, then the current one
            for line in path.read_text(errors="replace").splitlines():
                if m := EXITED.search(line):
                    out.append(Exit(m[1], m[2], m[3] is None))
                elif m := GAVE_UP.search(line):
                    out.append(Exit(m[1], "gave up", False))
        return out

    def log_tail(self, info: dict[str, Any], lines: int = 8) -> str:
        """The last lines a program (given by its process info) wrote to its log."""
        with contextlib.suppress(OSError, xmlrpc.client.Error):
            name = f"{info['group']}:{info['name']}"
            text, _, _ = self.rpc().tailProcessStdoutLog(name, 0, 8192)
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def stop(self, info: dict[str, Any]) -> None:
        """Stop one program (given by its process info) until asked to start it again."""
        with contextlib.suppress(OSError, xmlrpc.client.Error):
            self.rpc().stopProcess(f"{info['group']}:{info['name']}", False)

    # ---- stopping ------------------------------------------------------------------------

    def shutdown(self, timeout_s: float) -> bool:
        """Stop every program (supervisord stops the actors first; the learner writes its final
        checkpoint) and supervisord itself; True once it has exited within `timeout_s`."""
        try:
            self.rpc().shutdown()
        except (OSError, xmlrpc.client.Error) as exc:
            raise SupervisorError(f"cannot reach supervisord for {self.run.root}: {exc}") from exc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen is not None and self.popen.poll() is not None:
                return True
            if self.popen is None and not self.run.supervisord_pid.exists():
                return True
            time.sleep(0.2)
        return False


def _die_with_parent() -> None:
    """In the child: SIGTERM when the watcher dies (even by kill -9), so supervisord then stops
    its programs rather than run on unwatched. PR_SET_PDEATHSIG = 1."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
