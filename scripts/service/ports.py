"""The ports a host's processes bind, checked before supervisord starts any of them.

A second run on one machine (another RUN) whose ports another run holds would otherwise start
anyway: its learner, unable to bind, exits and is restarted again and again, and a status line
reading that port shows the other run's figures. So `make train`, `make up` and `make actors`
refuse once, before starting anything, naming each port in use, the process that holds it (when
this user may see it) and free ports to pass instead. They never move to other ports on their
own: PORT is where actors on other hosts connect and the metrics ports are Prometheus's targets,
so a port that changed by itself would break what was set up around it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import socket
from pathlib import Path
from typing import NamedTuple

from scripts.service.host import Host

# make variable -> the Host field it sets
VARIABLES = {
    "PORT": "port",
    "LEARNER_METRICS_PORT": "learner_metrics_port",
    "ACTOR_METRICS_BASE": "actor_metrics_base",
}
SEARCH = 1000  # ports tried above a taken one for a suggestion


class Binding(NamedTuple):
    """One port a process of the host listens on."""

    variable: str  # the make variable that moves it (VARIABLES)
    what: str
    host: str
    port: int


def bindings(h: Host) -> list[Binding]:
    """Every port this host's processes bind, as scripts/service/host.py gives them their flags."""
    out = []
    if h.learner_autostart:
        out += [
            Binding("PORT", "the learner's chunks (PORT)", h.host, h.port),
            Binding("PORT", "the learner's weight broadcasts (PORT+1)", h.host, h.port + 1),
        ]
        if h.learner_metrics_port:
            what = "the learner's /metrics"
            out.append(
                Binding("LEARNER_METRICS_PORT", what, h.metrics_host, h.learner_metrics_port)
            )
    if h.relay:
        out.append(Binding("PORT", "the relay's broadcasts (PORT+2)", "127.0.0.1", h.port + 2))
    if base := h.actor_metrics_base:
        out += [
            Binding("ACTOR_METRICS_BASE", f"actor {i}'s /metrics", h.metrics_host, base + i)
            for i in h.actor_ids
        ]
        if h.eval:
            what = "the eval actor's /metrics"
            out.append(Binding("ACTOR_METRICS_BASE", what, h.metrics_host, h.eval_metrics_port))
        if h.relay:
            what = "the relay's /metrics"
            out.append(Binding("ACTOR_METRICS_BASE", what, h.metrics_host, h.relay_metrics_port))
    return out


def in_use(host: str, port: int) -> bool:
    """Whether a listening socket holds host:port now. Bound the way the processes bind it
    (SO_REUSEADDR, as zmq and the /metrics server do), so a port a stopped run left in TIME_WAIT
    is free; an address that cannot be bound for another reason is left to the process to
    report."""
    if not 0 < port < 65536:
        return False
    host = "0.0.0.0" if host in ("*", "") else host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host.strip("[]"), port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def holder(port: int) -> str:
    """The process that listens on TCP `port` ("pid 123: python -m learner ..."), found through
    /proc; "" when it cannot be seen (another user's, or not Linux)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir() if inodes else ():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(str(fd.readlink()) in inodes for fd in (proc / "fd").iterdir()):
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                command = " ".join(a.decode(errors="replace") for a in argv if a)
                return f"pid {proc.name}: {command[:160]}"
    return ""


def suggestion(h: Host, taken: list[Binding]) -> dict[str, int]:
    """For each variable with a taken port, the nearest value above it whose ports are all free
    and apart from every other port of this host."""
    chosen: dict[str, int] = {}
    for variable in dict.fromkeys(b.variable for b in taken):
        field = VARIABLES[variable]
        start = getattr(h, field)
        for value in range(start + 1, min(start + SEARCH, 65535)):
            moves = {VARIABLES[v]: p for v, p in chosen.items()} | {field: value}
            planned = bindings(dataclasses.replace(h, **moves))
            mine = [b for b in planned if b.variable == variable]
            ports = {b.port for b in mine}
            others = {b.port for b in planned if b.variable != variable}
            apart = len(ports) == len(mine) and not others & ports and max(ports) < 65536
            if apart and not any(in_use(b.host, b.port) for b in mine):
                chosen[variable] = value
                break
    return chosen


def refusal(h: Host, command: str) -> str | None:
    """Why `make COMMAND` must not start: every port of this host that is in use, who holds it
    and the ports to pass instead; None when every port is free."""
    taken = [b for b in bindings(h) if in_use(b.host, b.port)]
    if not taken:
        return None
    lines = []
    for b in taken:
        who = holder(b.port)
        lines.append(
            f"  {b.variable} {b.port}: {b.what} on {b.host}, held by {who or 'another process'}"
        )
    fix = " ".join(f"{v}={p}" for v, p in suggestion(h, taken).items())
    return (
        "ports of this run are in use, so nothing was started:\n" + "\n".join(lines) + "\n"
        "Another run on this machine? Stop it, or give this one ports of its own, e.g.\n"
        f"  make {command} {fix} (and your other settings)"
    )
