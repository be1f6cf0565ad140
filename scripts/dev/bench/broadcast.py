"""What the weight broadcast costs the learner, with 1, 16 and 64 subscribers.

    python -m scripts.dev.bench.broadcast [--subscribers 0,1,16,64] [--seconds 20] [--rounds 2]
                                          [--bridge]

A real learner process (`python -m learner`, CPU unless --device) trains on chunks that one
sender process streams under the credit protocol, with batches small enough that it publishes
at the learner's rate's ceiling (every update, at most one message per 0.5 s, learner/loop.py),
as a GPU learner does. A subscriber process holds S plain SUB sockets on the learner's PORT+1,
configured as an actor's (docs/DESIGN.md), and counts what each receives. Phases of each S run
in turn, their order reversed every round, so machine noise hits all alike; each phase starts
once every socket has had a message.

Per phase, from the learner's /metrics and its threads' CPU clocks (/proc/PID/task):
- bytes per publish and publishes/s (`mario_weights_broadcast_bytes_total`, `..._broadcasts_total`);
- prepare: the publisher thread's CPU per message (device copy, encoding:
  `mario_weights_publish_cpu_seconds_total`);
- send: CPU/s of libzmq's I/O threads (`ZMQbg/IO/*`) above their rate with no subscriber in the
  same round (the I/O threads also receive the chunks): the per-subscriber writes;
- share: (prepare + send) CPU ÷ the learner process's CPU over the phase: the part of the
  learner's time that publishing takes. Target: <= 0.05 with 64 subscribers;
- spread: median time from the first to the last subscriber receiving one version.

--relays R puts the subscribers behind R weight relays (actor/relay.py, one per actor host in a
deployment): the learner then has R subscribers whatever S is.

--bridge puts the subscribers on another "host": a network namespace joined to the machine by a
veth pair and a bridge (scripts/dev/chaos/netns.py; root), the learner bound to all addresses.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import zmq

from common import status, wire
from scripts.checkout import ROOT
from scripts.dev.bench.shared import arg_parser, send_chunks
from scripts.dev.chaos import netns
from scripts.ports import free_ports

TICK = os.sysconf("SC_CLK_TCK")
SPAWN = mp.get_context("spawn")


# -- the subscriber process: `python -m scripts.dev.bench.broadcast subscribe ADDRESS N` --------------


def subscribe(addresses: str, n: int) -> None:
    """Open n SUB sockets as an actor does, spread over the comma-separated `addresses`; print
    `ready` once each has had a message, then count until a line arrives on stdin, and print the
    counts as JSON."""
    ctx = zmq.Context()
    socks = []
    targets = addresses.split(",")
    for i in range(n):
        address = targets[i % len(targets)]
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 4)  # as actor/link.py
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(address)
        socks.append(sock)
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    counts = [0] * n
    nbytes = 0
    first_seen: dict[int, tuple[float, int]] = {}  # version -> (first arrival, sockets so far)
    spreads: list[float] = []
    ready = False
    while True:
        events = dict(poller.poll(1000))
        if sys.stdin.fileno() in events or sys.stdin in events:
            sys.stdin.readline()
            break
        for i, sock in enumerate(socks):
            if sock not in events:
                continue
            while True:
                try:
                    frames = sock.recv_multipart(copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                now = time.perf_counter()
                msg = wire.decode([f.buffer for f in frames])
                if not isinstance(msg, wire.Weights):
                    continue
                counts[i] += 1
                nbytes += sum(f.buffer.nbytes for f in frames)
                t, seen = first_seen.get(msg.policy_version, (now, 0))
                first_seen[msg.policy_version] = (t, seen + 1)
                if seen + 1 == n and ready:
                    spreads.append(now - t)
        if not ready and min(counts) > 0:
            ready = True
            counts, nbytes, first_seen = [0] * n, 0, {}
            print("ready", flush=True)
    print(
        json.dumps(
            {
                "messages": sum(counts),
                "min_per_socket": min(counts),
                "bytes": nbytes,
                "spread_ms_p50": round(1e3 * statistics.median(spreads), 2) if spreads else None,
            }
        ),
        flush=True,
    )
    for sock in socks:
        sock.close(linger=0)
    ctx.term()


# -- the learner's clocks ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of the process ("total") and of its libzmq I/O threads ("zmq_io")."""

    def read(path: str) -> tuple[str, float]:
        stat = Path(path).read_text()
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        return comm, (int(fields[11]) + int(fields[12])) / TICK  # utime, stime

    out = {"total": read(f"/proc/{pid}/stat")[1], "zmq_io": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm, seconds = read(f"/proc/{pid}/task/{tid}/stat")
        except FileNotFoundError:
            continue
        if comm.startswith("ZMQbg/IO"):
            out["zmq_io"] += seconds
    return out


def snapshot(url: str, pid: int) -> dict[str, float]:
    m = status.scrape(url)
    return {
        "time": time.perf_counter(),
        "updates": m.get("mario_learner_updates_total", 0.0),
        "publishes": m.get("mario_weights_broadcasts_total", 0.0),
        "bytes": m.get("mario_weights_broadcast_bytes_total", 0.0),
        "prepare": m.get("mario_weights_publish_cpu_seconds_total", 0.0),
        **cpu_seconds(pid),
    }


# -- the benchmark -------------------------------------------------------------------------------


def start_learner(run_dir: str, device: str, host: str) -> tuple:
    port, mport = free_ports(2), free_ports()
    argv = [sys.executable, "-m", "learner", "--run-dir", run_dir, "--device", device,
            "--host", host, "--port", str(port), "--metrics-port", str(mport),
            "--batch-chunks", "1", "--epochs", "1", "--max-epochs", "1", "--minibatches", "1",
            "--replay-fraction", "0", "--torch-threads", "1",
            "--max-policy-lag", str(10**9), "--checkpoint-interval-s", "100000",
            "--log-level", "WARNING"]  # fmt: skip
    if host != "127.0.0.1":
        argv.append("--insecure")
    proc = subprocess.Popen(argv, cwd=ROOT)
    return proc, port, f"http://127.0.0.1:{mport}/metrics"


def start_relays(n: int, learner: str, wrap) -> tuple[list[subprocess.Popen], str]:
    """n relay processes (actor/relay.py) subscribed to `learner`; their addresses, joined."""
    ports = [free_ports() for _ in range(n)]
    procs = [
        subprocess.Popen(
            wrap(
                [
                    sys.executable,
                    "-m",
                    "actor.relay",
                    "--learner",
                    learner,
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--log-level",
                    "WARNING",
                ]
            ),  # fmt: skip
            cwd=ROOT,
        )
        for port in ports
    ]
    return procs, ",".join(f"tcp://127.0.0.1:{port}" for port in ports)


def phase(
    url: str, pid: int, subscribers: int, learner: str, seconds: float, wrap, relays: int = 0
) -> dict[str, float]:
    """One phase with `subscribers` SUB sockets (in one process, through `wrap`), subscribed to
    the learner (HOST:PORT) or spread over `relays` relays of it."""
    sub, relay_procs = None, []
    host, _, port = learner.rpartition(":")
    address = f"tcp://{host}:{int(port) + 1}"
    if subscribers and relays:
        relay_procs, address = start_relays(min(relays, subscribers), learner, wrap)
    if subscribers:
        argv = wrap([sys.executable, "-m", "scripts.dev.bench.broadcast", "subscribe", address,
                     str(subscribers)])  # fmt: skip
        sub = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
        line = sub.stdout.readline().strip()
        if line != "ready":
            sub.kill()
            raise RuntimeError(f"subscribers did not get the weights ({line!r})")
    before = snapshot(url, pid)
    time.sleep(seconds)
    after = snapshot(url, pid)
    got = {}
    if sub is not None:
        sub.stdin.write("stop\n")
        sub.stdin.flush()
        got = json.loads(sub.stdout.readline())
        sub.wait(30)
    for relay in relay_procs:
        relay.terminate()
        relay.wait(30)
    d = {k: after[k] - before[k] for k in after}
    out = {
        "subscribers": subscribers,
        "relays": len(relay_procs),
        "publishes_per_s": d["publishes"] / d["time"],
        "bytes_per_publish": d["bytes"] / max(d["publishes"], 1),
        "prepare_ms_per_publish": 1e3 * d["prepare"] / max(d["publishes"], 1),
        "prepare_cpu_per_s": d["prepare"] / d["time"],
        "zmq_io_cpu_per_s": d["zmq_io"] / d["time"],
        "learner_cpu_per_s": d["total"] / d["time"],
        "updates_per_s": d["updates"] / d["time"],
    }
    if got:
        out["delivered_mb_per_s"] = got["bytes"] / d["time"] / 1e6
        out["delivered_share"] = got["messages"] / max(subscribers * d["publishes"], 1)
        out["spread_ms_p50"] = got["spread_ms_p50"]
        out["min_per_socket"] = got["min_per_socket"]
    return out


def measure(args) -> list[dict]:
    with ExitStack() as stack, tempfile.TemporaryDirectory() as run_dir:
        wrap, host, connect = (lambda argv: argv), "127.0.0.1", "127.0.0.1"
        if args.bridge:
            net = stack.enter_context(netns.Network())
            subs = net.add_host("subs")
            wrap, host, connect = subs.exec, "0.0.0.0", net.gateway
        proc, port, url = start_learner(run_dir, args.device, host)
        sender = SPAWN.Process(target=send_chunks, args=(port, 0, 32, 4, 10**6))
        try:
            sender.start()
            deadline = time.monotonic() + 120
            while status.scrape(url).get("mario_weights_broadcasts_total", 0) < 5:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the learner did not start training")
                time.sleep(0.5)
            counts = sorted(set(args.subscribers) | {0})
            rows = []
            for r in range(args.rounds):
                for s in counts if r % 2 == 0 else counts[::-1]:
                    learner = f"{connect}:{port}"
                    row = phase(url, proc.pid, s, learner, args.seconds, wrap, args.relays)
                    rows.append({"round": r, **row})
        finally:
            proc.terminate()
            proc.wait(30)
            sender.kill()
            sender.join(10)
    return rows


def summarise(rows: list[dict], bridge: bool) -> list[dict]:
    """Median over rounds per S; send = I/O CPU above the same round's S = 0 phase."""
    base = {r["round"]: r["zmq_io_cpu_per_s"] for r in rows if r["subscribers"] == 0}
    out = []
    for s in sorted({r["subscribers"] for r in rows}):
        mine = [r for r in rows if r["subscribers"] == s]
        send = [max(r["zmq_io_cpu_per_s"] - base[r["round"]], 0.0) for r in mine]
        share = [
            (r["prepare_cpu_per_s"] + sn) / r["learner_cpu_per_s"]
            for r, sn in zip(mine, send, strict=True)
        ]
        med = {k: statistics.median(r[k] for r in mine) for k in mine[0] if k != "round"}
        med.update(send_cpu_per_s=statistics.median(send), share=statistics.median(share))
        out.append({"bridge": bridge, **med})
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["subscribe"]:
        subscribe(argv[1], int(argv[2]))
        return 0
    parser = arg_parser(__doc__)
    parser.add_argument("--subscribers", default="1,16,64", help="comma-separated counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window a phase")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; order reversed each")
    parser.add_argument("--device", default="cpu", help="the learner's --device")
    parser.add_argument("--bridge", action="store_true", help="subscribers on a netns host")
    parser.add_argument("--relays", type=int, default=0, help="subscribers behind N relays")
    args = parser.parse_args(argv)
    args.subscribers = [int(s) for s in args.subscribers.split(",")]
    if args.bridge and (why := netns.unavailable()):
        print(f"error: --bridge needs network namespaces: {why}", file=sys.stderr)
        return 2
    print(f"{'path':8} {'relays':>6} {'subs':>4} {'KB/pub':>8} {'pub/s':>6} {'prep ms':>8} "
          f"{'send cpu':>8} {'share':>6} {'spread ms':>9} {'got':>5}")  # fmt: skip
    for row in summarise(measure(args), args.bridge):
        print(
            f"{'bridge' if args.bridge else 'loopback':8} {int(row['relays']):>6} "
            f"{int(row['subscribers']):>4} "
            f"{row['bytes_per_publish'] / 1e3:>8.0f} {row['publishes_per_s']:>6.2f} "
            f"{row['prepare_ms_per_publish']:>8.1f} {row['send_cpu_per_s']:>8.3f} "
            f"{row['share']:>6.3f} {row.get('spread_ms_p50') or 0:>9.1f} "
            f"{row.get('delivered_share', 0):>5.2f}",
            flush=True,
        )
        print(json.dumps({"bench": "broadcast", **row}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
