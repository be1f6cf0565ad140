"""Hosts in network namespaces: each reaches the machine over its own link, and a link taken down
is a partition (connections time out, nobody is told) until it comes back."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from scripts.dev.chaos import netns

WHY = netns.unavailable()
pytestmark = [
    pytest.mark.alone,  # network namespaces: the machine's, compared before and after
    pytest.mark.skipif(WHY is not None, reason=f"no network namespaces here: {WHY}"),
]

CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).sendall(b'hi')\n"
    "except OSError as exc:\n"
    "    sys.exit(f'{type(exc).__name__}')\n"
)


def ours() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.startswith("mario-")}


def connect(host: netns.Host, address: str, port: int) -> subprocess.CompletedProcess:
    argv = host.exec([sys.executable, "-c", CONNECT, address, str(port)])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def test_hosts_reach_the_machine_and_each_other_until_their_link_goes_down():
    before = ours()
    server = socket.create_server(("0.0.0.0", 0))
    port = server.getsockname()[1]
    with server, netns.Network() as net:
        a, b = net.add_host("a"), net.add_host("b")
        assert a.address != b.address and len(ours() - before) == 2
        assert connect(a, net.gateway, port).returncode == 0
        peer, (address, _) = server.accept()
        assert peer.recv(2) == b"hi" and address == a.address  # not NATed: the host's own address
        peer.close()

        net.link(a, up=False)  # a partition: no RST comes back, the connect times out
        down = connect(a, net.gateway, port)
        assert down.returncode != 0 and "TimeoutError" in down.stderr
        assert connect(b, net.gateway, port).returncode == 0  # the other host is untouched
        server.accept()[0].close()

        net.link(a, up=True)  # back; ARP may first answer for the failed attempts ("no route")
        deadline = time.monotonic() + 30
        while (again := connect(a, net.gateway, port)).returncode != 0:
            assert time.monotonic() < deadline, (
                f"the link came back but not the host: {again.stderr}"
            )
            time.sleep(0.5)
        server.accept()[0].close()
    assert ours() == before  # every namespace removed with the network
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert net.bridge not in links


@pytest.mark.skipif(
    netns.unavailable(nft=True) is not None, reason=f"{netns.unavailable(nft=True)}"
)
def test_a_blocked_port_drops_its_packets_both_ways_while_other_ports_flow():
    blocked, open_ = socket.create_server(("0.0.0.0", 0)), socket.create_server(("0.0.0.0", 0))
    with blocked, open_, netns.Network() as net:
        a = net.add_host("a")
        net.block(a, blocked.getsockname()[1])
        down = connect(a, net.gateway, blocked.getsockname()[1])
        assert down.returncode != 0 and "TimeoutError" in down.stderr
        assert connect(a, net.gateway, open_.getsockname()[1]).returncode == 0
        open_.accept()[0].close()
        net.unblock(a)
        assert connect(a, net.gateway, blocked.getsockname()[1]).returncode == 0
        blocked.accept()[0].close()


@pytest.mark.skipif(
    netns.unavailable(nft=True) is not None, reason=f"{netns.unavailable(nft=True)}"
)
def test_a_port_blocked_on_the_servers_host_drops_its_clients_packets():
    with netns.Network() as net:
        server_host, client = net.add_host("srv"), net.add_host("cli")
        with netns.inside(server_host):  # this thread's sockets live on the server's host
            blocked, open_ = (
                socket.create_server(("0.0.0.0", 0)),
                socket.create_server(("0.0.0.0", 0)),
            )
        with blocked, open_:
            net.block(server_host, blocked.getsockname()[1])
            down = connect(client, server_host.address, blocked.getsockname()[1])
            assert down.returncode != 0 and "TimeoutError" in down.stderr
            assert connect(client, server_host.address, open_.getsockname()[1]).returncode == 0
            net.unblock(server_host)
            assert connect(client, server_host.address, blocked.getsockname()[1]).returncode == 0


def test_inside_runs_only_this_thread_in_the_host_and_a_removed_host_is_gone():
    before = ours()
    with netns.Network() as net:
        a = net.add_host("a")
        sleeper = subprocess.Popen(a.exec(["sleep", "600"]))
        deadline = time.monotonic() + 30  # `ip netns exec` enters the namespace, then execs
        while netns.pids(a) != [sleeper.pid]:
            assert time.monotonic() < deadline, netns.pids(a)
            time.sleep(0.05)
        with netns.inside(a):  # the host's loopback: a server only it can reach
            server = socket.create_server(("127.0.0.1", 0))
        with server:
            probe = connect(a, "127.0.0.1", server.getsockname()[1])
            assert probe.returncode == 0, probe.stderr
            with pytest.raises(OSError):  # from the machine's own namespace: nothing there
                socket.create_connection(("127.0.0.1", server.getsockname()[1]), timeout=1)
        net.remove_host(a)
        assert sleeper.wait(timeout=10) == -9  # its processes killed with it
        assert ours() == before
        b = net.add_host("b")
        assert b.address != a.address  # a replacement host gets an address of its own
