"""What the train loop reports: Prometheus metrics after every batch and update, and every few
seconds a row of RUN/metrics.jsonl, the new episodes' rows of RUN/episodes.jsonl and, when asked
for, the one-line status on stderr.

Losses and other device tensors are read only every RECORD_EVERY_S: reading one waits for the
device to finish its queued work, which would stall a GPU learner after every update.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from common import status
from common.levels import progress
from common.metrics import LearnerMetrics, RateWindow
from common.rundir import RunDir, append_lines
from common.wire import EpisodeStats
from learner.checkpoint import Totals
from learner.ingest import HostChunk, Ingest
from learner.levels import LevelStats
from learner.mixing import ReplayMixer
from learner.tensorboard import ScalarLog
from learner.update import Learner, UpdateStats

RECORD_EVERY_S = 2.0


class Telemetry:
    def __init__(
        self,
        metrics: LearnerMetrics,
        run: RunDir,
        learner: Learner,
        mixer: ReplayMixer | None,
        ingest: Ingest,
        status_interval_s: float,
        levels: LevelStats | None = None,
        tensorboard: ScalarLog | None = None,
    ):
        self.metrics = metrics
        self.run = run
        self.learner = learner
        self.mixer = mixer
        self.ingest = ingest
        self.status_interval_s = status_interval_s  # 0: no status line
        self.levels = levels
        self.tensorboard = tensorboard  # --tensorboard: each metrics.jsonl row as scalars too
        self.rate = RateWindow(30.0)  # fresh agent steps
        self.replay_rate = RateWindow(30.0)  # replayed agent steps
        self._skipped_reported = 0
        self._status_window = status.StatusWindow()
        self._last_record = self._last_status = time.monotonic()

    def started(self, totals: Totals) -> None:
        """The learner serves from now on: t = 0 of its learning curves."""
        self.metrics.start_time.set_to_current_time()
        self._last_record = self._last_status = time.monotonic()
        start = {"event": "start", "time": time.time(), "env_frames": totals.env_frames}
        append_lines(self.run.episodes, [json.dumps(start)])

    def took(self, chunks: list[HostChunk], wait_s: float) -> None:
        """A batch of `chunks`, taken after waiting `wait_s` for it."""
        m, version, now = self.metrics, self.learner.updates, time.time()
        m.wait_seconds.inc(wait_s)
        m.batch_chunks.observe(len(chunks))
        for c in chunks:
            m.policy_lag.observe(version - c.policy_version)
            m.chunk_latency.observe(max(0.0, now - c.send_time))

    def updated(
        self,
        stats: UpdateStats,
        totals: Totals,
        steps: int,
        replayed: int,
        frames: int,
        compute_s: float,
    ) -> None:
        """One update of `steps` fresh and `replayed` replayed agent steps (`frames` NES frames
        fresh), computed in `compute_s`; the run's totals now `totals`."""
        m = self.metrics
        self.rate.add(steps)
        if self.mixer is not None:
            m.samples.labels("replay").inc(replayed)
            self.replay_rate.add(replayed)
        m.epochs.set(stats.epochs)
        m.compute_seconds.inc(compute_s)
        m.update_seconds.observe(compute_s)
        m.updates.inc()
        m.sgd_steps.inc(stats.sgd_steps)
        m.agent_steps.inc(steps)
        m.env_frames.inc(frames)
        m.run_env_frames.set(totals.env_frames)
        m.samples.labels("fresh").inc(steps)
        m.policy_version.set(self.learner.updates)
        now = time.monotonic()
        if now - self._last_record >= RECORD_EVERY_S:
            self._record(stats, totals)
            self._log_episodes(totals)
            self._last_record = now
        if self.status_interval_s and now - self._last_status >= self.status_interval_s:
            line = self._status_window.line(status.flatten(m.registry.collect()))
            sys.stderr.write("\r" + line + "   ")
            sys.stderr.flush()
            self._last_status = now

    def checkpointed(self) -> None:
        self.metrics.checkpoints.inc()
        self.metrics.last_checkpoint_timestamp.set_to_current_time()

    def close(self) -> None:
        if self.status_interval_s:
            sys.stderr.write("\n")  # the status line ends
        if self.tensorboard is not None:
            self.tensorboard.close()

    def _record(self, stats: UpdateStats, totals: Totals) -> None:
        """The last update's losses, the rates and replay's state: as metrics and as a row of
        RUN/metrics.jsonl."""
        m, eps = self.metrics, list(self.ingest.episodes)
        loss = {k: float(getattr(stats, k)) for k in ("total_loss", "pg_loss", "baseline_loss")}
        entropy, grad_norm = float(stats.entropy), float(stats.grad_norm)
        clip_fraction, value_scale = float(stats.clip_fraction), self.learner.popart.scale()
        sps = self.rate.rate()
        m.loss.labels("total").set(loss["total_loss"])
        m.loss.labels("policy").set(loss["pg_loss"])
        m.loss.labels("baseline").set(loss["baseline_loss"])
        m.loss.labels("entropy").set(-entropy)
        m.entropy.set(entropy)
        m.grad_norm.set(grad_norm)
        m.clip_fraction.set(clip_fraction)
        m.value_scale.set(value_scale)
        m.learning_rate.set(self.learner.learning_rate)
        m.agent_steps_per_second.set(sps)
        m.samples_per_second.labels("fresh").set(sps)
        row = {"time": time.time(), "updates": self.learner.updates}
        row |= {"env_frames": totals.env_frames, "agent_steps": totals.agent_steps}
        row |= {"agent_steps_per_s": sps, "mean_return": _mean(eps, "episode_return")}
        row |= {"mean_max_x": _mean(eps, "max_x"), "flag_rate": _mean(eps, "flag")}
        row |= {"entropy": entropy, "grad_norm": grad_norm, "clip_fraction": clip_fraction}
        row |= {"epochs": stats.epochs, "value_scale": value_scale}
        row |= {"learning_rate": self.learner.learning_rate}
        row |= {"sgd_steps": self.learner.sgd_steps, **loss, **self._record_replay()}
        row |= self._record_levels(stats)
        append_lines(self.run.metrics, [json.dumps(row)])
        if self.tensorboard is not None:
            self.tensorboard.write(row)

    def _record_replay(self) -> dict[str, float]:
        """Replay's metrics set; its part of the metrics.jsonl row ({} without replay)."""
        if self.mixer is None:
            return {}
        m, r = self.metrics, self.mixer.replay
        m.replay_size.set(r.size)
        m.replay_sample_insert_ratio.set(self.mixer.sample_insert_ratio)
        m.replay_skipped.inc(self.mixer.skipped - self._skipped_reported)
        self._skipped_reported = self.mixer.skipped
        m.samples_per_second.labels("replay").set(self.replay_rate.rate())
        if r.size:
            q = r.priority_quantiles([0.5, 0.9, 0.99, 1.0]).tolist()
            for stat, v in zip(("p50", "p90", "p99", "max"), q, strict=True):
                m.replay_priority.labels(stat).set(v)
        return {"replay_size": r.size, "replay_sample_insert_ratio": self.mixer.sample_insert_ratio}

    def _record_levels(self, stats: UpdateStats) -> dict[str, dict]:
        """Each level's window statistics, schedule weight and the last update's advantage
        scale and policy entropy as gauges; their part of the metrics.jsonl row: {"levels":
        {level: {"progress", "flag_rate", "weight", "advantage_std", "entropy"}}}."""
        if self.levels is None:
            return {}
        m, weight = self.metrics, 1.0 / len(self.levels.levels)  # actors draw levels uniformly
        steps, adv_std = stats.level_steps.tolist(), stats.level_advantage_std.tolist()
        entropy = stats.level_entropy.tolist()
        out = {}
        for i, (level, s) in enumerate(self.levels.summary().items()):
            if s.progress is not None:
                m.level_progress.labels(level).set(s.progress)
            if s.flag_rate is not None:
                m.level_flag_rate.labels(level).set(s.flag_rate)
            m.level_weight.labels(level).set(weight)
            std = adv_std[i] if steps[i] >= 2 else None  # the learner's set order (index_table)
            if std is not None:
                m.level_advantage_std.labels(level).set(std)
            h = entropy[i] if steps[i] >= 1 else None
            if h is not None:
                m.level_entropy.labels(level).set(h)
            out[level] = {"progress": s.progress, "flag_rate": s.flag_rate, "weight": weight}
            out[level] |= {"advantage_std": std, "entropy": h}
        return {"levels": out}

    def _log_episodes(self, totals: Totals) -> None:
        """Append every newly reported training episode to RUN/episodes.jsonl (learning curves)."""
        rows = []
        for t, actor_id, e in self.ingest.drain_episodes():
            row = {"time": t, "env_frames": totals.env_frames, "actor_id": actor_id}
            row |= {"level": e.level, "max_x": e.max_x, "flag": e.flag, "return": e.episode_return}
            row |= {"progress": progress(e.level, e.max_x, e.flag)}
            rows.append(json.dumps(row | {"length": e.length, "outcome": e.outcome}))
        append_lines(self.run.episodes, rows)


def _mean(episodes: list[EpisodeStats], field: str) -> float | None:
    """The mean of one field over `episodes`; None (null in the row) before the first one."""
    return float(np.mean([getattr(e, field) for e in episodes])) if episodes else None
