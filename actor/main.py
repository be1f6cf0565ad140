"""`python -m actor`: build envs, play with the newest weights, stream chunks to the learner."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from actor.config import ActorConfig, ActorLink
from actor.link import FatalRefusal, check_num_actions, link_for, load_weights, welcomed_specs
from actor.rollout import FinishedChunk, Lane, infer_and_act, split_lanes
from common import chunk, wire
from common import config as config_io
from common.env import EnvBuildError, FrameEnv, build_envs
from common.env_spec import EnvSpec
from common.metrics import ActorMetrics, MetricsPortError, add_process_metrics, serve
from common.model import ActorCritic
from common.rates import RateWindow

log = logging.getLogger("actor")


def to_wire_chunk(
    cfg: ActorConfig,
    instance_id: str,
    seq: int,
    c: FinishedChunk,
    layout: chunk.Layout = chunk.LAYOUT,
    level: str = EnvSpec.level,
) -> wire.Chunk:
    """`level`: the level set the chunk's `level` indices index (the env spec's)."""
    episodes = tuple(  # the env's summary, its return a plain float as the wire wants
        wire.EpisodeStats(**{**e._asdict(), "episode_return": float(e.episode_return)})
        for e in c.episodes
    )
    return wire.Chunk(
        actor_id=cfg.actor_id, instance_id=instance_id, seq=seq, level=level,
        policy_version=c.policy_version, send_time=time.time(), episodes=episodes,
        arrays=c.arrays, layout=layout,
    )  # fmt: skip


class _Waited:
    """Time spent blocked, added to a counter as it passes (`tick` at every poll and once at the
    end), so a long wait, a learner out of reach, shows in the counter's rate while it lasts."""

    def __init__(self, add):
        self.add = add
        self.last = time.perf_counter()

    def tick(self) -> bool:
        now = time.perf_counter()
        self.add(now - self.last)
        self.last = now
        return False


class Actor:
    """The actor's loop: lanes of envs, CPU inference, chunk streaming with credits.

    The network, the unroll length and the envs come from the learner's Welcome: the envs and
    lanes are built once it has come, and rebuilt should a later registration bring others."""

    def __init__(self, cfg: ActorConfig, metrics: ActorMetrics | None = None):
        self.cfg = cfg
        self.metrics = metrics or ActorMetrics()
        self.instance_id = uuid.uuid4().hex
        self.stopping = threading.Event()
        self.rng = np.random.default_rng([cfg.seed, cfg.actor_id])  # action sampling
        self.envs: list[FrameEnv] = []  # built for `env_spec` once no lane is stepping
        self.env_spec: EnvSpec | None = None  # from the learner's Welcome
        self.model: ActorCritic | None = None  # likewise
        self.unroll_length = 0  # likewise
        self.lanes: list[Lane] = []  # built for them once no lane is stepping
        self.lanes_stale = True
        self.seq = 0
        self.rate = RateWindow(10.0)
        self.link = link_for(
            cfg, self.instance_id, cfg.num_envs, self._on_weights, self._on_welcome, self._on_event
        )

    def _on_welcome(self, welcome: wire.Welcome) -> None:
        spec, env_spec = welcomed_specs(welcome)
        wanted = (spec, env_spec, welcome.unroll_length)
        if self.model is not None:
            if wanted == (self.model.spec, self.env_spec, self.unroll_length):
                return
            log.warning(
                "the learner now asks for T = %d, %s and %s: lanes rebuilt, the chunks in "
                "progress dropped", welcome.unroll_length, welcome.model_spec, welcome.env_spec,
            )  # fmt: skip
        self.model = ActorCritic(spec).eval()  # only this thread runs it: safe to swap here
        self.env_spec = env_spec
        self.unroll_length = welcome.unroll_length
        self.lanes_stale = True  # lanes may be stepping in worker threads: the loop rebuilds them

    def _build_envs(self) -> None:
        """The envs of the learner's env spec, unless they are built already; no lane steps."""
        if self.envs and self.envs[0].spec == self.env_spec:
            return
        for env in self.envs:
            env.close()
        self.envs = []
        cfg = self.cfg
        self.envs = build_envs(
            self.env_spec, cfg.num_envs, timeout_s=cfg.build_timeout_s, retries=cfg.build_retries,
            on_built=self.metrics.env_build_seconds.observe,
            on_failed=self.metrics.env_build_failures.inc, seed=(cfg.seed, cfg.actor_id),
            between=lambda: self.link.poll(0),  # heartbeats: the learner must not forget us
        )  # fmt: skip

    def _on_weights(self, weights: wire.Weights) -> None:
        load_weights(self.model, weights)
        self.metrics.policy_version.set(weights.policy_version)

    def _on_event(self, event: str) -> None:
        if event == "reconnect":
            self.metrics.reconnects.inc()
            self.metrics.connected.set(0)
        elif event == "registered":
            self.metrics.connected.set(1)
            self.metrics.registered_time.set_to_current_time()
        elif event == "credit":
            self.metrics.last_credit_time.set_to_current_time()
        elif event == "ack":
            self.metrics.last_ack_time.set_to_current_time()
        elif event == "weights_request":
            self.metrics.weights_requests.inc()
        elif event.startswith("weights_via_"):
            self.metrics.weights_taken.labels(event.removeprefix("weights_via_")).inc()

    def stop(self, *_: object) -> None:
        self.stopping.set()

    def _infer(self, lane: Lane) -> None:
        start = time.perf_counter()
        infer_and_act(self.model, lane, self.rng, max(self.link.policy_version, 0))
        self.metrics.inference_seconds.inc(time.perf_counter() - start)

    def _step(self, lane: Lane) -> int:
        start = time.perf_counter()
        n = lane.step()
        self.metrics.step_seconds.inc(time.perf_counter() - start)
        return n

    def _ship(self, lane: Lane) -> None:
        for finished in lane.take_finished():
            for e in finished.episodes:
                self.metrics.count_episode(e.level, e.outcome)
            self.metrics.frontier_cells.set(sum(len(e.archive or ()) for e in self.envs))
            waited = _Waited(self.metrics.flow_control_wait_seconds.inc)
            ok = self.link.wait_for_credit(
                lambda waited=waited: waited.tick() or self.stopping.is_set() or self.lanes_stale
            )
            waited.tick()
            if not ok:
                return
            level = self.envs[0].spec.level  # the lanes' (a new Welcome's waits for new lanes)
            self.link.send_chunk(
                to_wire_chunk(self.cfg, self.instance_id, self.seq, finished, level=level)
            )
            self.seq += 1
            self.metrics.chunks_sent.inc()
            self.metrics.last_chunk_time.set_to_current_time()
            self.metrics.credits.set(self.link.credits)

    def run(self) -> int:
        """Play until stopped, with lanes built for what the learner's Welcome asked."""
        while not self.stopping.is_set():
            log.info("waiting for the first weights from %s", self.cfg.learner)
            if not self.link.wait_for_weights(self.stopping.is_set):
                return 0
            self._build_envs()
            num_actions = self.envs[0].num_actions
            check_num_actions(self.model.spec, num_actions)
            self.lanes = split_lanes(
                self.envs, self.cfg.lanes, self.unroll_length, num_actions,
                self.model.spec.state_size,
            )  # fmt: skip
            self.lanes_stale = False
            log.info("got policy version %d; playing", self.link.policy_version)
            self._play()
        return 0

    def _play(self) -> None:
        """Until stopped or the lanes are stale: each lane steps in its own worker thread (nes-py
        releases the GIL while emulating) while the main thread runs the policy for the next."""
        frame_skip = self.env_spec.frame_skip
        stepping: dict[int, Future[int]] = {}  # lane index -> its step in flight
        workers = len(self.lanes) if len(self.lanes) > 1 else 0
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="env-step") as pool:
            i = 0
            while not (self.stopping.is_set() or self.lanes_stale):
                j = i % len(self.lanes)
                lane = self.lanes[j]
                i += 1
                if j in stepping:  # this lane's previous step must be done before it is observed
                    self._account(stepping.pop(j).result(), frame_skip)
                    self._ship(lane)
                self._infer(lane)
                if workers:  # the other lanes keep stepping while this one is inferred
                    stepping[j] = pool.submit(self._step, lane)
                else:  # a single lane has nothing to overlap with: step right here
                    self._account(self._step(lane), frame_skip)
                    self._ship(lane)
                self.link.poll(0)
            for fut in stepping.values():
                fut.result()

    def _account(self, steps: int, frame_skip: int) -> None:
        self.metrics.agent_steps.inc(steps)
        self.metrics.env_frames.inc(steps * frame_skip)
        self.rate.add(steps)
        self.metrics.agent_steps_per_second.set(self.rate.rate())

    def close(self) -> None:
        self.link.close()
        for env in self.envs:
            env.close()


def run_process(cfg: ActorLink, name: str, metrics, build) -> int:
    """The shell both actor commands share: logging, torch threads, /metrics, signals, and the
    exit status of `build(cfg, metrics).run()` (1: an env that cannot be built or a metrics port
    in use; 2: refused by the learner)."""
    logging.basicConfig(
        level=cfg.log_level, format=f"%(asctime)s {name}[{cfg.actor_id}] %(levelname)s %(message)s"
    )
    torch.set_num_threads(cfg.torch_threads)
    add_process_metrics(metrics.registry, name, run_id=cfg.run_id)  # who, memory, CPU, fds
    if cfg.metrics_port:
        try:
            serve(metrics.registry, cfg.metrics_host, cfg.metrics_port)
        except MetricsPortError as exc:
            log.error("%s", exc)
            return 1
        log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, cfg.metrics_port)
    process = build(cfg, metrics)
    signal.signal(signal.SIGTERM, process.stop)
    signal.signal(signal.SIGINT, process.stop)
    try:
        return process.run()
    except EnvBuildError as exc:
        log.error("%s", exc)
        return 1
    except FatalRefusal as exc:
        log.error("the learner refused %s[%d]: %s", name, cfg.actor_id, exc)
        return 2
    finally:
        process.close()
        log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    cfg = config_io.load(ActorConfig, argv, prog="actor", description=__doc__ or "")
    return run_process(cfg, "actor", ActorMetrics(), Actor)


if __name__ == "__main__":
    sys.exit(main())
