"""scripts/ports.py: every port of the range it returns binds; a bad size is refused."""

from __future__ import annotations

import socket

import pytest

from scripts.ports import free_ports


def test_every_port_of_the_range_binds():
    base = free_ports(5)
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", base))
        b.bind(("127.0.0.1", base + 4))


def test_a_range_of_zero_ports_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        free_ports(0)
