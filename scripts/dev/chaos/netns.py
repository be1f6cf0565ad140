"""Hosts on one machine: Linux network namespaces joined by veth pairs to a bridge.

Each host is a namespace with its own loopback and one interface, `eth0`, whose peer sits on a
bridge in the machine's own namespace; the bridge has the subnet's `.1` address, so a process in
the root namespace (a learner, Prometheus, a benchmark) reaches every host and every host reaches
it. Unlike loopback, a host's link can go down without either end being told (no FIN, no RST):
the partition that separates machines. Needs root and iproute2 (`ip`).

    with Network() as net:
        a = net.add_host("actors-a")          # 10.77.x.2
        subprocess.run(a.exec(["python", "-m", "actor", ...]))
        net.link(a, up=False)                 # partition; up=True heals it
        net.block(a, 5556)                    # that one TCP port, both ways (nftables)

`unavailable()` says why namespaces cannot be made here (or None), for a tool to refuse and a
test to skip with that reason; `block` also needs nftables' `nft` (`unavailable(nft=True)`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable(nft: bool = False) -> str | None:
    """Why this machine cannot make network namespaces (with `nft`: and block ports in them), or
    None when it can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    if nft and shutil.which("nft") is None:
        return "nftables' `nft` is not installed (apt-get install nftables)"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, as CI does)"
    name = f"mario-probe-{secrets.token_hex(3)}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    _ip("netns", "del", name, check=False)
    return None


def pids(host: Host) -> list[int]:
    """The processes running in the host's namespace."""
    out = _ip("netns", "pids", host.name, check=False)
    return [int(p) for p in out.stdout.split()]


@contextlib.contextmanager
def inside(host: Host) -> Iterator[None]:
    """Run the calling thread (only it) in the host's network namespace until the block ends:
    sockets it opens meanwhile live there, and stay there."""
    with open(f"/run/netns/{host.name}") as theirs, open("/proc/thread-self/ns/net") as ours:
        os.setns(theirs.fileno(), os.CLONE_NEWNET)
        try:
            yield
        finally:
            os.setns(ours.fileno(), os.CLONE_NEWNET)


@dataclass(frozen=True)
class Host:
    name: str  # the namespace
    address: str  # on the bridge's subnet
    veth: str  # the root namespace's end of its link

    def exec(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *argv]


class Network:
    """A bridge and the hosts on it, all removed on exit (and on any error while building)."""

    def __init__(self, subnet: str | None = None):
        tag = secrets.token_hex(2)  # interface names are at most 15 characters
        self.tag = tag
        self.bridge = f"mbr{tag}"
        # a /24 in 10.77-10.78 chosen by the tag, so concurrent networks rarely collide
        self.subnet = subnet or f"10.{77 + int(tag[0], 16) % 2}.{int(tag[1:], 16) % 250 + 1}"
        self.gateway = f"{self.subnet}.1"
        self.hosts: list[Host] = []
        self._added = 0

    def __enter__(self) -> Network:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except subprocess.CalledProcessError as exc:
            self.close()
            raise RuntimeError(f"cannot build the bridge: {exc.stderr.strip()}") from None
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add_host(self, label: str) -> Host:
        self._added += 1  # addresses are never reused, even after a host is removed
        index = self._added + 1
        host = Host(f"mario-{self.tag}-{label}", f"{self.subnet}.{index}", f"mv{self.tag}h{index}")
        try:
            _ip("netns", "add", host.name)
            self.hosts.append(host)
            _ip(
                "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.name
            )
            _ip("link", "set", host.veth, "master", self.bridge)
            _ip("link", "set", host.veth, "up")
            _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.name, "link", "set", "lo", "up")
            _ip("-n", host.name, "link", "set", "eth0", "up")
            _ip("-n", host.name, "route", "add", "default", "via", self.gateway)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"cannot build host {label}: {exc.stderr.strip()}") from None
        return host

    def link(self, host: Host, up: bool) -> None:
        """Take a host's link down (a partition: packets vanish, nobody is told) or back up."""
        _ip("link", "set", host.veth, "up" if up else "down")

    def block(self, host: Host, port: int) -> None:
        """Drop every TCP packet of `port` on the host, to it and from it, whichever end has the
        port (a server's or a client's), while other ports flow: e.g. the learner's broadcast cut
        while its chunks and heartbeats still pass."""
        rules = (
            "add table inet mario\n"
            "add chain inet mario out { type filter hook output priority 0; }\n"
            "add chain inet mario in { type filter hook input priority 0; }\n"
            f"add rule inet mario out tcp dport {port} drop\n"
            f"add rule inet mario out tcp sport {port} drop\n"
            f"add rule inet mario in tcp sport {port} drop\n"
            f"add rule inet mario in tcp dport {port} drop\n"
        )
        subprocess.run(["ip", "netns", "exec", host.name, "nft", "-f", "-"], input=rules,
                       capture_output=True, text=True, check=True)  # fmt: skip

    def unblock(self, host: Host) -> None:
        """Remove every block on the host."""
        subprocess.run(["ip", "netns", "exec", host.name, "nft", "delete", "table", "inet", "mario"],
                       capture_output=True, check=False)  # fmt: skip

    def remove_host(self, host: Host) -> None:
        """A host dies: every process in it killed (SIGKILL) and its link and namespace gone."""
        for pid in pids(host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _ip("link", "del", host.veth, check=False)
        _ip("netns", "del", host.name, check=False)
        self.hosts = [h for h in self.hosts if h != host]

    def close(self) -> None:
        for host in self.hosts:
            _ip("netns", "del", host.name, check=False)  # takes its veth pair with it
        self.hosts = []
        _ip("link", "del", self.bridge, check=False)
