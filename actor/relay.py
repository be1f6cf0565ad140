"""A weight relay: one subscriber to the learner's broadcast, republished to this host's actors.

    python -m actor.relay --learner HOST:PORT [--bind 127.0.0.1:PORT2] [--curve-dir KEYS]

The learner's PUB sends every weight message once per subscriber; a relay per actor host makes it
one copy per host (docs/PERFORMANCE.md, "Weight broadcast"). Frames are forwarded undecoded; a
message that is not Weights is dropped and counted. An actor whose broadcasts go silent asks the
learner itself (actor/link.py), so a dead relay costs only bandwidth until it is restarted.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass

import zmq

from actor.sockets import watch_subscription
from common import config as config_io
from common import curve, wire
from common.config import LogLevel, Port, is_host_port
from common.config import option as _f
from common.metrics import MetricsPortError, RelayMetrics, add_process_metrics, serve

log = logging.getLogger("relay")


def _endpoint_problem(name: str, value: str) -> list[str]:
    return [] if is_host_port(value) else [f"{name} must be HOST:PORT, got {value!r}"]


@dataclass(frozen=True)
class RelayConfig:
    learner: str = _f("127.0.0.1:5555", "learner HOST:PORT (its broadcast is on PORT+1)")
    bind: str = _f("127.0.0.1:5557", "HOST:PORT the relay publishes on for this host's actors")
    curve_dir: str = _f("", "CURVE keys to reach the learner: actor.key_secret, learner.key")
    metrics_host: str = _f("127.0.0.1", "address of the /metrics HTTP server")
    metrics_port: Port = _f(0, "port of the /metrics HTTP server (0 = off)")
    log_level: LogLevel = _f("INFO", "logging level")

    def problems(self) -> list[str]:
        out = _endpoint_problem("learner", self.learner) + _endpoint_problem("bind", self.bind)
        return out + curve.actor_problems(self.curve_dir)


class Relay:
    """SUB to the learner's PUB, PUB on `bind`; `run()` forwards until `stop()`."""

    def __init__(self, cfg: RelayConfig, metrics: RelayMetrics, context: zmq.Context | None = None):
        self.metrics = metrics
        self.ctx = context or zmq.Context.instance()
        host, _, port = cfg.learner.rpartition(":")
        self.sub = self.ctx.socket(zmq.SUB)
        self.pub = self.ctx.socket(zmq.PUB)
        for sock in (self.sub, self.pub):
            sock.setsockopt(zmq.LINGER, 0)
        if cfg.curve_dir:
            curve.client_options(cfg.curve_dir)(self.sub)
        self.sub.setsockopt(zmq.RCVHWM, 4)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        watch_subscription(self.sub)  # a link down and back: broadcasts again within seconds
        self.pub.setsockopt(zmq.SNDHWM, 8)
        self.source = f"tcp://{host}:{int(port) + 1}"
        self.sub.connect(self.source)
        self.pub.bind(f"tcp://{cfg.bind}")
        self._stop = threading.Event()

    def run(self) -> None:
        log.info("relaying weights from %s", self.source)
        while not self._stop.is_set():
            if not self.sub.poll(200):
                continue
            while True:
                try:
                    frames = self.sub.recv_multipart(copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.forward(frames)
        self.sub.close(linger=0)
        self.pub.close(linger=0)

    def forward(self, frames: list) -> None:
        try:
            msg = wire.decode([f.buffer for f in frames])
        except wire.ProtocolError as exc:
            log.warning("dropped a malformed message from the learner: %s", exc)
            self.metrics.dropped.inc()
            return
        if not isinstance(msg, wire.Weights):
            self.metrics.dropped.inc()
            return
        self.pub.send_multipart(frames, copy=False)
        self.metrics.weights.inc()
        self.metrics.weights_bytes.inc(sum(f.buffer.nbytes for f in frames))
        self.metrics.policy_version.set(msg.policy_version)
        self.metrics.last_weights_time.set(time.time())

    def stop(self) -> None:
        self._stop.set()


def main(argv: list[str] | None = None) -> int:
    cfg = config_io.load(RelayConfig, argv, prog="actor.relay", description=__doc__ or "")
    logging.basicConfig(
        level=cfg.log_level, format="%(asctime)s relay %(levelname)s %(message)s", stream=sys.stderr
    )
    metrics = RelayMetrics()
    add_process_metrics(metrics.registry, "relay")  # who, resident memory, CPU, start time
    try:
        server = (
            serve(metrics.registry, cfg.metrics_host, cfg.metrics_port)
            if cfg.metrics_port
            else None
        )
    except MetricsPortError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        relay = Relay(cfg, metrics)
    except zmq.ZMQError as exc:
        print(f"error: cannot bind tcp://{cfg.bind}: {exc}; pass another --bind", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: relay.stop())
    relay.run()
    if server is not None:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
