"""Free TCP ports on 127.0.0.1 for the processes that benchmarks, the soak and tests start."""

from __future__ import annotations

import contextlib
import socket


def free_ports(n: int = 1) -> int:
    """A base port P such that P .. P+n-1 were all free on 127.0.0.1 just now.

    The kernel picks P (bind to port 0); the next n-1 ports are then bound together, so a range
    that is only partly free is skipped. Another process may still take a port before the caller
    binds it; callers that start servers on these ports retry or fail loudly.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65536:
            continue
        try:
            with contextlib.ExitStack() as stack:
                for port in range(base, base + n):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")
