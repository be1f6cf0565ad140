"""The learner's IO thread: owns both sockets, admits actors, validates chunks, grants credits.

ROUTER on PORT (Register / Chunk / Heartbeat / WeightsRequest in; Welcome / Credit / Refuse /
Weights / Heartbeat out), PUB on PORT+1 (weight broadcasts); only this thread touches them. The
Welcome carries every run setting, the heartbeat interval and `credits_per_actor`; each chunk
earns one credit back while the queue has room (full, an acknowledgement of 0 credits at once and
the credit once it has room). A refused chunk (undecodable, unregistered sender,
duplicate seq, another shape or level set) is counted and nothing of it kept; a stale one is not
trained on but its episodes count. docs/DESIGN.md, "Flow control and policy lag".
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from common import wire
from common.env_spec import EnvSpec
from common.levels import progress
from common.metrics import LearnerMetrics
from common.model import ModelSpec
from learner.batching import HostChunk, to_host

log = logging.getLogger(__name__)

SEQ_MEMORY = 4096  # actor processes whose newest chunk seq is remembered (duplicate detection)
DISPLACED_MEMORY = 1024  # actor processes replaced by a restart, remembered (live duplicates)


@dataclass
class ActorInfo:
    identity: bytes
    actor_id: int
    instance_id: str
    last_seen: float
    peer: str = "?"  # the address its connection comes from
    owed: int = 0  # credits earned but not yet granted (queue full)
    chunks: int = 0
    outstanding: int = 0  # credits granted and not yet spent on a message that arrived
    duplicates: int = 0  # chunks that arrived again


@dataclass
class IngestSettings:
    run_id: str
    env_spec: EnvSpec  # sent to every actor in its Welcome
    model_spec: dict  # likewise
    unroll_length: int  # likewise
    credits_per_actor: int
    queue_chunks: int
    max_policy_lag: int
    heartbeat_interval_s: float  # both ways: sent in the Welcome, actors beat at it too
    actor_timeout_s: float
    pin_memory: bool = False
    limits: wire.Limits = field(default_factory=lambda: wire.DEFAULT_LIMITS)


class BindError(RuntimeError):
    """The learner's sockets cannot bind their address."""


class Ingest:
    def __init__(
        self,
        settings: IngestSettings,
        metrics: LearnerMetrics,
        policy_version: Callable[[], int],
        *,
        host: str,
        port: int,
        context: zmq.Context | None = None,
        socket_options: Callable[[zmq.Socket], None] | None = None,
        on_episode: Callable[[wire.EpisodeStats], object] = lambda episode: None,
    ):
        """`on_episode(e)` is called on the IO thread for every episode a chunk reports."""
        self.s = settings
        self._state_size = ModelSpec.from_dict(settings.model_spec).state_size  # C of a chunk
        self.on_episode = on_episode
        self.metrics = metrics
        self.policy_version = policy_version
        self.ctx = context or zmq.Context.instance()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.pub = self.ctx.socket(zmq.PUB)
        for sock in (self.router, self.pub):
            sock.setsockopt(zmq.LINGER, 0)
            if socket_options:
                socket_options(sock)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self.pub.setsockopt(zmq.SNDHWM, 8)
        for sock, address, role in (
            (self.router, f"tcp://{host}:{port}", "chunks, PORT"),
            (self.pub, f"tcp://{host}:{port + 1}", "weights, PORT+1"),
        ):
            try:
                sock.bind(address)
            except zmq.ZMQError as exc:
                self.router.close(linger=0)
                self.pub.close(linger=0)
                raise BindError(
                    f"cannot bind {address} ({role}): {zmq.strerror(exc.errno)}; pass another --port "
                    "(the learner binds PORT and PORT+1) or --host, or stop the process using it"
                ) from None
        self.actors: dict[bytes, ActorInfo] = {}
        self.queue: deque[HostChunk] = deque()
        self.cond = threading.Condition()
        self.episodes: deque[wire.EpisodeStats] = deque(maxlen=200)  # recent, for the status line
        # every episode since the last drain, for RUN/episodes.jsonl (deque: thread-safe ends)
        self._new_episodes: deque[tuple[float, int, wire.EpisodeStats]] = deque(maxlen=100_000)
        self._seqs: OrderedDict[str, int] = OrderedDict()  # instance id -> newest chunk seq
        # instance replaced by a restart from its address -> its replacement (both alive if it
        # registers again)
        self._displaced: OrderedDict[str, str] = OrderedDict()
        self._weights: list | None = None  # newest encoded Weights
        self._to_publish: list | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_beat = 0.0
        self.thread = threading.Thread(target=self._run, name="ingest", daemon=True)
        metrics.ingest_queue_capacity.set(settings.queue_chunks)

    # -- train-loop side -------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.thread.ident is not None:  # started; closing an unstarted ingest is fine too
            self.thread.join(timeout=5)
        self.router.close(linger=0)
        self.pub.close(linger=0)

    def publish(self, encoded_weights: list) -> None:
        """Broadcast these encoded Weights and answer WeightsRequests with them from now on."""
        with self._lock:
            self._to_publish = encoded_weights

    def take(self, n: int, timeout_s: float) -> list[HostChunk]:
        """Up to n chunks; waits up to timeout_s for the first n to be available."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while len(self.queue) < n:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    break
                self.cond.wait(left)
            out = [self.queue.popleft() for _ in range(min(n, len(self.queue)))]
        self.metrics.ingest_queue_depth.set(len(self.queue))
        return out

    def wait_queued(self, n: int, timeout_s: float) -> int:
        """Chunks queued once n are, or once timeout_s has passed (or the ingest stops)."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while len(self.queue) < n and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return len(self.queue)

    def queued(self) -> int:
        """Chunks waiting to be trained on."""
        return len(self.queue)

    def drain_episodes(self) -> list[tuple[float, int, wire.EpisodeStats]]:
        """(arrival time, actor id, stats) of every episode reported since the last call."""
        out = []
        while self._new_episodes:
            out.append(self._new_episodes.popleft())
        return out

    # -- IO thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                if poller.poll(20):
                    for _ in range(64):  # bounded burst, then housekeeping
                        try:
                            frames = self.router.recv_multipart(copy=False, flags=zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._on_message(frames)
                self._housekeeping()
            except zmq.ZMQError as exc:
                if self._stop.is_set():
                    break
                log.exception("ingest socket error: %s", exc)
            except Exception:  # keep ingesting whatever one message did
                log.exception("ingest: unexpected error handling a message")

    def _send(self, identity: bytes, msg: wire.Message | list) -> None:
        frames = msg if isinstance(msg, list) else wire.encode(msg)
        try:
            self.router.send_multipart([identity, *frames], copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:
            log.debug("send to %r would block; dropped", identity)

    def _housekeeping(self) -> None:
        with self._lock:
            pending, self._to_publish = self._to_publish, None
        if pending is not None:
            self._weights = pending
            self.pub.send_multipart(pending, copy=False)
            size = sum(memoryview(f).nbytes for f in pending)
            self.metrics.weights_broadcast_bytes.inc(size)
            self.metrics.weights_broadcasts.inc()
        now = time.monotonic()
        self._pay_owed()
        if now - self._last_beat >= self.s.heartbeat_interval_s:
            self._last_beat = now
            beat = wire.encode(
                wire.Heartbeat(sent_time=time.time(), policy_version=self.policy_version())
            )
            for identity, info in list(self.actors.items()):
                if now - info.last_seen > self.s.actor_timeout_s:
                    log.warning(
                        "actor %d silent for %.0f s; forgotten", info.actor_id, now - info.last_seen
                    )
                    del self.actors[identity]
                else:
                    self._send(identity, beat)
            self.metrics.actors_connected.set(len(self.actors))
            self.metrics.credits_outstanding.set(sum(a.outstanding for a in self.actors.values()))

    def _room(self) -> bool:
        return len(self.queue) < self.s.queue_chunks

    def _pay_owed(self) -> None:
        for identity, info in self.actors.items():
            if info.owed and self._room():
                self._send(
                    identity, wire.Credit(credits=info.owed, policy_version=self.policy_version())
                )
                info.outstanding += info.owed
                info.owed = 0

    def _refuse_chunk(self, info: ActorInfo, why: str, *args: object) -> None:
        """A chunk that does not fit the learner's spec: counted, logged, its credit returned."""
        self.metrics.chunks.labels("rejected").inc()
        self.metrics.reject("spec")
        log.warning("chunk from actor %d " + why, info.actor_id, *args)
        self._give_credit(info)

    def _give_credit(self, info: ActorInfo) -> None:
        """One credit back for a message that spent one: now, or owed while the queue is full.
        Owed, the message is acknowledged at once all the same (a Credit of 0): the actor knows
        its chunk arrived, whenever the train loop makes room for the next."""
        info.outstanding = max(0, info.outstanding - 1)
        if self._room() and not info.owed:
            self._send(info.identity, wire.Credit(credits=1, policy_version=self.policy_version()))
            info.outstanding += 1
        else:
            info.owed += 1
            self._send(info.identity, wire.Credit(credits=0, policy_version=self.policy_version()))

    def _on_message(self, frames: list[Any]) -> None:
        identity = frames[0].bytes
        info = self.actors.get(identity)
        try:
            msg = wire.decode([f.buffer for f in frames[1:]], self.s.limits)
        except wire.ProtocolError as exc:
            self.metrics.reject("decode")
            self.metrics.chunks.labels("rejected").inc()
            log.warning("rejected a malformed message from %r: %s", identity, exc)
            if info is not None:
                info.last_seen = time.monotonic()
                self._give_credit(info)  # it may have spent one on this message
            return
        if info is not None:
            info.last_seen = time.monotonic()
        if isinstance(msg, wire.Register):
            self._on_register(identity, msg, _peer(frames[0]))
        elif info is None:
            if isinstance(msg, wire.Chunk):
                self.metrics.chunks.labels("rejected").inc()
            self.metrics.reject("unknown_actor")
            self._send(identity, wire.Refuse(reason="unknown actor: register first", fatal=False))
        elif isinstance(msg, wire.Chunk):
            self._on_chunk(info, msg)
        elif isinstance(msg, wire.WeightsRequest):
            if self._weights is not None:
                self._send(identity, self._weights)
        elif isinstance(msg, wire.Heartbeat):
            pass
        else:
            self.metrics.reject("other")

    def _on_register(self, identity: bytes, msg: wire.Register, peer: str) -> None:
        if msg.run_id != self.s.run_id:
            self.metrics.reject("spec")
            reason = (
                f"--run-id is {msg.run_id!r} on the actor but {self.s.run_id!r} on the learner; "
                "set the same on both"
            )
            log.warning("refused actor %d: %s", msg.actor_id, reason)
            self._send(identity, wire.Refuse(reason=reason, fatal=True))
            return
        if (reason := self._duplicate(identity, msg, peer)) is not None:
            self.metrics.reject("other")  # a configuration error, not a malformed message
            log.warning("refused actor %d: %s", msg.actor_id, reason)
            self._send(identity, wire.Refuse(reason=reason, fatal=True))
            return
        self.actors[identity] = ActorInfo(
            identity, msg.actor_id, msg.instance_id, time.monotonic(),
            outstanding=self.s.credits_per_actor, peer=peer,
        )  # fmt: skip
        log.info("actor %d registered (%d envs)", msg.actor_id, msg.num_envs)
        self.metrics.actors_connected.set(len(self.actors))
        welcome = wire.Welcome(
            credits=self.s.credits_per_actor, policy_version=self.policy_version(),
            unroll_length=self.s.unroll_length, model_spec=self.s.model_spec,
            env_spec=self.s.env_spec.to_wire(), heartbeat_interval_s=self.s.heartbeat_interval_s,
        )  # fmt: skip
        self._send(identity, welcome)

    def _duplicate(self, identity: bytes, msg: wire.Register, peer: str) -> str | None:
        """Why this registration is a second live process with a connected actor's id, or None.
        A new session of the same process (same instance id) or a restart from the same address
        replaces the old connection; another address while the id is connected is refused (each
        would knock the other off), and so is a replaced process that registers again."""
        mine = f"{peer} (instance {msg.instance_id[:8]})"
        fix = (
            "give each process its own id (FIRST_ACTOR and N on each host, or --actor-id); "
            f"if the other process is gone, start this one again once the learner has forgotten "
            f"it ({self.s.actor_timeout_s:g} s of silence)"
        )
        for other, info in list(self.actors.items()):
            if info.actor_id != msg.actor_id or other == identity:
                continue
            theirs = f"{info.peer} (instance {info.instance_id[:8]})"
            if self._displaced.get(msg.instance_id) == info.instance_id:
                return (
                    f"actor id {msg.actor_id} is connected from {theirs}, which replaced this "
                    f"process at {mine}: two live processes with one id; {fix}"
                )
            if info.instance_id != msg.instance_id and info.peer != peer:
                return (
                    f"actor id {msg.actor_id} is already connected from {theirs}; this process "
                    f"at {mine} has the same id; {fix}"
                )
            log.info("actor %d re-registered from %s; old connection dropped", msg.actor_id, mine)
            if info.instance_id != msg.instance_id:
                self._displaced[info.instance_id] = msg.instance_id
                while len(self._displaced) > DISPLACED_MEMORY:
                    self._displaced.popitem(last=False)
            del self.actors[other]
        return None

    def _record_episodes(self, info: ActorInfo, chunk: wire.Chunk) -> None:
        """A valid chunk's episodes, into the curves; those from the level's start also into the
        metrics and the level statistics, those from a frontier snapshot only counted."""
        for e in chunk.episodes:
            self._new_episodes.append((time.time(), info.actor_id, e))
            if e.start_x >= 0:
                self.metrics.frontier_episodes.labels(e.level).inc()
                continue
            p = progress(e.level, e.max_x, e.flag)
            self.metrics.observe_episode(e.level, e.outcome, e.episode_return, e.max_x, e.length, p)
            self.on_episode(e)
            self.episodes.append(e)

    def _on_chunk(self, info: ActorInfo, chunk: wire.Chunk) -> None:
        newest = self._seqs.get(chunk.instance_id, -1)
        if chunk.seq <= newest:  # sent once, arrived again: neither trained on nor counted
            self.metrics.chunks.labels("duplicate").inc()
            info.duplicates += 1
            if info.duplicates == 1:  # the rest only counted: a faulty sender cannot flood the log
                log.warning(
                    "chunk %d of actor %d arrived again (newest seen: %d); dropped, and any more "
                    'counted in mario_learner_chunks_total{result="duplicate"}',
                    chunk.seq, info.actor_id, newest,
                )  # fmt: skip
            self._give_credit(info)
            return
        self.metrics.ingest_bytes.inc(chunk.payload_bytes)
        want_shape = (
            self.s.unroll_length, self.s.env_spec.frame_size, self.s.model_spec["num_actions"],
            self._state_size,
        )  # fmt: skip
        got_shape = (chunk.unroll_length, chunk.frame_shape[0], chunk.num_actions, chunk.state_size)
        if got_shape != want_shape or chunk.frame_shape[0] != chunk.frame_shape[1]:
            self._refuse_chunk(
                info, "has (T, frame, A, core state) %s, expected %s", got_shape, want_shape
            )
            return
        levels = self.s.env_spec.levels
        if chunk.level != self.s.env_spec.level:  # sent before the learner restarted with others
            self._refuse_chunk(
                info, "plays the level set %r, not the run's %r", chunk.level, self.s.env_spec.level
            )
            return
        top = int(chunk.arrays["level"].max())
        if top >= len(levels):
            self._refuse_chunk(
                info, "names level index %d, but the run's set %r has %d", top, chunk.level,
                len(levels),
            )  # fmt: skip
            return
        self._seqs[chunk.instance_id] = chunk.seq  # a valid chunk: stale or accepted, it is seen
        self._seqs.move_to_end(chunk.instance_id)
        if len(self._seqs) > SEQ_MEMORY:
            self._seqs.popitem(last=False)
        self._record_episodes(info, chunk)  # a stale chunk's episodes were played all the same
        lag = self.policy_version() - chunk.policy_version
        if lag > self.s.max_policy_lag:
            self.metrics.chunks.labels("stale").inc()
            self._give_credit(info)
            return
        host = to_host(chunk, self.s.env_spec.frame_skip, self.s.pin_memory)
        info.chunks += 1
        self.metrics.chunks.labels("accepted").inc()
        with self.cond:
            self.queue.append(host)
            self.cond.notify()
        self.metrics.ingest_queue_depth.set(len(self.queue))
        self._give_credit(info)


def _peer(frame: Any) -> str:
    """The address a message's connection comes from (its TCP peer); "?" for other transports."""
    try:
        return frame.get("Peer-Address")
    except (zmq.ZMQError, AttributeError):
        return "?"
