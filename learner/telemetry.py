"""What the train loop reports: Prometheus metrics after every batch and update, and every
RECORD_EVERY_S a record: a row of RUN/metrics.jsonl (the gauges `LearnerMetrics.record` sets, and
TensorBoard's scalars), the new rows of RUN/episodes.jsonl and, when asked for, the status line.
Device tensors are read only at a record: reading one waits for the device's queued work.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from common import status
from common.levels import progress
from common.metrics import Figure, LearnerMetrics
from common.rates import RateWindow
from common.rundir import RunDir, append_lines
from common.wire import EpisodeStats
from learner.checkpoint import Totals
from learner.ingest import HostChunk, Ingest
from learner.levels import LevelStats
from learner.mixing import ReplayMixer
from learner.tally import UpdateStats
from learner.tensorboard import ScalarLog
from learner.update import Learner

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
        self._totals = Totals(0, 0)
        self._unrecorded: UpdateStats | None = None  # the last update, if no record has it yet

    def started(self, totals: Totals) -> None:
        """The learner serves from now on: t = 0 of its learning curves."""
        self.metrics.start_time.set_to_current_time()
        self.metrics.run_agent_steps.set(totals.agent_steps)
        self.metrics.run_sgd_steps.set(self.learner.sgd_steps)
        self._last_record = self._last_status = time.monotonic()
        self._totals = totals
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
        """An update of `steps` fresh agent steps (`frames` NES frames), `replayed` replayed ones."""
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
        self._totals, self._unrecorded = totals, stats
        now = time.monotonic()
        if now - self._last_record >= RECORD_EVERY_S:
            self._record(stats, totals)
            self._log_episodes(totals)
            self._last_record, self._unrecorded = now, None
        if self.status_interval_s and now - self._last_status >= self.status_interval_s:
            line = self._status_window.line(status.flatten(m.registry.collect()))
            sys.stderr.write("\r" + line + "   ")
            sys.stderr.flush()
            self._last_status = now

    def checkpointed(self) -> None:
        self.metrics.checkpoints.inc()
        self.metrics.last_checkpoint_timestamp.set_to_current_time()

    def close(self) -> None:
        """A last record of what came since the one before: the run's files end where it did."""
        if self._unrecorded is not None:
            self._record(self._unrecorded, self._totals)
        self._log_episodes(self._totals)
        if self.status_interval_s:
            sys.stderr.write("\n")  # the status line ends
        if self.tensorboard is not None:
            self.tensorboard.close()

    def _record(self, stats: UpdateStats, totals: Totals) -> None:
        """The last update's losses, the rates, replay's and the levels' state, as metrics.py says."""
        eps, entropy = list(self.ingest.episodes), float(stats.entropy)
        sps = self.rate.rate()
        figures: dict[str, Figure] = {
            "policy_version": self.learner.updates,
            "run_env_frames": totals.env_frames,
            "run_agent_steps": totals.agent_steps,
            "run_sgd_steps": self.learner.sgd_steps,
            "agent_steps_per_second": sps,
            "samples_per_second": {"fresh": sps},
            "recent_return": _mean(eps, "episode_return"),
            "recent_max_x": _mean(eps, "max_x"),
            "recent_flag_rate": _mean(eps, "flag"),
            "loss": {
                "total": float(stats.total_loss),
                "policy": float(stats.pg_loss),
                "baseline": float(stats.baseline_loss),
                "entropy": -entropy,
            },
            "entropy": entropy,
            "grad_norm": float(stats.grad_norm),
            "clip_fraction": float(stats.clip_fraction),
            "epochs": stats.epochs,
            "value_scale": self.learner.popart.scale(),
            "learning_rate": self.learner.learning_rate,
        }
        figures |= self._replay_figures() | self._level_figures(stats)
        numbers, now = self.metrics.record(figures), time.time()
        append_lines(self.run.metrics, [json.dumps(metrics_row(numbers, now))])
        if self.tensorboard is not None:
            self.tensorboard.write(numbers, now)

    def _replay_figures(self) -> dict[str, Figure]:
        """Replay's state ({} without replay); the counter of skipped sequences moved on."""
        if self.mixer is None:
            return {}
        m, r = self.metrics, self.mixer.replay
        m.replay_skipped.inc(self.mixer.skipped - self._skipped_reported)
        self._skipped_reported = self.mixer.skipped
        out: dict[str, Figure] = {
            "replay_size": r.size,
            "replay_sample_insert_ratio": self.mixer.sample_insert_ratio,
            "samples_per_second": {"replay": self.replay_rate.rate()},
        }
        if r.size:
            q = r.priority_quantiles([0.5, 0.9, 0.99, 1.0]).tolist()
            out["replay_priority"] = dict(zip(("p50", "p90", "p99", "max"), q, strict=True))
        return out

    def _level_figures(self, stats: UpdateStats) -> dict[str, Figure]:
        """Each level's window statistics, its best and the fall from it, and the last update's
        advantage scale and policy entropy (None: no figure), and the means over the set."""
        if self.levels is None:
            return {}
        summary = self.levels.summary()
        steps, adv_std = stats.level_steps.tolist(), stats.level_advantage_std.tolist()
        entropy = stats.level_entropy.tolist()
        names = [f"level_{k}" for k in ("progress", "flag_rate", "advantage_std", "entropy")]
        names += ["level_end_x"]
        names += [f"level_{k}_{w}" for k in ("progress", "flag_rate") for w in ("best", "fall")]
        out: dict[str, dict[str, float | None]] = {name: {} for name in names}
        for i, (level, s) in enumerate(summary.items()):  # i: the learner's set order
            out["level_progress"][level] = s.progress
            out["level_flag_rate"][level] = s.flag_rate
            out["level_progress_best"][level] = s.best_progress
            out["level_flag_rate_best"][level] = s.best_flag_rate
            out["level_progress_fall"][level] = s.progress_fall  # None until the window is full
            out["level_flag_rate_fall"][level] = s.flag_rate_fall
            out["level_advantage_std"][level] = adv_std[i] if steps[i] >= 2 else None
            out["level_entropy"][level] = entropy[i] if steps[i] >= 1 else None
            out["level_end_x"][level] = s.end_x
        return out | {
            "levels_progress": _mean_of(out["level_progress"].values()),
            "levels_flag_rate": _mean_of(out["level_flag_rate"].values()),
        }

    def _log_episodes(self, totals: Totals) -> None:
        """Append every newly reported training episode to RUN/episodes.jsonl (learning curves)."""
        rows = []
        for t, actor_id, e in self.ingest.drain_episodes():
            row = {"time": t, "env_frames": totals.env_frames, "actor_id": actor_id}
            row |= {"level": e.level, "max_x": e.max_x, "flag": e.flag, "return": e.episode_return}
            row |= {"progress": progress(e.level, e.max_x, e.flag)}
            row |= {"length": e.length, "outcome": e.outcome, "start_x": e.start_x}
            rows.append(json.dumps(row))
        append_lines(self.run.episodes, rows)


def metrics_row(numbers: dict[str, Figure], time_s: float) -> dict[str, Any]:
    """A row of RUN/metrics.jsonl: `time_s`, then each number of `LearnerMetrics.record` under the
    key its metric declares (common/metrics.py's `row`); None is null."""
    row: dict[str, Any] = {"time": time_s}
    for m in LearnerMetrics.TABLE:
        if not m.row or m.attr not in numbers:
            continue
        value = numbers[m.attr]
        if not isinstance(value, Mapping):
            row[m.row] = value
        elif m.labels == ("level",):
            for level, v in value.items():
                row.setdefault("levels", {}).setdefault(level, {})[m.row] = v
        else:
            assert isinstance(m.row, Mapping)
            row |= {m.row[k]: v for k, v in value.items() if k in m.row}
    return row


def _mean(episodes: list[EpisodeStats], field: str) -> float | None:
    """The mean of one field over `episodes`; None (null in the row) before the first one."""
    return _mean_of(getattr(e, field) for e in episodes)


def _mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None; None when there is none."""
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None
