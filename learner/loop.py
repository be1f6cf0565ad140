"""The learner's train loop: take a batch of chunks, train on it, publish the weights,
checkpoint; and what it is built from (`build_training`: the network, optimizer and replay that
the config describes). The loop owns the run directory (its lock) for its life.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import torch
import zmq

from common import config as config_io
from common import curve
from common.metrics import LearnerMetrics
from common.model import ActorCritic, resolve_device
from common.rundir import RunDir
from learner import checkpoint, lr_schedule, reuse
from learner.batch_size import chunks_to_take
from learner.batching import collate
from learner.checkpoint import Totals
from learner.config import LearnerConfig
from learner.ingest import HostChunk, Ingest, IngestSettings
from learner.levels import LevelStats
from learner.mixing import MAX_SAMPLE_INSERT_RATIO, ReplayMixer
from learner.publisher import Publisher
from learner.telemetry import Telemetry
from learner.tensorboard import ScalarLog
from learner.update import Hyper, Learner

log = logging.getLogger("learner")

PUBLISH_INTERVAL_S = 0.5  # weights go out after an update, but no more often than this
ADAM_EPS = 1e-5


class RunTrained(Exception):
    """The run directory's checkpoint has already reached --train-frames."""


def training_device(name: str) -> torch.device:
    """The device of --device `name`, set up for training: fixed input shapes let cuDNN pick
    its fastest kernels."""
    device = resolve_device(name)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


def build_training(cfg: LearnerConfig, device: torch.device) -> tuple[Learner, ReplayMixer | None]:
    """The model, optimizer and replay mixer that `cfg` describes, on `device`, untrained."""
    model = ActorCritic(cfg.model_spec()).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=ADAM_EPS)
    mixer = None
    if cfg.replay_capacity and cfg.replay_fraction > 0:
        mixer = ReplayMixer.create(cfg, device)
    return Learner(model, optimizer, Hyper.from_config(cfg), seed=cfg.seed), mixer


class TrainLoop:
    def __init__(self, cfg: LearnerConfig, metrics: LearnerMetrics):
        self.cfg = cfg
        self.metrics = metrics
        self.stopping = threading.Event()
        self.device = training_device(cfg.device)
        self.run_dir = RunDir(cfg.run_dir)
        self._lock_fd = checkpoint.lock_run_dir(self.run_dir)
        self.curve: curve.CurveServer | None = None
        try:
            self._build_training()
            self._build_io()
        except BaseException:  # a refused checkpoint, a port in use: free what was taken
            if self.curve:
                self.curve.stop()
            checkpoint.unlock_run_dir(self._lock_fd)
            raise

    def _build_training(self) -> None:
        """The learner, resumed from the run's checkpoint, and how many passes it makes."""
        cfg, metrics = self.cfg, self.metrics
        config_io.write_resolved(cfg.resolved(), self.run_dir.config)
        torch.manual_seed(cfg.seed)
        self.learner, self.mixer = build_training(cfg, self.device)
        self.model = self.learner.model
        if self.mixer is not None:
            metrics.replay_capacity.set(cfg.replay_capacity)
        checkpoint.remove_stale_temps(self.run_dir)
        self.levels = LevelStats(cfg.levels)  # its bests go on from the checkpoint's
        self.totals = checkpoint.resume(self.run_dir, self.learner, self.device, self.levels,
                                        config_io.to_dict(cfg))  # fmt: skip
        if self.trained():
            raise RunTrained(
                f"{self.run_dir.root} has trained {self.totals.env_frames} env frames, its "
                f"--train-frames is {cfg.train_frames}: raise --train-frames (make train FRAMES=) "
                "to train it on, or start a new run dir"
            )
        # the run's totals are gauges; counters count this process's work from 0 (one restarted at
        # a resumed total below its last scrape would read as a reset, and rate() would jump)
        metrics.policy_version.set(self.learner.updates)
        metrics.run_env_frames.set(self.totals.env_frames)
        metrics.train_frames.set(cfg.train_frames)
        metrics.set_build_info(str(self.device))
        replayed = cfg.replay_fraction / (1 - cfg.replay_fraction) if self.mixer else 0.0
        self.reuse_limits = reuse.ReuseLimits(
            min_epochs=cfg.epochs,
            max_epochs=cfg.max_epochs,
            # the sample:insert limit is replay's; fresh data alone is not rate-limited
            max_sample_insert_ratio=MAX_SAMPLE_INSERT_RATIO if self.mixer else None,
            sequences_per_fresh=1.0 + replayed,
        )
        self.epochs = cfg.epochs
        self.batch_size = cfg.batch_size()
        # only on a device of its own is waiting idle hardware (learner/reuse.py)
        self.adapt_epochs = cfg.max_epochs > cfg.epochs and self.device.type == "cuda"

    def _build_io(self) -> None:
        """The sockets (bound here), the weight publisher and the telemetry."""
        cfg, model_spec, env_spec = self.cfg, self.model.spec.to_wire(), self.cfg.env_spec()
        settings = IngestSettings(
            run_id=cfg.run_id, env_spec=env_spec, model_spec=model_spec,
            unroll_length=cfg.unroll_length, credits_per_actor=cfg.credits_per_actor,
            queue_chunks=cfg.queue_chunks, max_policy_lag=cfg.max_policy_lag,
            heartbeat_interval_s=cfg.heartbeat_interval_s, actor_timeout_s=cfg.actor_timeout_s,
            pin_memory=self.device.type == "cuda",
        )  # fmt: skip
        context = zmq.Context.instance()
        if cfg.curve_dir:
            self.curve = curve.CurveServer.start(cfg.curve_dir, context)
            log.info("CURVE on: %d authorised actor keys", self.curve.authorized_keys)
        self.ingest = Ingest(
            settings, self.metrics, lambda: self.learner.updates, host=cfg.host, port=cfg.port,
            context=context, socket_options=self.curve.socket_options if self.curve else None,
            on_episode=lambda e: self.levels.add(e.level, e.max_x, e.flag),
        )  # fmt: skip
        self.publisher = Publisher(
            self.ingest.publish, model_spec, self.metrics.weights_publish_cpu_seconds.inc
        )
        self.telemetry = Telemetry(
            self.metrics, self.run_dir, self.learner, self.mixer, self.ingest,
            cfg.status_interval_s, self.levels,
            ScalarLog(self.run_dir.tensorboard) if cfg.tensorboard else None,
        )  # fmt: skip

    def save_checkpoint(self) -> Path:
        config = config_io.to_dict(self.cfg)
        state = checkpoint.learner_state(self.learner, self.totals, config, self.levels)
        path = checkpoint.save(self.run_dir, state, self.learner.updates)
        self.telemetry.checkpointed()
        log.info("checkpoint %s", path.name)
        return path

    def _take_batch(self) -> list[HostChunk] | None:
        """The chunks of the next update (learner/batch_size.py); None once stopping."""
        size, start = self.batch_size, time.monotonic()
        while not self.stopping.is_set():
            waited = time.monotonic() - start
            n = chunks_to_take(self.ingest.queued(), size, waited)
            if n:
                return self.ingest.take(n, timeout_s=0)  # only this loop takes: n are there
            # wake for the min-th chunk (past the deadline: the first), the deadline, or a stop
            left = size.wait_s - waited
            need = size.min_chunks if left > 0 else 1
            self.ingest.wait_queued(need, timeout_s=min(0.2, left) if left > 0 else 0.2)
        return None

    def run(self) -> int:
        cfg = self.cfg
        self.telemetry.started(self.totals)  # before any registration is answered
        self.ingest.start()
        self.publisher.offer(self.learner.updates, self.model, self.totals.env_frames)
        last_publish = last_checkpoint = time.monotonic()
        log.info("listening on %s:%d (weights on %d), device %s",
                 cfg.host, cfg.port, cfg.port + 1, self.device)  # fmt: skip
        while not self.stopping.is_set():
            if self.trained():
                log.info("the run is trained: %d env frames of --train-frames %d; stopping",
                         self.totals.env_frames, cfg.train_frames)  # fmt: skip
                break
            wait_start = time.perf_counter()
            chunks = self._take_batch()
            if chunks is None:
                break
            compute_start = time.perf_counter()
            self.telemetry.took(chunks, wait_s=compute_start - wait_start)
            batch = collate(chunks, self.device)
            self.learner.observe_fresh(batch)  # before replay is mixed in
            steps = batch.unroll_length * batch.num_sequences  # fresh agent steps
            mixed = None
            if self.mixer is not None:
                with self.metrics.replay_sample_seconds.time():
                    mixed = self.mixer.mix(batch, self.learner.updates)
                batch = mixed.batch  # the fresh sequences, then the replayed ones
            self.learner.set_learning_rate(lr_schedule.learning_rate(
                cfg.learning_rate, self.totals.env_frames, cfg.lr_anneal_frames,
                cfg.lr_final_fraction,
            ))  # fmt: skip
            stats = self.learner.step(batch, epochs=self.epochs)
            replayed = 0
            if mixed is not None:
                self.mixer.after_update(mixed, stats.priorities)
                replayed = (batch.num_sequences - mixed.fresh) * batch.unroll_length
            frames = sum(c.env_frames for c in chunks)
            self.totals = Totals(self.totals.env_frames + frames, self.totals.agent_steps + steps)
            compute_s = time.perf_counter() - compute_start
            self.telemetry.updated(stats, self.totals, steps, replayed, frames, compute_s)
            if self.adapt_epochs:
                self.epochs = reuse.next_epochs(
                    self.epochs, self.reuse_limits, queued_chunks=self.ingest.queued(),
                    batch_chunks=self.batch_size.max_chunks, wait_s=compute_start - wait_start,
                    compute_s=compute_s,
                )  # fmt: skip
            now = time.monotonic()
            if now - last_publish >= PUBLISH_INTERVAL_S:
                self.publisher.offer(self.learner.updates, self.model, self.totals.env_frames)
                last_publish = now
            if now - last_checkpoint >= cfg.checkpoint_interval_s:
                self.save_checkpoint()
                last_checkpoint = now
        return 0

    def trained(self) -> bool:
        """Whether the run has reached its planned length (--train-frames; never when 0)."""
        return 0 < self.cfg.train_frames <= self.totals.env_frames

    def stop(self, *_: object) -> None:
        self.stopping.set()

    def close(self) -> None:
        self.publisher.stop()
        self.ingest.stop()
        if self.curve:
            self.curve.stop()
        self.telemetry.close()  # its last record, while the run dir is still this learner's
        checkpoint.unlock_run_dir(self._lock_fd)
