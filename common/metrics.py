"""Every Prometheus metric of the learner, the actors and the evaluator, and the exporter.

Each process builds its own `CollectorRegistry` (never the global one: tests build several) and
serves it with `serve(registry, host, port)`. A class declares its metrics as a table of `_M`s
(`updates` is `mario_learner_updates_total`) that also names the learner's other outputs, read
from the table by their writers: the key in RUN/metrics.jsonl (learner/telemetry.py; a level's
gauge in the row's {"levels": {level: {key: value}}}), the TensorBoard scalar
(learner/tensorboard.py) and the status-line field (common/status.py; a histogram's is its mean
over the window). Only gauges, set by the train loop with `LearnerMetrics.record`, reach
metrics.jsonl and TensorBoard (no figure: null in the row, no scalar).

Conventions: names start with `mario_`; values in base units (`_seconds`, `_bytes`); ratios 0-1;
counters end in `_total` (prometheus_client appends it); labels take a small closed set of values
(the actor id is the scrape config's target label, never a metric label). Known label values are
created up front, `levels` for the per-level series, so `rate()` sees a series from zero.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from threading import Thread
from typing import NamedTuple
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from common import heap

OUTCOMES = ("flag", "death", "no_progress", "other")  # how an episode ended
REJECT_REASONS = ("decode", "spec", "unknown_actor", "auth", "other")  # why a message was dropped
# Every label's closed set of values, created up front; "level" takes the levels passed in.
LABEL_VALUES = {
    "outcome": OUTCOMES,
    "reason": REJECT_REASONS,
    "source": ("fresh", "replay"),
    "result": ("accepted", "stale", "rejected", "duplicate"),
    "term": ("policy", "baseline", "entropy", "total"),
    "stat": ("p50", "p90", "p99", "max"),
    "policy": ("greedy", "sampled"),  # argmax actions; actions drawn from the policy
    "via": ("broadcast", "connection"),  # the learner's weight broadcast; an actor's own DEALER
}

# Buckets. Mario 1-1: the flag is near x = 3160; the game's own return is about the distance
# travelled minus the clock, and -15 per death.
LAG_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_CHUNK_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
UPDATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# Non-negative: prometheus_client drops _sum (so mean returns) when a bucket bound is negative.
RETURN_BUCKETS = (0, 100, 250, 500, 750, 1000, 1500, 2000, 2500, 3000, 3500)
MAX_X_BUCKETS = (200, 400, 600, 800, 1000, 1200, 1400, 1700, 2000, 2300, 2600, 2900, 3100, 3300)
PROGRESS_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
LENGTH_BUCKETS = (25, 50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000)
ENV_BUILD_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
REPLAY_SAMPLE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1)


class _M(NamedTuple):  # one row of a metrics table
    attr: str
    kind: type[MetricWrapperBase]  # Counter, Gauge, Histogram or Info
    name: str
    help: str
    labels: tuple[str, ...] = ()  # each one a key of LABEL_VALUES, or "level"
    buckets: tuple[float, ...] = ()  # histograms only
    row: str | Mapping[str, str] = ""  # metrics.jsonl key; {label value: key} for a label
    tag: str = ""  # TensorBoard tag, "{label}" filled in per value
    status: str = ""  # status-line field: a format of the value, e.g. "actors {:.0f}"


# A gauge's figure, {label value: figure} for a gauge of one label; None: no figure this time.
Figure = float | None | Mapping[str, float | None]


def _check_outputs(table: tuple[_M, ...]) -> tuple[_M, ...]:
    """`table`, once its rows' outputs are ones the writers can write."""
    for m in table:
        if (m.row or m.tag) and (m.kind is not Gauge or len(m.labels) > 1):
            raise TypeError(f"{m.name}: only a gauge of at most one label has a row or a tag")
        if isinstance(m.row, Mapping) and m.labels in ((), ("level",)):
            raise TypeError(f"{m.name}: a row of keys per label value needs a label not level")
    return table


class _Metrics:
    """Builds TABLE into `registry` (a fresh one by default), with every known label value."""

    TABLE: tuple[_M, ...] = ()

    def __init__(self, registry: CollectorRegistry | None = None, *, levels: Iterable[str] = ()):
        self.registry = CollectorRegistry() if registry is None else registry
        self.known = known = {**LABEL_VALUES, "level": tuple(levels)}
        for m in self.TABLE:
            extra = {"buckets": m.buckets} if m.buckets else {}
            metric = m.kind(m.name, m.help, m.labels, registry=self.registry, **extra)
            if m.labels:  # every combination of the known values
                for values in itertools.product(*(known[label] for label in m.labels)):
                    metric.labels(*values)
            setattr(self, m.attr, metric)


class LearnerMetrics(_Metrics):
    """The learner's metrics."""

    # fmt: off
    TABLE = _check_outputs((
        # --- throughput ---
        # Counters count this process's work from 0; the run's totals, resumed, are gauges.
        _M("agent_steps_per_second", Gauge, "mario_learner_agent_steps_per_second", "Fresh agent steps used per second, recently.", row="agent_steps_per_s", tag="throughput/agent_steps_per_s", status="{:7.0f} steps/s"),
        _M("updates", Counter, "mario_learner_updates", "Optimizer updates by this process (the run's: policy version).", status="updates {:7.0f}"),
        _M("env_frames", Counter, "mario_learner_env_frames", "NES frames of the fresh agent steps this process consumed."),
        _M("run_env_frames", Gauge, "mario_learner_run_env_frames", "NES frames of fresh agent steps consumed over the whole run (resumed with it).", row="env_frames"),
        _M("run_agent_steps", Gauge, "mario_learner_run_agent_steps", "Fresh agent steps consumed over the whole run (resumed with it).", row="agent_steps"),
        _M("train_frames", Gauge, "mario_learner_train_frames", "The run's planned length in env frames, where the learner stops (--train-frames; 0 = until stopped)."),
        _M("agent_steps", Counter, "mario_learner_agent_steps", "Fresh agent steps used."),
        _M("samples", Counter, "mario_learner_samples", "Agent steps trained on, by source.", ("source",)),
        _M("samples_per_second", Gauge, "mario_learner_samples_per_second", "Agent steps trained on per second.", ("source",)),
        _M("policy_version", Gauge, "mario_policy_version", "Learner's policy version.", row="updates", status="policy v{:.0f}"),
        _M("policy_lag", Histogram, "mario_policy_lag_updates", "Learner policy version minus a chunk's behaviour policy version, at consumption.", buckets=LAG_BUCKETS),
        # --- ingest and broadcast ---
        _M("chunks", Counter, "mario_learner_chunks", "Chunks received.", ("result",)),
        _M("messages_rejected", Counter, "mario_learner_messages_rejected", "Messages dropped, by reason.", ("reason",)),
        _M("ingest_queue_depth", Gauge, "mario_learner_ingest_queue_depth", "Chunks waiting to be trained on."),
        _M("ingest_queue_capacity", Gauge, "mario_learner_ingest_queue_capacity", "Chunks the ingest queue holds."),
        _M("ingest_bytes", Counter, "mario_learner_ingest_bytes", "Chunk payload bytes received."),
        _M("chunk_latency", Histogram, "mario_chunk_latency_seconds", "Time from an actor sending a chunk to the learner consuming it.", buckets=LATENCY_BUCKETS),
        _M("actors_connected", Gauge, "mario_actors_connected", "Actors heard recently.", status="actors {:.0f}"),
        _M("credits_outstanding", Gauge, "mario_learner_credits_outstanding", "Send credits granted to the actors heard recently and not yet spent: the most chunks that can be in flight."),
        _M("weights_broadcast_bytes", Counter, "mario_weights_broadcast_bytes", "Bytes of policy weights sent."),
        _M("weights_broadcasts", Counter, "mario_weights_broadcasts", "Policy weight messages sent."),
        _M("weights_publish_cpu_seconds", Counter, "mario_weights_publish_cpu_seconds", "CPU time the publisher thread spent preparing weight messages (device copy, dtype, encoding)."),
        # --- train loop: wait / (wait + compute) is the share of time starved for data ---
        _M("update_seconds", Histogram, "mario_learner_update_seconds", "Duration of one update.", buckets=UPDATE_BUCKETS),
        _M("wait_seconds", Counter, "mario_learner_wait_seconds", "Train loop time spent waiting for data."),
        _M("batch_chunks", Histogram, "mario_learner_batch_chunks", "Chunks per update.", buckets=BATCH_CHUNK_BUCKETS),
        _M("compute_seconds", Counter, "mario_learner_compute_seconds", "Train loop time spent computing."),
        _M("loss", Gauge, "mario_learner_loss", "Last update's loss, by term.", ("term",), row={"total": "total_loss", "policy": "pg_loss", "baseline": "baseline_loss"}, tag="loss/{term}"),
        _M("grad_norm", Gauge, "mario_learner_grad_norm", "Last update's gradient norm, before clipping.", row="grad_norm"),
        _M("entropy", Gauge, "mario_learner_entropy", "Last update's mean entropy (nats).", row="entropy", tag="policy/entropy"),
        _M("sgd_steps", Counter, "mario_learner_sgd_steps", "Optimizer steps (epochs x minibatches per update)."),
        _M("run_sgd_steps", Gauge, "mario_learner_run_sgd_steps", "Optimizer steps over the whole run (resumed with it).", row="sgd_steps"),
        _M("epochs", Gauge, "mario_learner_epochs", "Passes over each batch in the last update (adapts to the data rate when enabled).", row="epochs"),
        _M("clip_fraction", Gauge, "mario_learner_clip_fraction", "Last update's share of steps whose PPO surrogate was clipped (0 when off).", row="clip_fraction"),
        _M("learning_rate", Gauge, "mario_learner_learning_rate", "The optimizer's learning rate in the last update (falls when --lr-anneal-frames is set).", row="learning_rate", tag="optimizer/learning_rate"),
        _M("value_scale", Gauge, "mario_learner_value_scale", "PopArt's running sigma of the value targets.", row="value_scale"),
        # --- episodes, as reported by the actors ---
        _M("episode_return", Histogram, "mario_episode_return", "Game return (unshaped).", ("level",), RETURN_BUCKETS, status="return {:7.1f}"),
        _M("episode_max_x", Histogram, "mario_episode_max_x", "Largest x position reached.", ("level",), MAX_X_BUCKETS, status="max x {:7.1f}"),
        _M("episode_length", Histogram, "mario_episode_length_steps", "Episode agent steps.", ("level",), LENGTH_BUCKETS),
        _M("episodes", Counter, "mario_episodes", "Finished episodes, by level and outcome.", ("level", "outcome")),
        _M("episode_progress", Histogram, "mario_episode_progress", "Max x as a share of the level's length (1 at the flag); levels of known length only.", ("level",), PROGRESS_BUCKETS),
        _M("frontier_episodes", Counter, "mario_frontier_episodes", "Training episodes started from a frontier snapshot (--frontier-starts); no other episode metric counts them.", ("level",)),
        # the newest 200 training episodes, all levels together (0 before the first)
        _M("recent_return", Gauge, "mario_recent_episodes_return", "Mean game return of the newest training episodes.", row="mean_return", tag="episodes/mean_return"),
        _M("recent_max_x", Gauge, "mario_recent_episodes_max_x", "Mean max x of the newest training episodes.", row="mean_max_x", tag="episodes/mean_max_x"),
        _M("recent_flag_rate", Gauge, "mario_recent_episodes_flag_rate", "Flag rate of the newest training episodes.", row="flag_rate", tag="episodes/flag_rate"),
        # --- levels: the newest 50 training episodes of each (learner/levels.py WINDOW) ---
        _M("level_progress", Gauge, "mario_level_progress", "Mean progress of the level's newest training episodes (0-1).", ("level",), row="progress", tag="level/{level}/progress"),
        _M("level_flag_rate", Gauge, "mario_level_flag_rate", "Flag rate of the level's newest training episodes.", ("level",), row="flag_rate", tag="level/{level}/flag_rate"),
        _M("level_end_x", Gauge, "mario_level_end_x", "Where most of the level's newest training episodes that took no flag ended: the median max x of the 100-wide bin of x holding the most of them (a level's wall shows here).", ("level",), row="end_x", tag="level/{level}/end_x"),
        # a collapse: each level's best full window so far in the run (the checkpoint keeps it) and
        # the fall of its window now from it (0 until the window is full)
        _M("level_progress_best", Gauge, "mario_level_progress_best", "Best mean progress of a full window of the level's newest training episodes so far in the run (0-1).", ("level",), row="progress_best", tag="level/{level}/progress_best"),
        _M("level_progress_fall", Gauge, "mario_level_progress_fall", "How far the level's newest training episodes' mean progress lies below its best (mario_level_progress_best); a collapse shows here.", ("level",), row="progress_fall", tag="level/{level}/progress_fall"),
        _M("level_flag_rate_best", Gauge, "mario_level_flag_rate_best", "Best flag rate of a full window of the level's newest training episodes so far in the run.", ("level",), row="flag_rate_best", tag="level/{level}/flag_rate_best"),
        _M("level_flag_rate_fall", Gauge, "mario_level_flag_rate_fall", "How far the level's newest training episodes' flag rate lies below its best (mario_level_flag_rate_best); a collapse shows here.", ("level",), row="flag_rate_fall", tag="level/{level}/flag_rate_fall"),
        _M("level_advantage_std", Gauge, "mario_level_advantage_std", "Std of the level's advantages in the last update, before their normalisation (scaled reward units).", ("level",), row="advantage_std", tag="level/{level}/advantage_std"),
        _M("level_entropy", Gauge, "mario_level_policy_entropy", "The policy's mean entropy on the level's steps in the last update (nats; ln of the actions at uniform).", ("level",), row="entropy", tag="level/{level}/entropy"),
        # the mean over the set, each level with a figure alike (0 before the first)
        _M("levels_progress", Gauge, "mario_levels_mean_progress", "Mean over the run's levels of their newest training episodes' progress.", tag="levels/mean_progress"),
        _M("levels_flag_rate", Gauge, "mario_levels_mean_flag_rate", "Mean over the run's levels of their newest training episodes' flag rate.", tag="levels/mean_flag_rate"),
        # --- replay ---
        _M("replay_size", Gauge, "mario_replay_size_sequences", "Sequences in replay.", row="replay_size"),
        _M("replay_capacity", Gauge, "mario_replay_capacity_sequences", "Sequences replay can hold."),
        _M("replay_sample_insert_ratio", Gauge, "mario_replay_sample_insert_ratio", "Sequences sampled per sequence inserted.", row="replay_sample_insert_ratio"),
        # Not `quantile`: Prometheus reserves that label for summaries (promtool rejects it).
        _M("replay_priority", Gauge, "mario_replay_priority", "Replay priority distribution (p50|p90|p99|max).", ("stat",)),
        _M("replay_sample_seconds", Histogram, "mario_replay_sample_seconds", "Duration of one replay sample.", buckets=REPLAY_SAMPLE_BUCKETS),
        _M("replay_skipped", Counter, "mario_replay_skipped", "Replay sequences the sample/insert rate limiter left out."),
        # --- lifecycle ---
        _M("checkpoints", Counter, "mario_learner_checkpoints", "Checkpoints written."),
        _M("last_checkpoint_timestamp", Gauge, "mario_learner_last_checkpoint_timestamp_seconds", "Unix time of the last checkpoint."),
        _M("start_time", Gauge, "mario_learner_start_time_seconds", "Unix time the learner started serving (sockets bound, checkpoint loaded)."),
        _M("build_info", Info, "mario_build", "Version, device and CPU architecture."),
    ))
    # fmt: on

    def __init__(self, registry: CollectorRegistry | None = None, *, levels: Iterable[str] = ()):
        super().__init__(registry, levels=levels)
        self.start_time.set_to_current_time()
        self.set_build_info("unknown")  # until the learner knows its device

    def set_build_info(self, device: str) -> None:
        """Set `mario_build_info{version, device, arch}`; device e.g. "cuda" or "cpu"."""
        try:
            version = importlib.metadata.version("mario-impala")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        self.build_info.info({"version": version, "device": device, "arch": platform.machine()})

    def record(self, figures: Mapping[str, Figure]) -> dict[str, Figure]:
        """Set the gauges of `figures` ({attr: figure}); return every gauge that names a row key
        or a tag, by attr, as `figures` gives it (None kept) or else as it stands."""
        table = {m.attr: m for m in self.TABLE}
        for attr, figure in figures.items():
            if table[attr].kind is not Gauge:  # KeyError: not declared
                raise TypeError(f"{attr} is not a gauge: only gauges are recorded")
            gauge = getattr(self, attr)
            values = figure.items() if isinstance(figure, Mapping) else [((), figure)]
            for label, value in values:
                if value is not None:  # no figure: the gauge keeps its last
                    (gauge.labels(label) if label else gauge).set(value)
        out: dict[str, Figure] = {}
        for m in self.TABLE:
            if not (m.row or m.tag):
                continue
            if not m.labels:
                out[m.attr] = figures.get(m.attr, self.registry.get_sample_value(m.name))
                continue
            label = m.labels[0]
            given = figures.get(m.attr) or {}
            out[m.attr] = {
                v: given[v] if v in given else self.registry.get_sample_value(m.name, {label: v})
                for v in dict.fromkeys([*self.known[label], *given])
            }
        return out

    def reject(self, reason: str) -> None:
        """Count a dropped message; a reason outside REJECT_REASONS counts as "other"."""
        self.messages_rejected.labels(reason if reason in REJECT_REASONS else "other").inc()

    def observe_episode(
        self,
        level: str,
        outcome: str,
        episode_return: float,
        max_x: float,
        length_steps: int,
        progress: float | None = None,
    ) -> None:
        """One finished episode; `progress` None (a level of unknown length) is left out."""
        if progress is not None:
            self.episode_progress.labels(level).observe(progress)
        self.episode_return.labels(level).observe(episode_return)
        self.episode_max_x.labels(level).observe(max_x)
        self.episode_length.labels(level).observe(length_steps)
        self.episodes.labels(level, _outcome(outcome)).inc()


# GPU telemetry, read from NVML at each scrape by learner/gpu.py's collector, which adds it to the
# learner's registry on a GPU; `gpu` is the NVML index.
# fmt: off
GPU_TABLE = (
    _M("gpu_utilization", Gauge, "mario_gpu_utilization_ratio", "Share of the last NVML sample period during which a kernel ran on the GPU (0-1).", ("gpu",)),
    _M("gpu_memory_used", Gauge, "mario_gpu_memory_used_bytes", "GPU memory in use, by any process.", ("gpu",)),
    _M("gpu_memory_total", Gauge, "mario_gpu_memory_total_bytes", "GPU memory installed.", ("gpu",)),
    _M("gpu_power", Gauge, "mario_gpu_power_watts", "GPU board power draw.", ("gpu",)),
)
# fmt: on


class ActorMetrics(_Metrics):
    """One actor process's metrics."""

    # fmt: off
    TABLE = (
        _M("env_frames", Counter, "mario_actor_env_frames", "NES frames emulated."),
        _M("agent_steps", Counter, "mario_actor_agent_steps", "Agent steps taken."),
        _M("agent_steps_per_second", Gauge, "mario_actor_agent_steps_per_second", "Agent steps per second, recently."),
        _M("env_build_seconds", Histogram, "mario_actor_env_build_seconds", "Time to build an env.", buckets=ENV_BUILD_BUCKETS),
        _M("env_build_failures", Counter, "mario_actor_env_build_failures", "Env build attempts that failed."),
        _M("inference_seconds", Counter, "mario_actor_inference_seconds", "Time spent in policy inference."),
        _M("step_seconds", Counter, "mario_actor_step_seconds", "Time stepping envs."),
        _M("flow_control_wait_seconds", Counter, "mario_actor_flow_control_wait_seconds", "Time blocked waiting for a send credit."),
        _M("policy_version", Gauge, "mario_actor_policy_version", "Acting policy version."),
        _M("episodes", Counter, "mario_actor_episodes", "Finished episodes (frontier starts too).", ("level", "outcome")),
        _M("frontier_cells", Gauge, "mario_actor_frontier_cells", "Frontier snapshots held by this actor's envs, all levels (~255 KiB each; per env at most 16 a level and a trail of 6)."),
        _M("chunks_sent", Counter, "mario_actor_chunks_sent", "Chunks sent."),
        _M("reconnects", Counter, "mario_actor_reconnects", "New sessions with the learner: after a silence, or a learner that forgot this actor."),
        _M("credits", Gauge, "mario_actor_credits", "Send credits in hand."),
        _M("connected", Gauge, "mario_actor_connected", "1 while the learner answers."),
        _M("registered_time", Gauge, "mario_actor_registered_timestamp_seconds", "Unix time the learner last accepted this actor's registration."),
        _M("last_chunk_time", Gauge, "mario_actor_last_chunk_timestamp_seconds", "Unix time the last chunk was sent."),
        _M("last_credit_time", Gauge, "mario_actor_last_credit_timestamp_seconds", "Unix time the learner last granted a credit, for a chunk it received."),
        _M("last_ack_time", Gauge, "mario_actor_last_ack_timestamp_seconds", "Unix time the learner last acknowledged a chunk it received (with a credit, or owing it while its queue is full)."),
        _M("weights_requests", Counter, "mario_actor_weights_requests", "Weights asked of the learner over this actor's own connection because broadcasts stopped."),
        _M("weights_taken", Counter, "mario_actor_weights_taken", "Newer weights loaded into the acting policy, by the path they came on: the learner's broadcast, or this actor's own connection.", ("via",)),
    )
    # fmt: on

    def count_episode(self, level: str, outcome: str) -> None:
        """Count one finished episode; an outcome outside OUTCOMES counts as "other"."""
        self.episodes.labels(level, _outcome(outcome)).inc()


class RelayMetrics(_Metrics):
    """A weight relay's metrics (actor/relay.py)."""

    # fmt: off
    TABLE = (
        _M("weights", Counter, "mario_relay_weights", "Weight messages forwarded to this host's actors."),
        _M("weights_bytes", Counter, "mario_relay_weights_bytes", "Bytes of weight messages forwarded (once; the PUB copies them per actor)."),
        _M("dropped", Counter, "mario_relay_dropped", "Messages from the learner dropped: malformed, or not weights."),
        _M("policy_version", Gauge, "mario_relay_policy_version", "Policy version of the newest weights forwarded."),
        _M("last_weights_time", Gauge, "mario_relay_last_weights_timestamp_seconds", "Unix time the newest weights were forwarded."),
    )
    # fmt: on


class EvalMetrics(_Metrics):
    """The eval actor's metrics, all of perturbed episodes (common.env_spec.PERTURBATION): per
    level and policy, means over its last episodes; the score that keeps the best (actor/best.py)."""

    # fmt: off
    TABLE = (
        _M("max_x", Gauge, "mario_eval_max_x", "Mean max x position of the last perturbed eval episodes.", ("level", "policy")),
        _M("median_max_x", Gauge, "mario_eval_median_max_x", "Median max x position of the last perturbed eval episodes.", ("level", "policy")),
        _M("flag_rate", Gauge, "mario_eval_flag_rate", "Share of the last perturbed eval episodes reaching the flag.", ("level", "policy")),
        _M("episode_return", Gauge, "mario_eval_return", "Mean game return of the last perturbed eval episodes.", ("level", "policy")),
        _M("episodes", Counter, "mario_eval_episodes", "Perturbed eval episodes played.", ("level", "policy")),
        _M("policy_version", Gauge, "mario_eval_policy_version", "Policy of the newest perturbed eval episode.", ("level", "policy")),
        _M("best_max_x", Gauge, "mario_eval_best_max_x", "Best mean max x of the last perturbed eval episodes so far.", ("level", "policy")),
        _M("progress", Gauge, "mario_eval_progress", "Mean progress of the last perturbed eval episodes: max x as a share of the level's length (0-1; levels of known length only).", ("level", "policy")),
        _M("score", Gauge, "mario_eval_score", "The policy's score: mean over levels of the mean progress of each level's last perturbed sampled eval episodes (mean max x for a level of unknown length); NaN until every level's window is full."),
        _M("best_score", Gauge, "mario_eval_best_score", "Score of the best policy kept (RUN/eval/best-policy.pt): its mean over the fresh episodes of its latest challenge (actor/best.py); NaN before the first."),
        _M("best_policy_version", Gauge, "mario_eval_best_policy_version", "Policy version of the best policy kept; -1 before the first."),
        _M("bests", Counter, "mario_eval_bests", "Best policies written (each won a challenge against the one before)."),
    )
    # fmt: on

    def __init__(self, registry: CollectorRegistry | None = None, *, levels: Iterable[str] = ()):
        super().__init__(registry, levels=levels)
        self.score.set(float("nan"))  # not 0: no figure yet is not a collapse
        self.best_score.set(float("nan"))
        self.best_policy_version.set(-1)


class ProcessMetrics(_Metrics):
    """Who serves a page (`add_process_metrics`), so that a reader (`make train`'s status line)
    tells its own run's processes from another run's on a port it expected."""

    # fmt: off
    TABLE = (
        _M("process", Info, "mario_process", "Who serves this page: role (learner, actor, eval, relay), pid, run_id (--run-id) and run_dir (the learner's; empty elsewhere)."),
        _M("heap_in_use", Gauge, "mario_process_heap_in_use_bytes", "C heap held by live allocations (glibc mallinfo2: chunks in use plus blocks mapped on their own), read at each scrape; NaN off glibc 2.33+. Resident memory that grows while this stays flat is the allocator keeping freed memory, not a leak."),
        _M("heap_free", Gauge, "mario_process_heap_free_bytes", "C heap free in the allocator's arenas, kept for later allocations (glibc mallinfo2), read at each scrape; NaN off glibc 2.33+."),
    )
    # fmt: on


def _heap_bytes(field: str) -> float:
    now = heap.heap()
    return float("nan") if now is None else float(getattr(now, field))


def _outcome(outcome: str) -> str:
    return outcome if outcome in OUTCOMES else "other"


def add_process_metrics(
    registry: CollectorRegistry, role: str, run_id: str = "", run_dir: str = ""
) -> None:
    """Add `ProcessMetrics` (who serves the page, the C heap) and the standard `process_*` and
    `python_*` metrics (CPU, memory, GC)."""
    info = {"role": role, "pid": str(os.getpid()), "run_id": run_id, "run_dir": run_dir}
    metrics = ProcessMetrics(registry)
    metrics.process.info(info)
    for gauge, field in ((metrics.heap_in_use, "in_use"), (metrics.heap_free, "free")):
        gauge.set_function(lambda field=field: _heap_bytes(field))
    for collector in (ProcessCollector, PlatformCollector, GCCollector):
        collector(registry=registry)


# --- exporter ---


@dataclass(frozen=True)
class MetricsServer:
    """A running /metrics endpoint; `port` is the bound port (useful when asked for port 0)."""

    server: WSGIServer
    thread: Thread
    port: int

    def close(self, timeout_s: float = 5.0) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout_s)


class MetricsPortError(RuntimeError):
    """The /metrics server cannot listen on its address."""


def serve(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Serve `registry` at http://host:port/metrics from a daemon thread (MetricsPortError,
    naming the flag to change, when the address cannot be bound)."""
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsPortError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; pass another "
            "--metrics-port (0 turns metrics off) or --metrics-host, or stop the process using it"
        ) from None
    return MetricsServer(server, thread, server.server_port)
