"""The actor's connection to the learner: registration, credits, weights, heartbeats, reconnects.

Sockets: a DEALER to the learner's ROUTER and a SUB to its PUB on PORT+1 (or to a relay on this
host, `weights_from`), used only by the thread that owns the `LearnerLink`. The Welcome goes to
`on_welcome`; only weights of its network are applied; one chunk costs one credit.

Timing is the learner's: its Welcome names the heartbeat interval, at which the actor beats, and
silence for `wire.SILENT_HEARTBEATS` of them rebuilds the sockets and registers again, after a
pause doubling up to `backoff_max_s`. Before a Welcome the actor sends no heartbeats and waits
`register_timeout_s` for the answer to its Register. Silence counts only while the DEALER has a
connection up (a socket monitor says when): with none, the socket itself tries again every
second or so (sockets.py), and a new session would only add its pause. Weights missing for
`WEIGHTS_SILENCE_S` while the learner is ahead are asked for over the DEALER. The protocol and
its reasons: docs/DESIGN.md.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import zmq
from zmq.utils.monitor import recv_monitor_message

from actor.config import ActorLink
from actor.sockets import CONNECT_TIMEOUT_MS, watch_subscription
from common import curve, wire
from common.env_spec import EnvSpec
from common.model import ModelSpec

log = logging.getLogger(__name__)

WEIGHTS_SILENCE_S = 3.0  # broadcasts silent this long while the learner is ahead: ask instead
# A Register unanswered this long on a connection that is up: a new session. The learner answers
# at once, so only a connection dead underneath (or a learner that does not answer) waits so long.
REGISTER_TIMEOUT_S = 5.0
UNCONNECTED_WARNING_S = 10.0  # while no connection to the learner is up, say so this often
_MONITORED = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED


def load_weights(model: torch.nn.Module, weights: wire.Weights) -> None:
    """Copy broadcast weights (float32 on the wire) into `model`."""
    state = {k: torch.from_numpy(np.array(v)) for k, v in weights.tensors.items()}
    model.load_state_dict(state)


class FatalRefusal(RuntimeError):
    """The learner refused this actor for a reason that retrying cannot fix (e.g. a spec mismatch)."""


def welcomed_specs(welcome: wire.Welcome) -> tuple[ModelSpec, EnvSpec]:
    """The network and the envs the learner's Welcome names; FatalRefusal if this actor cannot
    build them."""
    problems = []
    try:
        spec = ModelSpec(**welcome.model_spec)
        problems += spec.problems()
    except TypeError as exc:  # a field or value this release's ModelSpec does not know
        problems.append(f"network {welcome.model_spec}: {exc}")
    try:
        env = EnvSpec.from_wire(welcome.env_spec)
    except (TypeError, ValueError) as exc:
        problems.append(f"envs {welcome.env_spec}: {exc}")
    if problems:
        raise FatalRefusal(
            f"cannot build what the learner asks for: {'; '.join(problems)}; "
            "run the actor and the learner from the same release"
        )
    return spec, env


def check_num_actions(spec: ModelSpec, num_actions: int) -> None:
    """FatalRefusal unless the learner's network has one output per action of the envs built."""
    if spec.num_actions != num_actions:
        raise FatalRefusal(
            f"the learner's network has {spec.num_actions} actions, its envs {num_actions}: "
            "set the learner's --action-set to the envs' (a Gymnasium id fixes its own)"
        )


class LearnerLink:
    def __init__(
        self,
        address: str,
        register: wire.Register,
        *,
        register_timeout_s: float = REGISTER_TIMEOUT_S,
        backoff_max_s: float = 2.0,
        on_weights: Callable[[wire.Weights], None] | None = None,
        on_welcome: Callable[[wire.Welcome], None] | None = None,
        on_event: Callable[[str], None] | None = None,
        context: zmq.Context | None = None,
        socket_options: Callable[[zmq.Socket], None] | None = None,
        weights_from: str = "",
    ):
        """`weights_from` (HOST:PORT): a relay's PUB to subscribe to, with no CURVE (a relay
        binds this host's loopback); empty: the learner's PUB on PORT+1."""
        host, _, port = address.rpartition(":")
        self.router_endpoint = f"tcp://{host}:{int(port)}"
        self.pub_endpoint = f"tcp://{weights_from or f'{host}:{int(port) + 1}'}"
        self.sub_options = (lambda sock: None) if weights_from else None
        self.register_msg = register
        self.register_timeout_s = register_timeout_s
        self.heartbeat_interval_s = 0.0  # the learner's, from its Welcome
        self.backoff_max_s = backoff_max_s
        self.on_weights = on_weights or (lambda w: None)
        self.on_welcome = on_welcome or (lambda w: None)
        self.on_event = on_event or (lambda e: None)
        self.socket_options = socket_options or (lambda s: None)
        self.sub_options = self.sub_options or self.socket_options
        self.ctx = context or zmq.Context.instance()
        self.credits = 0
        self.registered = False
        self.connected = False  # the DEALER has a connection up (its handshake done)
        self.policy_version = -1  # newest weights applied
        self.welcome: wire.Welcome | None = None  # the newest registration's answer
        self.dealer: Any = None
        self.sub: Any = None
        self.monitor: Any = None  # the DEALER's connection events
        self._backoff = 0.5
        self._connect()

    @property
    def timeout_s(self) -> float:
        """Silence on a connection that is up after which a new session starts: the learner's
        heartbeat intervals once it has welcomed this session, else the wait for its Welcome."""
        if self.registered:
            return wire.SILENT_HEARTBEATS * self.heartbeat_interval_s
        return self.register_timeout_s

    # -- connection --------------------------------------------------------------------------

    def _connect(self) -> None:
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.setsockopt(zmq.ROUTING_ID, f"actor-{uuid.uuid4().hex[:12]}".encode())
        self.dealer.setsockopt(zmq.CONNECT_TIMEOUT, CONNECT_TIMEOUT_MS)
        self.socket_options(self.dealer)
        self.monitor = self.dealer.get_monitor_socket(_MONITORED)
        self.dealer.connect(self.router_endpoint)
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 4)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        watch_subscription(self.sub)
        self.sub_options(self.sub)
        self.sub.connect(self.pub_endpoint)
        self.poller = zmq.Poller()
        self.poller.register(self.dealer, zmq.POLLIN)
        self.poller.register(self.sub, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        self.credits = 0
        self.registered = self.connected = False
        now = time.monotonic()
        self._last_heard = self._last_weights = self._last_asked = now
        self._unconnected_since = self._last_warned = now
        self._last_beat = 0.0
        self._send(self.register_msg)
        self._send(wire.WeightsRequest(have_version=self.policy_version))
        log.info("registering with learner at %s", self.router_endpoint)

    def _reconnect(self, why: str) -> None:
        log.warning("%s; reconnecting to %s in %.1f s", why, self.router_endpoint, self._backoff)
        self.on_event("reconnect")
        self.close()
        time.sleep(self._backoff * (0.75 + 0.5 * random.random()))
        self._backoff = min(self._backoff * 2, self.backoff_max_s)
        self._connect()

    def close(self) -> None:
        if self.dealer is not None:
            self.dealer.disable_monitor()
        for s in (self.monitor, self.dealer, self.sub):
            if s is not None:
                s.close(linger=0)
        self.dealer = self.sub = self.monitor = None

    def _connection_events(self) -> None:
        """A connection up: silence counts from now, and a welcomed actor beats at once (a
        learner restarted meanwhile refuses it, and it registers again). None: silence does not
        count; the socket connects again on its own."""
        while True:
            try:
                event = recv_monitor_message(self.monitor, flags=zmq.NOBLOCK)["event"]
            except zmq.Again:
                return
            now = time.monotonic()
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.connected = True
                self._last_heard = now
                self._last_beat = 0.0
            elif event == zmq.EVENT_DISCONNECTED and self.connected:
                self.connected = False
                self._unconnected_since = self._last_warned = now

    def _send(self, msg: wire.Message) -> None:
        try:
            self.dealer.send_multipart(wire.encode(msg), copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:
            log.debug("send of %s would block; dropped", type(msg).__name__)

    # -- incoming ----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> None:
        """Handle everything that has arrived; heartbeat and reconnect as due."""
        events = dict(self.poller.poll(timeout_ms))
        if self.monitor in events:
            self._connection_events()
        if self.sub in events:
            newest = None
            while True:  # drain: only the newest broadcast matters
                try:
                    frames = self.sub.recv_multipart(copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = self._decode(frames)
                if isinstance(msg, wire.Weights) and (
                    newest is None or msg.policy_version > newest.policy_version
                ):
                    newest = msg
            if newest is not None:
                self._apply(newest, "broadcast")
        if self.dealer in events:
            while True:
                try:
                    frames = self.dealer.recv_multipart(copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = self._decode(frames)
                if msg is not None:
                    self._handle(msg)
        now = time.monotonic()
        if not self.connected:
            if now - self._last_warned >= UNCONNECTED_WARNING_S:
                self._last_warned = now
                log.warning(
                    "no connection to the learner at %s for %.0f s; trying again every second",
                    self.router_endpoint, now - self._unconnected_since,
                )  # fmt: skip
            return
        if self.registered and now - self._last_beat >= self.heartbeat_interval_s:
            self._last_beat = now
            self._send(
                wire.Heartbeat(sent_time=time.time(), policy_version=max(self.policy_version, 0))
            )
        if now - self._last_heard > self.timeout_s:
            self._reconnect(f"no word from the learner for {self.timeout_s:g} s")

    def _decode(self, frames: list) -> wire.Message | None:
        try:
            return wire.decode([f.buffer for f in frames])
        except wire.ProtocolError as exc:
            log.warning("dropped a malformed message from the learner: %s", exc)
            return None

    def _handle(self, msg: wire.Message) -> None:
        self._last_heard = now = time.monotonic()
        if isinstance(msg, wire.Heartbeat):
            if (
                self.registered
                and msg.policy_version > self.policy_version
                and now - max(self._last_weights, self._last_asked) >= WEIGHTS_SILENCE_S
            ):
                log.info("no weight broadcast for %.0f s; asking the learner", WEIGHTS_SILENCE_S)
                self._last_asked = now
                self._send(wire.WeightsRequest(have_version=self.policy_version))
                self.on_event("weights_request")
        elif isinstance(msg, wire.Welcome):
            self._welcomed(msg)
        elif isinstance(msg, wire.Credit) and self.registered:
            self.credits += msg.credits  # 0: the chunk arrived, its credit owed (a full queue)
            self.on_event("ack")
            if msg.credits:
                self.on_event("credit")
        elif isinstance(msg, wire.Weights):
            self._apply(msg, "connection")
        elif isinstance(msg, wire.Refuse):
            if msg.fatal:
                raise FatalRefusal(msg.reason)
            log.warning("learner refused: %s; registering again", msg.reason)
            if self.registered:
                # the learner forgot this actor (restart, timeout) under a live DEALER: a reconnect
                self.on_event("reconnect")
            self.registered = False
            self.credits = 0
            self._send(self.register_msg)
            self._send(wire.WeightsRequest(have_version=self.policy_version))

    def _welcomed(self, welcome: wire.Welcome) -> None:
        if self.registered:
            return  # a duplicate answer; this session is set up
        log.info("registered; learner at policy version %d", welcome.policy_version)
        if self.welcome is not None and welcome.model_spec != self.welcome.model_spec:
            self.policy_version = -1  # a new network: its versions count from its own start
        elif welcome.policy_version < self.policy_version:
            log.warning(
                "the learner is at policy version %d, behind this actor's %d: it restarted from "
                "an older checkpoint; taking its weights",
                welcome.policy_version, self.policy_version,
            )  # fmt: skip
            self.policy_version = -1
        if welcome.heartbeat_interval_s != self.heartbeat_interval_s:
            log.info(
                "heartbeats every %g s; a new session after %g s without word",
                welcome.heartbeat_interval_s,
                wire.SILENT_HEARTBEATS * welcome.heartbeat_interval_s,
            )
        self.heartbeat_interval_s = welcome.heartbeat_interval_s
        self.welcome = welcome
        self.registered = True
        self._backoff = 0.5
        self.credits = welcome.credits
        self.on_welcome(welcome)
        self.on_event("registered")

    def _apply(self, weights: wire.Weights, via: str) -> None:
        """Load `weights` if newer; `via` names the path they came on: broadcast or connection."""
        self._last_heard = self._last_weights = time.monotonic()
        if self.welcome is None or weights.model_spec != self.welcome.model_spec:
            return  # not (yet) the network this actor was told to build
        if weights.policy_version <= self.policy_version:
            return
        self.on_weights(weights)
        self.policy_version = weights.policy_version
        self.on_event(f"weights_via_{via}")

    # -- outgoing ----------------------------------------------------------------------------

    def wait_for_credit(self, stop: Callable[[], bool]) -> bool:
        """Block (handling messages) until a credit is in hand; False if `stop()` became true."""
        while self.credits <= 0 or not self.registered:
            if stop():
                return False
            self.poll(timeout_ms=50)
        return True

    def wait_for_weights(self, stop: Callable[[], bool]) -> bool:
        asked = time.monotonic()
        while self.policy_version < 0:
            if stop():
                return False
            self.poll(timeout_ms=50)
            if time.monotonic() - asked > 2.0 and self.registered:
                self._send(wire.WeightsRequest(have_version=self.policy_version))
                asked = time.monotonic()
        return True

    def send_chunk(self, chunk: wire.Chunk) -> None:
        """Send one chunk; the caller holds a credit (see `wait_for_credit`)."""
        assert self.credits > 0
        self.credits -= 1
        self.dealer.send_multipart(wire.encode(chunk), copy=False)


def link_for(
    cfg: ActorLink,
    instance_id: str,
    num_envs: int,
    on_weights: Callable[[wire.Weights], None],
    on_welcome: Callable[[wire.Welcome], None],
    on_event: Callable[[str], None] | None = None,
) -> LearnerLink:
    """The link an actor process opens from its config: registration, timing, CURVE keys."""
    register = wire.Register(
        run_id=cfg.run_id, actor_id=cfg.actor_id, instance_id=instance_id, num_envs=num_envs
    )
    return LearnerLink(
        cfg.learner, register, backoff_max_s=cfg.reconnect_backoff_max_s,
        on_weights=on_weights, on_welcome=on_welcome, on_event=on_event,
        socket_options=curve.client_options(cfg.curve_dir) if cfg.curve_dir else None,
        weights_from=cfg.weights_from,
    )  # fmt: skip
