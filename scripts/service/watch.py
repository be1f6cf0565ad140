"""`make train` and `make actors` in the foreground: supervisord runs the processes, this watches.

Every 2 s a status line, read from the learner's /metrics (and each actor's credit wait from
its own, for the bottleneck verdict, and the eval actor's score), so it shows what Prometheus
and Grafana show; under `make actors`, the actors' own figures. A page is read only if it is this
run's: its `mario_process_info` names the pid supervisord started the program with (another run
holding the port is said once, its figures left out). A process
that exits is reported on its own line with supervisord's reason and the process's last log
lines; supervisord restarts whatever crashed, and the status line counts the learner's
restarts. A process that refuses its configuration (exit status 2) is not restarted; when the
learner does, or every actor does, everything stops. So does everything, with status 0, when
the learner finishes the run (`--train-frames`, make train FRAMES=). Ctrl-C (or SIGTERM) stops
everything in order: the eval actor and the actors, then the learner with its final checkpoint.
"""

from __future__ import annotations

import signal
import sys
import time
import xmlrpc.client

from common.status import Owner, StatusWindow, actor_samples, eval_samples, read_page
from scripts.service.host import Host
from scripts.service.supervisor import Supervisor

REFUSED = 2  # exit status of a configuration error or a refusal by the learner
STATUS_INTERVAL_S = 2.0
POLL_S = 0.25
# supervisord shows a process EXITED for the moment between its exit and the restart that
# autorestart=unexpected makes; an exit is judged once its state has settled, or after this long
SETTLE_S = 3.0
AFTER_EXIT = {  # supervisord's state after an exit -> what it does about it
    "STARTING": "supervisord restarted it",
    "RUNNING": "supervisord restarted it",
    "BACKOFF": "supervisord restarts it",
    "FATAL": "supervisord gave up on it",
}


class Watcher:
    def __init__(self, host: Host, supervisor: Supervisor):
        self.host = host
        self.supervisor = supervisor
        self.pids: dict[str, int] = {}  # each program's newest pid
        self.stops: dict[str, int] = {}  # each program's last exit time, as supervisord has it
        self.restarts: dict[str, int] = {}
        self.last_restart: dict[str, float] = {}
        self.refused: set[str] = set()
        self.finished = False  # the learner exited 0: the run is over
        self.unsettled: dict[str, float] = {}  # exits seen in state EXITED, not yet reported
        self.window = StatusWindow()
        self.stopping = False
        self.strangers: dict[str, Owner | None] = {}  # programs whose port another process holds

    def run(self, grace_s: float) -> int:
        """Watch until Ctrl-C or an exit the run cannot go on without, then stop everything;
        returns the exit status."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._stop)
        code, last_status = None, time.monotonic()
        while not self.stopping and code is None:
            time.sleep(POLL_S)
            try:
                code = self.observe(self.supervisor.processes())
            except (OSError, xmlrpc.client.Error) as exc:
                if self.supervisor.popen.poll() is not None:
                    print(
                        f"\nsupervisord exited ({self.supervisor.popen.returncode})",
                        file=sys.stderr,
                    )
                    return 1
                print(f"\nsupervisord does not answer ({exc}); asking again", file=sys.stderr)
            if time.monotonic() - last_status >= STATUS_INTERVAL_S:
                self.print_status()
                last_status = time.monotonic()
        print("\nstopping...", file=sys.stderr)
        if not self.supervisor.shutdown(grace_s):
            print(f"supervisord did not stop within {grace_s:.0f} s; killing it", file=sys.stderr)
            self.supervisor.popen.kill()
            self.supervisor.popen.wait()
        return code or 0

    def _stop(self, *_: object) -> None:
        self.stopping = True

    # ---- exits and restarts ----------------------------------------------------------------

    def observe(self, processes: dict[str, dict]) -> int | None:
        """Report every exit and restart since the last call; the exit status when the run
        cannot go on, else None."""
        now = time.monotonic()
        for name, info in processes.items():  # supervisord stamps every exit's time
            over = name in self.refused or (name == "learner" and self.finished)
            if info["stop"] and info["stop"] != self.stops.get(name) and not over:
                self.unsettled.setdefault(name, now)
        for name, info in processes.items():
            self.stops[name] = info["stop"]
            pid, last = info["pid"], self.pids.get(name, 0)
            if pid and last and pid != last:
                self.restarts[name] = self.restarts.get(name, 0) + 1
                self.last_restart[name] = now
                if name == "learner":  # its counters start again from 0
                    self.window = StatusWindow(self.window.window_s)
            self.pids[name] = pid or last
        settled = [
            name
            for name, since in self.unsettled.items()
            if processes[name]["statename"] != "EXITED" or now - since >= SETTLE_S
        ]
        for name in settled:
            del self.unsettled[name]
        if settled:
            self.report(settled, processes)
        return self.verdict(processes)

    def report(self, exited: list[str], processes: dict[str, dict]) -> None:
        newest = {e.name: e for e in self.supervisor.exits(rotated=False)}
        for name in exited:
            info, last = processes[name], newest.get(name)
            reason = str(last) if last else info["statename"].lower()
            if last and last.how == f"exit status {REFUSED}":
                # A restart cannot fix a refused configuration, but supervisord retries whatever
                # exits within startsecs: stop it.
                self.refused.add(name)
                self.supervisor.stop(info)
                what, then = "refused to start", "not restarted"
            elif name == "learner" and last and last.how == "exit status 0":
                # The learner exits 0 only when the run is over (--train-frames reached, or it
                # was stopped). One that got there within startsecs of its start, say a resumed
                # run a few updates short of its frames, counts to supervisord as a failed start
                # and would be retried: stop it.
                self.finished = True
                self.supervisor.stop(info)
                what, then = "exited", "not restarted"
            else:
                what, then = "exited", AFTER_EXIT.get(info["statename"], "not restarted")
            print(
                f"\n{name} {what} ({reason}); {then}; log: {info['stdout_logfile']}\n"
                f"{self.supervisor.log_tail(info)}",
                file=sys.stderr,
            )

    def verdict(self, processes: dict[str, dict]) -> int | None:
        """Stop when the learner has stopped for good, or every actor has."""
        down = ("EXITED", "FATAL")
        learner = processes.get("learner")

        def gone(name: str) -> bool:
            info = processes[name]
            return name not in self.unsettled and info["start"] and info["statename"] in down

        if learner and gone("learner") and not self.finished:
            if learner["statename"] != "EXITED" or learner["exitstatus"] != 0:
                return learner["exitstatus"] or 1
            self.finished = True  # --train-frames reached
        if self.finished:
            print("\nthe learner has finished the run", file=sys.stderr)
            return 0
        if "learner" in self.refused:
            return REFUSED
        actors = [name for name in processes if name.startswith("actor-")]
        if actors and all(a in self.refused or gone(a) for a in actors):
            return REFUSED if self.refused.issuperset(actors) else 1
        return None

    # ---- the status line -------------------------------------------------------------------

    def print_status(self) -> None:
        line = self.learner_line() if self.host.learner_autostart else self.actors_line()
        if line:
            sys.stderr.write("\r" + line + "  ")
            sys.stderr.flush()

    def _url(self, port: int) -> str:
        host = self.host.metrics_host
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/metrics"

    def own_samples(self, name: str, port: int, timeout_s: float = 2.0) -> dict[str, float]:
        """The samples of program `name`'s /metrics on `port`; {} when the page does not answer
        or is another process's: its mario_process_info must name the pid supervisord started
        `name` with. Another run that holds the port would otherwise show its figures as this
        run's; that is said once (again only if the holder changes)."""
        url = self._url(port)
        page = read_page(url, timeout_s)
        if page is None:
            return {}
        pid = self.pids.get(name, 0)
        if page.owner is not None and pid and page.owner.pid == pid:
            self.strangers.pop(name, None)
            return page.samples
        if name not in self.strangers or self.strangers[name] != page.owner:
            self.strangers[name] = page.owner
            who = page.owner or "a process that does not say whose it is"
            print(
                f"\n{url} answers for {who}, not for this run's {name} (pid {pid or 'not yet'}): "
                "left out of the status line. Another run holds the port: stop it, or give "
                "this run ports of its own (PORT, LEARNER_METRICS_PORT, ACTOR_METRICS_BASE)",
                file=sys.stderr,
            )
        return {}

    def learner_line(self) -> str | None:
        """The learner's status line (common/status.py), with its restarts."""
        now = self.own_samples("learner", self.host.learner_metrics_port)
        if not now:
            return None
        if base := self.host.actor_metrics_base:  # those that answer, for the credit wait
            for i in self.host.actor_ids:
                now |= actor_samples(self.own_samples(f"actor-{i}", base + i, 0.5), i)
            if self.host.eval:  # its perturbed score against the best policy kept
                now |= eval_samples(self.own_samples("eval", self.host.eval_metrics_port, 0.5))
        line = self.window.line(now)
        if restarts := self.restarts.get("learner"):
            ago = time.monotonic() - self.last_restart["learner"]
            line += f" | learner restarted {restarts}x, last {ago:.0f} s ago"
        return line

    def actors_line(self) -> str | None:
        """`make actors`: how many actors the learner accepts, their steps/s and chunks."""
        if not (base := self.host.actor_metrics_base):
            return None
        ids = self.host.actor_ids
        samples = [self.own_samples(f"actor-{i}", base + i, timeout_s=0.5) for i in ids]
        total = lambda name: sum(s.get(name, 0) for s in samples)  # noqa: E731
        versions = [s["mario_actor_policy_version"] for s in samples if s]
        return (
            f"actors {total('mario_actor_connected'):.0f}/{self.host.n} connected | "
            f"{total('mario_actor_agent_steps_per_second'):7.0f} steps/s | "
            f"chunks sent {total('mario_actor_chunks_sent_total'):.0f} | "
            f"policy v{min(versions, default=0):.0f}"
        )
