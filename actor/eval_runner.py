"""`python -m actor --eval`: greedy and sampled episodes with the newest weights, judged while
training runs.

The eval actor registers like any actor (it builds the network the learner's Welcome names and
receives its weight broadcasts) but sends no chunks.
Every `eval_interval_s` it plays `eval_episodes` greedy episodes (argmax actions: deterministic on
the fixed start state, so one is enough) and then `eval_sampled_episodes` sampled ones (actions
drawn from the policy, as the actors play, from a generator seeded by `--seed` and the actor id)
with the newest policy, applied between episodes. It exports `mario_eval_*` metrics per level and
policy (means and the median over each policy's last `eval_window` episodes), and keeps the video
and summary of its best episode so far, of either policy, in `eval_dir` (best-<level>.mp4 /
.json). Between evaluations it only keeps the connection alive, so it costs little CPU.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections import deque
from fractions import Fraction
from pathlib import Path

import torch

from actor.config import ActorConfig
from actor.evaluation import (
    NES_FPS,
    Policy,
    make_policy,
    play_episode,
    screen_rgb,
    seeded_generator,
    write_video,
)
from actor.link import link_for, load_weights, welcomed_spec
from common import wire
from common.env import EpisodeSummary, build_envs
from common.metrics import EvalMetrics
from common.model import ActorCritic
from common.rundir import atomic_write

log = logging.getLogger("actor.eval")


class EvalRunner:
    def __init__(self, cfg: ActorConfig, metrics: EvalMetrics, instance_id: str):
        self.cfg = cfg
        self.metrics = metrics
        self.out_dir = Path(cfg.eval_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        spec = cfg.env_spec()
        self.env = build_envs(spec, 1, timeout_s=cfg.build_timeout_s, retries=cfg.build_retries)[0]
        self.counts = {"greedy": cfg.eval_episodes, "sampled": cfg.eval_sampled_episodes}
        self.windows = {name: deque(maxlen=cfg.eval_window) for name in self.counts}
        self.best_mean_max_x = dict.fromkeys(self.windows, 0.0)
        self.best: tuple[int, float] | None = None  # (max_x, return) of the best episode so far
        for name, count in self.counts.items():
            if count:  # rate() sees each played policy's series from zero
                metrics.episodes.labels(cfg.level, name)
        self.model: ActorCritic | None = None  # from the learner's Welcome
        self.policies: dict[str, Policy] = {}  # greedy and sampled play of that model
        self._pending: wire.Weights | None = None
        self.version = -1
        self.stopping = False
        self.link = link_for(cfg, instance_id, 1, self._on_weights, self._on_welcome)

    def _on_welcome(self, welcome: wire.Welcome) -> None:
        """Build the learner's network, unless it is the one already built; the episode in
        progress finishes with the network it started with."""
        spec = welcomed_spec(welcome, self.env.num_actions)
        if self.model is not None and spec == self.model.spec:
            return
        self.model = ActorCritic(spec).eval()
        sampler = seeded_generator(self.cfg.seed, self.cfg.actor_id)  # reproducible episodes
        self.policies = {
            "greedy": make_policy(self.model, greedy=True),
            "sampled": make_policy(self.model, greedy=False, generator=sampler),
        }
        self._pending = None  # the old network's weights

    def _on_weights(self, weights: wire.Weights) -> None:
        self._pending = weights  # applied between episodes, never in the middle of one

    def _apply_pending(self) -> None:
        if self._pending is not None:
            load_weights(self.model, self._pending)
            self.version = self._pending.policy_version
            self._pending = None

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        level = self.cfg.level
        next_eval = time.monotonic()
        while not self.stopping:
            self.link.poll(timeout_ms=100)
            if time.monotonic() < next_eval:
                continue
            next_eval = time.monotonic() + self.cfg.eval_interval_s
            for policy_name, count in self.counts.items():  # greedy first, then sampled
                for _ in range(count):
                    # the first weights, and a new network's (after a re-registration)
                    if self.stopping or not self.link.wait_for_weights(lambda: self.stopping):
                        return 0
                    self._apply_pending()
                    frames: list = []

                    def on_frame(frames: list = frames) -> None:
                        frames.append(screen_rgb(self.env))
                        self.link.poll(0)  # heartbeats and weights keep flowing meanwhile

                    with torch.inference_mode():
                        episode = play_episode(
                            self.env, self.policies[policy_name], on_frame=on_frame
                        )
                    self._record(level, policy_name, episode, frames)
        return 0

    def _record(self, level: str, policy: str, episode: EpisodeSummary, frames: list) -> None:
        m = self.metrics
        window = self.windows[policy]
        window.append(episode)
        n = len(window)
        mean_max_x = sum(e.max_x for e in window) / n
        self.best_mean_max_x[policy] = max(self.best_mean_max_x[policy], mean_max_x)
        m.episodes.labels(level, policy).inc()
        m.max_x.labels(level, policy).set(mean_max_x)
        m.median_max_x.labels(level, policy).set(statistics.median(e.max_x for e in window))
        m.flag_rate.labels(level, policy).set(sum(e.flag for e in window) / n)
        m.episode_return.labels(level, policy).set(sum(e.episode_return for e in window) / n)
        m.policy_version.labels(level, policy).set(self.version)
        m.best_max_x.labels(level, policy).set(self.best_mean_max_x[policy])
        log.info(
            "eval v%d %s %s: max x %d, return %.0f, %s after %d steps",
            self.version, level, policy, episode.max_x, episode.episode_return, episode.outcome,
            episode.length,
        )  # fmt: skip
        key = (episode.max_x, episode.episode_return)
        if self.best is None or key > self.best:
            self.best = key
            name = f"best-{level.replace(':', '_').replace('/', '_')}"
            fps = Fraction(NES_FPS, self.cfg.frame_skip)
            write_video(self.out_dir / f"{name}.mp4", frames, fps)
            summary = {**episode._asdict(), "policy": policy, "policy_version": self.version}
            summary["frames"] = len(frames)
            atomic_write(
                self.out_dir / f"{name}.json", (json.dumps(summary, indent=2) + "\n").encode()
            )

    def close(self) -> None:
        self.link.close()
