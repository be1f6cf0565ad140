"""Free TCP ports on 127.0.0.1 for the processes that benchmarks, the soak and tests start."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below it sit well-known services' fixed ports

_given: set[int] = set()  # every port this process has handed out; none is handed out twice
_lock = threading.Lock()
_random = random.Random()  # its own generator: a test that seeds `random` does not repeat ports


def _ephemeral() -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux; else IANA's 49152..65535)."""
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def _candidates(n: int, low: int, high: int) -> tuple[int, int]:
    """The bases [lo, hi) to draw from, given the ephemeral range low..high: outside it, so that no
    connection any process opens meanwhile takes a port between its pick and its server's bind."""
    if low - n >= LOWEST + 1000:
        return LOWEST, low - n + 1
    if 65536 - n - high >= 1000:
        return high + 1, 65536 - n + 1
    return 1024, 65536 - n + 1


def _worker_share(n: int, lo: int, hi: int, environ=os.environ) -> tuple[int, int]:
    """The bases [lo, hi) of ranges of n ports, cut to the share of one test worker of several
    running side by side (`make test`'s pytest-xdist workers: PYTEST_XDIST_WORKER=gwK of
    PYTEST_XDIST_WORKER_COUNT, which every process a test starts inherits), so that processes of
    different workers never draw the same port; everything else draws from all of [lo, hi)."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    count = environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker[:2] == "gw" and worker[2:].isdigit() and count.isdigit()):
        return lo, hi
    k, workers = int(worker[2:]), int(count)
    if not 0 <= k < workers:
        return lo, hi
    width = (hi + n - 1 - lo) // workers  # ports per worker (the last range ends at hi + n - 2)
    return lo + k * width, lo + (k + 1) * width - n + 1


def free_ports(n: int = 1) -> int:
    """A base port P such that P .. P+n-1 were all free on 127.0.0.1 just now.

    P is drawn from below the kernel's ephemeral range: the kernel takes ports there for every
    outgoing connection (and for bind to port 0), so a port picked there can be taken by any
    client in the seconds before its server binds it. A range that is not free right now (every
    port is bound to test) or that overlaps a port handed out earlier in this process is skipped:
    a server started on that earlier port may not have bound it yet. Another process may still take
    a port before the caller binds it; callers that start servers on these ports retry or fail
    loudly.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    lo, hi = _worker_share(n, *_candidates(n, *_ephemeral()))
    with _lock:
        for _ in range(1000):
            base = _random.randrange(lo, hi)
            ports = range(base, base + n)
            if any(p in _given for p in ports):
                continue
            try:
                with contextlib.ExitStack() as stack:
                    for port in ports:
                        stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            _given.update(ports)
            return base
    raise RuntimeError(f"no {n} consecutive free ports in {lo}..{hi + n - 2} on 127.0.0.1")
