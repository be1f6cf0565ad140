"""scripts/ports.py: every port of the range it returns binds; no port is handed out twice; none
comes from the kernel's ephemeral range; a bad size is refused."""

from __future__ import annotations

import socket

import pytest

from scripts import ports
from scripts.ports import free_ports


def test_every_port_of_the_range_binds():
    base = free_ports(5)
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", base))
        b.bind(("127.0.0.1", base + 4))


class Draws:
    """A generator that draws the bases it is given, in order: the bind test itself is real."""

    def __init__(self, bases: list[int]):
        self.bases = bases

    def randrange(self, lo: int, hi: int) -> int:
        return self.bases.pop(0)


def test_a_range_that_is_not_free_is_skipped(monkeypatch):
    """A range with a port some other socket holds is passed over for the next draw (the port was
    never handed out here, so only the bind test can tell)."""
    base = free_ports(6)  # six ports no other test of this process will be given
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 1))
        ports._given.difference_update(range(base, base + 6))
        monkeypatch.setattr(ports, "_random", Draws([base, base + 3]))
        assert free_ports(3) == base + 3, f"{base}..{base + 2} holds the bound port {base + 1}"


def test_no_port_is_handed_out_twice_before_its_server_binds():
    """Servers bind their ports some time after the ports are picked (a learner binds PORT+1 after
    its start-up), so the ranges handed out must never overlap, even though each was free on its own."""
    seen: set[int] = set()
    for i in range(400):
        n = 1 + i % 3
        base = free_ports(n)
        got = set(range(base, base + n))
        assert not got & seen, f"{sorted(got & seen)} handed out twice"
        seen |= got


def test_no_port_comes_from_the_ephemeral_range():
    """The kernel gives ports of its ephemeral range to every outgoing connection: a port picked
    there can be taken by a client between its pick and its server's bind."""
    low, high = ports._ephemeral()
    for i in range(300):
        n = 1 + i % 9
        base = free_ports(n)
        assert base + n - 1 < low or base > high, f"{base}..{base + n - 1} meets {low}..{high}"


def test_the_bases_stay_outside_the_ephemeral_range():
    """Below the range where there is room (Linux's and IANA's defaults), else above it."""
    assert ports._candidates(2, 32768, 60999) == (10_000, 32767)
    assert ports._candidates(1, 49152, 65535) == (10_000, 49152)
    assert ports._candidates(2, 1024, 40000) == (40001, 65535)


def test_a_range_of_zero_ports_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        free_ports(0)


def test_test_workers_draw_from_disjoint_shares_that_tile_the_range():
    """`make test` runs two pytest-xdist workers side by side, and every process a test starts
    inherits its worker's name: the ranges two workers can hand out never share a port."""
    lo, hi = ports._candidates(3, 32768, 60999)
    shares = [
        ports._worker_share(
            3, lo, hi, {"PYTEST_XDIST_WORKER": f"gw{k}", "PYTEST_XDIST_WORKER_COUNT": "2"}
        )
        for k in range(2)
    ]
    spans = [range(a, b - 1 + 3) for a, b in shares]  # the ports the share's ranges can hold
    assert spans[0].start == lo and spans[0].stop <= spans[1].start
    assert spans[1].stop <= hi - 1 + 3  # no port the undivided draw could not give
    assert all(len(span) > 10_000 for span in spans)


def test_outside_test_workers_the_whole_range_is_drawn_from():
    assert ports._worker_share(2, 10_000, 32767, {}) == (10_000, 32767)
    odd = {"PYTEST_XDIST_WORKER": "master", "PYTEST_XDIST_WORKER_COUNT": "2"}
    assert ports._worker_share(2, 10_000, 32767, odd) == (10_000, 32767)


def test_a_worker_draws_only_from_its_share(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    lo, hi = ports._worker_share(4, *ports._candidates(4, *ports._ephemeral()))
    for _ in range(200):
        base = free_ports(4)
        assert lo <= base < hi, f"{base} outside worker gw1's share {lo}..{hi - 1}"
