"""`python -m learner`: ingest chunks, train with V-trace, broadcast weights, checkpoint."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
import zmq

from common import config as config_io
from common import curve, status, wire
from common.gpu import GpuCollector
from common.metrics import (
    LearnerMetrics,
    MetricsPortError,
    RateWindow,
    add_process_metrics,
    serve,
)
from common.model import ActorCritic, ModelSpec
from learner import checkpoint, reuse
from learner.batch_size import chunks_to_take
from learner.batching import collate
from learner.config import LearnerConfig
from learner.ingest import BindError, Ingest, IngestSettings
from learner.mixing import ReplayMixer
from learner.popart import PopArt
from learner.replay import ReplayCapacityError
from learner.update import Hyper, Learner

log = logging.getLogger("learner")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            f"learner: --device {name} asked for, but CUDA is not available; use --device cpu"
        )
    return torch.device(name)


class Publisher:
    """Serialises weight snapshots off the train loop and hands them to the IO thread."""

    def __init__(self, ingest: Ingest, model_spec: dict, dtype: str, metrics: LearnerMetrics):
        self.ingest = ingest
        self.model_spec = model_spec
        self.dtype = np.float16 if dtype == "float16" else np.float32
        self._slot: tuple[int, dict[str, torch.Tensor]] | None = None
        self._cond = threading.Condition()
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self.thread.start()

    def offer(self, version: int, model: torch.nn.Module) -> None:
        snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}  # on-device copy
        with self._cond:
            self._slot = (version, snapshot)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._slot is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                version, snapshot = self._slot
                self._slot = None
            tensors = {
                k: v.cpu().numpy().astype(self.dtype, copy=False) for k, v in snapshot.items()
            }
            msg = wire.Weights(policy_version=version, tensors=tensors, model_spec=self.model_spec)
            self.ingest.publish(wire.encode(msg))

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self.thread.join(timeout=5)


def build_training(cfg: LearnerConfig, device: torch.device) -> tuple[Learner, ReplayMixer | None]:
    """The model, optimizer and replay mixer that `cfg` describes, on `device`, untrained."""
    model = ActorCritic(cfg.model_spec()).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)
    hyper = Hyper(
        discount=cfg.discount,
        reward_scale=cfg.reward_scale,
        reward_clip=cfg.reward_clip,
        baseline_cost=cfg.baseline_cost,
        entropy_cost=cfg.entropy_cost,
        max_grad_norm=cfg.max_grad_norm,
        clip_rho_threshold=cfg.clip_rho_threshold,
        clip_pg_rho_threshold=cfg.clip_pg_rho_threshold,
        epochs=cfg.epochs,
        minibatches=cfg.minibatches,
        ppo_clip=cfg.ppo_clip,
        normalize_advantages=cfg.normalize_advantages,
    )
    popart = PopArt(model.value, cfg.popart_beta, device=device) if cfg.popart else None
    mixer = None
    if cfg.replay_capacity and cfg.replay_fraction > 0:
        mixer = ReplayMixer.create(cfg, device)
    return Learner(model, optimizer, hyper, popart, seed=cfg.seed), mixer


class TrainLoop:
    def __init__(self, cfg: LearnerConfig, metrics: LearnerMetrics):
        self.cfg = cfg
        self.metrics = metrics
        self.stopping = threading.Event()
        self.device = resolve_device(cfg.device)
        if self.device.type == "cuda":  # fixed input shapes: let cuDNN pick its fastest kernels
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self.run_dir = Path(cfg.run_dir)
        self._lock_fd = checkpoint.lock_run_dir(self.run_dir)
        self.curve: curve.CurveServer | None = None
        try:
            config_io.write_resolved(cfg, self.run_dir / "config.json")
            torch.manual_seed(cfg.seed)
            self.model_spec = cfg.model_spec()
            self.learner, self.mixer = build_training(cfg, self.device)
            self.model = self.learner.model
            if self.mixer is not None:
                metrics.replay_capacity.set(cfg.replay_capacity)
            self.env_frames = 0
            self.agent_steps = 0
            checkpoint.remove_stale_temps(self.run_dir / "checkpoints")
            self._resume()
            metrics.set_build_info(str(self.device))
            metrics.policy_version.set(self.learner.updates)
            settings = IngestSettings(
                run_id=cfg.run_id,
                env_spec={"action_set": cfg.action_set, "frame_size": cfg.frame_size},
                model_spec=self.model_spec.to_wire(),
                unroll_length=cfg.unroll_length,
                credits_per_actor=cfg.credits_per_actor,
                queue_chunks=cfg.queue_chunks,
                max_policy_lag=cfg.max_policy_lag,
                heartbeat_interval_s=cfg.heartbeat_interval_s,
                actor_timeout_s=cfg.actor_timeout_s,
                pin_memory=self.device.type == "cuda",
            )
            context = zmq.Context.instance()
            if cfg.curve_dir:
                self.curve = curve.CurveServer.start(cfg.curve_dir, context)
                log.info("CURVE on: %d authorised actor keys", self.curve.authorized_keys)
            self.ingest = Ingest(
                settings,
                metrics,
                lambda: self.learner.updates,
                host=cfg.host,
                port=cfg.port,
                context=context,
                socket_options=self.curve.socket_options if self.curve else None,
            )
            self.publisher = Publisher(
                self.ingest, self.model_spec.to_wire(), cfg.weights_dtype, metrics
            )
            self.rate = RateWindow(30.0)
            replayed = cfg.replay_fraction / (1 - cfg.replay_fraction) if self.mixer else 0.0
            self.reuse_limits = reuse.ReuseLimits(
                min_epochs=cfg.epochs,
                max_epochs=cfg.max_epochs,
                max_sample_insert_ratio=cfg.replay_max_sample_insert_ratio,
                sequences_per_fresh=1.0 + replayed,
            )
            self.epochs = cfg.epochs
            self.batch_size = cfg.batch_size()
            # Waiting means idle hardware only when the learner has a device of its own: a CPU
            # learner's wait is CPU time its actors use on the same cores.
            self.adapt_epochs = cfg.max_epochs > cfg.epochs and self.device.type == "cuda"
            self.replay_rate = RateWindow(30.0)
            self._skipped_reported = 0
            self._status_window = status.StatusWindow()
        except BaseException:  # a refused checkpoint, a port in use: free what was taken
            if self.curve:
                self.curve.stop()
            checkpoint.unlock_run_dir(self._lock_fd)
            raise

    # ---- checkpoints ------------------------------------------------------------------------

    def _resume(self) -> None:
        path = checkpoint.latest_path(self.run_dir / "checkpoints")
        if path is None:
            log.info("no checkpoint in %s: starting fresh", self.run_dir)
            return
        state = checkpoint.load(path, self.device)
        saved = ModelSpec.from_dict(state.get("model_spec") or {})
        if saved != self.model_spec:
            raise SystemExit(
                f"learner: checkpoint {path} holds model {saved.to_wire()}, but the config asks "
                f"for {self.model_spec.to_wire()}; use another --run-dir or the matching "
                "--arch/--action-set/--[no-]last-action/--[no-]input-norm"
            )
        self.model.load_state_dict(state["model"])
        self.learner.optimizer.load_state_dict(state["optimizer"])
        self.learner.updates = int(state["policy_version"])
        self.learner.sgd_steps = int(state.get("sgd_steps", self.learner.updates))
        if self.learner.popart is not None:
            if "popart" not in state:
                raise SystemExit(
                    f"learner: checkpoint {path} was trained without PopArt, whose value head "
                    "predicts values in reward units; resume it with --no-popart or use another "
                    "--run-dir"
                )
            self.learner.popart.load_state_dict(state["popart"])
        elif "popart" in state:
            raise SystemExit(
                f"learner: checkpoint {path} was trained with PopArt (its value head predicts "
                "normalised values); resume it with --popart or use another --run-dir"
            )
        self.env_frames = int(state["env_frames"])
        self.agent_steps = int(state["agent_steps"])
        # The counters count this process's work from 0, as Prometheus expects of a counter (one
        # that restarted at the resumed total, lower than its last scrape whenever a crash lost
        # updates, would read as a reset and rate() would jump by the whole total); the run's
        # totals are gauges.
        self.metrics.policy_version.set(self.learner.updates)
        self.metrics.run_env_frames.set(self.env_frames)
        log.info("resumed from %s at policy version %d", path.name, self.learner.updates)

    def save_checkpoint(self) -> Path:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.learner.optimizer.state_dict(),
            "policy_version": self.learner.updates,
            "sgd_steps": self.learner.sgd_steps,
            "env_frames": self.env_frames,
            "agent_steps": self.agent_steps,
            "model_spec": self.model_spec.to_wire(),
            **({"popart": self.learner.popart.state_dict()} if self.learner.popart else {}),
            "config": config_io.to_dict(self.cfg),
            "saved_at": time.time(),
        }
        path = checkpoint.save(
            self.run_dir / "checkpoints", state, self.learner.updates, self.cfg.keep_checkpoints
        )
        self.metrics.checkpoints.inc()
        self.metrics.last_checkpoint_timestamp.set_to_current_time()
        log.info("checkpoint %s", path.name)
        return path

    # ---- the loop ---------------------------------------------------------------------------

    def _take_batch(self) -> list | None:
        """The chunks of the next update (learner/batch_size.py); None once stopping."""
        size, start = self.batch_size, time.monotonic()
        while not self.stopping.is_set():
            waited = time.monotonic() - start
            n = chunks_to_take(self.ingest.queued(), size, waited)
            if n:
                return self.ingest.take(n, timeout_s=0)  # only this loop takes: n are there
            # wake for the min-th chunk (past the deadline: the first), the deadline, or every
            # 0.2 s to notice a stop
            left = size.wait_s - waited
            need = size.min_chunks if left > 0 else 1
            self.ingest.wait_queued(need, timeout_s=min(0.2, left) if left > 0 else 0.2)
        return None

    def run(self) -> int:
        cfg = self.cfg
        self.metrics.start_time.set_to_current_time()  # before any registration is answered
        self.ingest.start()
        start = {"event": "start", "time": time.time(), "env_frames": self.env_frames}
        checkpoint.append_lines(self.run_dir / "episodes.jsonl", [json.dumps(start)])  # t = 0
        self.publisher.offer(self.learner.updates, self.model)
        last_publish = last_ckpt = last_status = last_log = time.monotonic()
        since_publish = 0
        log.info(
            "listening on %s:%d (weights on %d), device %s",
            cfg.host,
            cfg.port,
            cfg.port + 1,
            self.device,
        )
        while not self.stopping.is_set():
            if cfg.max_updates and self.learner.updates >= cfg.max_updates:
                log.info("reached max_updates=%d", cfg.max_updates)
                break
            wait_start = time.perf_counter()
            chunks = self._take_batch()
            if chunks is None:
                break
            compute_start = time.perf_counter()
            self.metrics.wait_seconds.inc(compute_start - wait_start)
            self.metrics.batch_chunks.observe(len(chunks))
            version, now = self.learner.updates, time.time()
            for c in chunks:
                self.metrics.policy_lag.observe(version - c.policy_version)
                self.metrics.chunk_latency.observe(max(0.0, now - c.send_time))
            batch = collate(chunks, self.device)
            self.learner.observe_fresh(batch)  # before replay is mixed in
            steps = batch.unroll_length * batch.num_sequences
            mixed = None
            if self.mixer is not None:
                sample_start = time.perf_counter()
                mixed = self.mixer.mix(batch, self.learner.updates)
                self.metrics.replay_sample_seconds.observe(time.perf_counter() - sample_start)
                batch = mixed.batch
            stats = self.learner.step(batch, epochs=self.epochs)
            if mixed is not None:
                self.mixer.after_update(mixed, stats.priorities)
                replayed = (batch.num_sequences - mixed.fresh) * batch.unroll_length
                self.metrics.samples.labels("replay").inc(replayed)
                self.replay_rate.add(replayed)
            frames = sum(c.env_frames for c in chunks)
            self.agent_steps += steps
            self.env_frames += frames
            self.rate.add(steps)
            elapsed = time.perf_counter() - compute_start
            self.metrics.epochs.set(stats.epochs)
            if self.adapt_epochs:
                self.epochs = reuse.next_epochs(
                    stats.epochs,
                    self.reuse_limits,
                    queued_chunks=self.ingest.queued(),
                    batch_chunks=self.batch_size.max_chunks,
                    wait_s=compute_start - wait_start,
                    compute_s=elapsed,
                )
            self.metrics.compute_seconds.inc(elapsed)
            self.metrics.update_seconds.observe(elapsed)
            self.metrics.updates.inc()
            self.metrics.sgd_steps.inc(stats.sgd_steps)
            self.metrics.agent_steps.inc(steps)
            self.metrics.env_frames.inc(frames)
            self.metrics.run_env_frames.set(self.env_frames)
            self.metrics.samples.labels("fresh").inc(steps)
            self.metrics.policy_version.set(self.learner.updates)
            since_publish += 1
            mono = time.monotonic()
            if (
                since_publish >= cfg.publish_every_updates
                and mono - last_publish >= cfg.publish_interval_s
            ):
                self.publisher.offer(self.learner.updates, self.model)
                last_publish, since_publish = mono, 0
            if mono - last_log >= 2.0:  # reading the losses syncs with the device: not every update
                self._record(stats)
                last_log = mono
            if mono - last_ckpt >= cfg.checkpoint_interval_s:
                self.save_checkpoint()
                last_ckpt = mono
            if cfg.status_interval_s and mono - last_status >= cfg.status_interval_s:
                self._print_status()
                last_status = mono
        return 0

    def _record(self, stats) -> None:
        m = self.metrics
        loss = {k: float(getattr(stats, k)) for k in ("total_loss", "pg_loss", "baseline_loss")}
        m.loss.labels("total").set(loss["total_loss"])
        m.loss.labels("policy").set(loss["pg_loss"])
        m.loss.labels("baseline").set(loss["baseline_loss"])
        entropy = float(stats.entropy)
        m.loss.labels("entropy").set(-entropy)
        m.entropy.set(entropy)
        m.grad_norm.set(float(stats.grad_norm))
        clip_fraction = float(stats.clip_fraction)
        m.clip_fraction.set(clip_fraction)
        popart = self.learner.popart
        value_scale = float(popart.stats.sigma(popart.min_sigma)) if popart else 1.0
        m.value_scale.set(value_scale)
        sps = self.rate.rate()
        m.agent_steps_per_second.set(sps)
        m.samples_per_second.labels("fresh").set(sps)
        replay = {}
        if self.mixer is not None:
            r = self.mixer.replay
            m.replay_size.set(r.size)
            m.replay_sample_insert_ratio.set(self.mixer.sample_insert_ratio)
            m.replay_skipped.inc(self.mixer.skipped - self._skipped_reported)
            self._skipped_reported = self.mixer.skipped
            m.samples_per_second.labels("replay").set(self.replay_rate.rate())
            if r.size:
                q = r.priority_quantiles([0.5, 0.9, 0.99, 1.0]).tolist()
                for stat, v in zip(("p50", "p90", "p99", "max"), q, strict=True):
                    m.replay_priority.labels(stat).set(v)
            replay = {
                "replay_size": r.size,
                "replay_sample_insert_ratio": self.mixer.sample_insert_ratio,
            }
        eps = list(self.ingest.episodes)
        row = {
            "time": time.time(),
            "updates": self.learner.updates,
            "env_frames": self.env_frames,
            "agent_steps": self.agent_steps,
            "agent_steps_per_s": sps,
            "mean_return": float(np.mean([e.episode_return for e in eps])) if eps else None,
            "mean_max_x": float(np.mean([e.max_x for e in eps])) if eps else None,
            "flag_rate": float(np.mean([e.flag for e in eps])) if eps else None,
            "entropy": entropy,
            "grad_norm": float(stats.grad_norm),
            "clip_fraction": clip_fraction,
            "epochs": stats.epochs,
            "value_scale": value_scale,
            "sgd_steps": self.learner.sgd_steps,
            **loss,
            **replay,
        }
        checkpoint.append_lines(self.run_dir / "metrics.jsonl", [json.dumps(row)])
        self._log_episodes()

    def _log_episodes(self) -> None:
        """Append every newly reported training episode to RUN/episodes.jsonl (learning curves)."""
        new = self.ingest.drain_episodes()
        if not new:
            return
        lines = [
            json.dumps(
                {
                    "time": t,
                    "env_frames": self.env_frames,
                    "actor_id": actor_id,
                    "level": e.level,
                    "max_x": e.max_x,
                    "flag": e.flag,
                    "return": e.episode_return,
                    "length": e.length,
                    "outcome": e.outcome,
                }
            )
            for t, actor_id, e in new
        ]
        checkpoint.append_lines(self.run_dir / "episodes.jsonl", lines)

    def _print_status(self) -> None:
        now = status.flatten(self.metrics.registry.collect())
        sys.stderr.write("\r" + self._status_window.line(now) + "   ")
        sys.stderr.flush()

    def stop(self, *_: object) -> None:
        self.stopping.set()

    def close(self) -> None:
        self.publisher.stop()
        self.ingest.stop()
        if self.curve:
            self.curve.stop()
        checkpoint.unlock_run_dir(self._lock_fd)


def main(argv: list[str] | None = None) -> int:
    cfg = config_io.load(LearnerConfig, argv, prog="learner", description=__doc__ or "")
    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s learner %(levelname)s %(message)s"
    )
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    metrics = LearnerMetrics()
    add_process_metrics(metrics.registry)  # resident memory, CPU, start time, open fds
    try:
        loop = TrainLoop(cfg, metrics)
    except (checkpoint.RunDirBusy, ReplayCapacityError, BindError) as exc:
        log.error("%s", exc)
        return 1
    if loop.device.type == "cuda":
        gpu = GpuCollector.create()
        if gpu is not None:
            metrics.registry.register(gpu)
    else:
        log.info("GPU metrics off: the learner runs on %s", loop.device)
    try:
        server = (
            serve(metrics.registry, cfg.metrics_host, cfg.metrics_port)
            if cfg.metrics_port
            else None
        )
    except MetricsPortError as exc:
        loop.close()
        log.error("%s", exc)
        return 1
    if server:
        log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, server.port)
    signal.signal(signal.SIGTERM, loop.stop)
    signal.signal(signal.SIGINT, loop.stop)
    try:
        return loop.run()
    finally:
        loop.save_checkpoint()
        loop.close()
        if server:
            server.close()
        if cfg.status_interval_s:
            sys.stderr.write("\n")
        log.info("stopped at policy version %d", loop.learner.updates)


if __name__ == "__main__":
    sys.exit(main())
