"""`python -m actor.eval`: the eval actor, greedy and sampled episodes with the newest weights,
played perturbed and judged while training runs; it keeps the best policy.

It registers like an actor (the network and envs of the learner's Welcome, its weight broadcasts)
but sends no chunks; it takes the flags of the link to the learner that the training actor takes,
and its own `--eval-*` (actor/config.py's EvalConfig). Every `eval_interval_s` it plays
one level of the set in turn, through the training actor's own path (actor/evaluation.py),
perturbed and from the level's start; it exports `mario_eval_*` per level and policy, keeps each
level's best episode and the best policy: a window score above the kept one's nominates the
policy, which then plays fresh episodes against the kept policy (actor/best.py has the rule).
docs/EVALUATION.md, "The eval actor".
"""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
import sys
import time
import uuid
from collections import deque
from fractions import Fraction
from pathlib import Path

import numpy as np

from actor.best import BestKeeper, Score, challenge_plan, episodes_score, policy_score
from actor.config import EvalConfig
from actor.evaluation import (
    NES_FPS,
    Episode,
    EpisodePlayer,
    Policy,
    model_policy,
    perturbed,
    write_video,
)
from actor.link import check_num_actions, link_for, load_weights, welcomed_specs
from actor.main import run_process
from common import config as config_io
from common import wire
from common.env import EpisodeSummary, FrameEnv, build_envs
from common.env_spec import EnvSpec
from common.levels import progress
from common.metrics import EvalMetrics
from common.model import ActorCritic
from common.rundir import BEST_POLICY, RunDirError, atomic_write, make_writable

log = logging.getLogger("actor.eval")


# The EvalMetrics set for every (level, policy); `progress` too where the level's length is known
_SERIES = ("episodes", "max_x", "median_max_x", "flag_rate", "episode_return", "policy_version",
           "best_max_x")  # fmt: skip


class EvalActor:
    def __init__(self, cfg: EvalConfig, metrics: EvalMetrics, instance_id: str):
        self.cfg = cfg
        self.metrics = metrics
        self.out_dir = Path(cfg.eval_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.spec: EnvSpec | None = None  # the learner's, from its Welcome
        self._welcomed_spec: EnvSpec | None = None  # taken up between evaluations
        self.levels: tuple[str, ...] = ()
        self.envs: dict[str, FrameEnv] = {}  # level -> its env, built at the level's first turn
        self.players: dict[str, EpisodePlayer] = {}  # level -> its env's player, for the model
        self.counts = {"greedy": cfg.eval_episodes, "sampled": cfg.eval_sampled_episodes}
        self.judge = "sampled" if self.counts["sampled"] else "greedy"  # the policy that scores
        # level -> its judging episodes since the last challenge: a window nominates once
        self.unjudged: dict[str, int] = {}
        # (level, policy) -> its last episodes, and the best of their mean max x so far
        self.windows: dict[tuple[str, str], deque[EpisodeSummary]] = {}
        self.best_mean_max_x: dict[tuple[str, str], float] = {}
        self.best: dict[str, tuple[int, float]] = {}  # level -> (max_x, return) of its best
        self.model: ActorCritic | None = None  # from the learner's Welcome
        self.policies: dict[str, Policy] = {}  # greedy and sampled play of that model
        self._pending: wire.Weights | None = None
        self.version = -1
        self.env_frames = -1  # the run's env frames at `version`, as its weights say
        self.keeper = BestKeeper(self.out_dir / BEST_POLICY)  # the best so far, if any
        if self.keeper.best is not None:
            metrics.best_score.set(self.keeper.best.score)
            metrics.best_policy_version.set(self.keeper.best.policy_version)
        self.stopping = False
        self.link = link_for(cfg, instance_id, 1, self._on_weights, self._on_welcome)

    def _env(self, level: str) -> FrameEnv:
        """The env of one level of the set, perturbed, built when first asked for."""
        if level not in self.envs:
            one = perturbed(dataclasses.replace(self.spec, level=level))
            cfg = self.cfg
            self.envs[level] = build_envs(
                one, 1, timeout_s=cfg.build_timeout_s, retries=cfg.build_retries,
                seed=(cfg.seed, cfg.actor_id),
            )[0]  # fmt: skip
        return self.envs[level]

    def _player(self, level: str) -> EpisodePlayer:
        if level not in self.players:
            state_size = self.model.spec.state_size
            self.players[level] = EpisodePlayer(self._env(level), state_size)
        return self.players[level]

    def _take_spec(self) -> None:
        """The learner's env spec, taken up between evaluations: each level's series exist from
        then on; the envs of a spec that changed are closed and built again when needed."""
        spec = self._welcomed_spec
        if spec is None or spec == self.spec:
            return
        for env in self.envs.values():
            env.close()
        self.envs, self.players = {}, {}  # the players step the old envs
        self.spec, self.levels = spec, spec.levels
        for level in self.levels:
            self.unjudged.setdefault(level, 0)
            for name in self.counts:
                if (level, name) in self.windows:
                    continue
                self.windows[level, name] = deque(maxlen=self.cfg.eval_window)
                self.best_mean_max_x[level, name] = 0.0
                for series in _SERIES:  # each exists from now on (rate() sees it from zero)
                    getattr(self.metrics, series).labels(level, name)
                if progress(level, 0) is not None:  # no progress series for unknown lengths
                    self.metrics.progress.labels(level, name)
        setting = perturbed(spec)
        log.info("every episode perturbed: sticky actions %g, no-op starts 0..%d",
                 setting.sticky_actions, setting.noop_max)  # fmt: skip
        env = self._env(self.levels[0])  # a build that fails does so before the first turn
        check_num_actions(self.model.spec, env.num_actions)

    def _on_welcome(self, welcome: wire.Welcome) -> None:
        """Build the learner's network, unless it is built already (an episode in progress ends
        with the old one; the envs change between evaluations)."""
        spec, self._welcomed_spec = welcomed_specs(welcome)
        if self.model is not None and spec == self.model.spec:
            return
        self.model = ActorCritic(spec).eval()
        self.sampler = np.random.default_rng([self.cfg.seed, self.cfg.actor_id])  # reproducible
        self.policies = {
            "greedy": model_policy(self.model, greedy=True, rng=self.sampler),
            "sampled": model_policy(self.model, greedy=False, rng=self.sampler),
        }
        self.players = {}  # their lanes hold core states of the old network's size
        self._pending = None  # the old network's weights

    def _on_weights(self, weights: wire.Weights) -> None:
        self._pending = weights  # applied between episodes, never in the middle of one

    def _apply_pending(self) -> None:
        if self._pending is not None:
            load_weights(self.model, self._pending)
            self.version = self._pending.policy_version
            self.env_frames = self._pending.env_frames
            self._pending = None

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        next_eval = time.monotonic()
        turn = 0
        while not self.stopping:
            self.link.poll(timeout_ms=100)
            if time.monotonic() < next_eval:
                continue
            next_eval = time.monotonic() + self.cfg.eval_interval_s
            if not self.link.wait_for_weights(lambda: self.stopping):
                return 0
            self._take_spec()
            level = self.levels[turn % len(self.levels)]  # the levels in turn, one per evaluation
            turn += 1
            if not self._evaluate(level):
                return 0
            self._judge()
        return 0

    def _evaluate(self, level: str) -> bool:
        """One evaluation of `level`: greedy episodes, then sampled ones; False once stopping."""
        for policy_name, count in self.counts.items():  # greedy first, then sampled
            for _ in range(count):
                # the first weights, and a new network's (after a re-registration)
                if self.stopping or not self.link.wait_for_weights(lambda: self.stopping):
                    return False
                self._apply_pending()
                player = self._player(level)  # heartbeats and weights keep flowing meanwhile:
                episode = player.play(self.policies[policy_name], lambda: self.link.poll(0))
                self._record(level, policy_name, episode)
        return True

    def _judge(self) -> None:
        """Score the policy on each level's window of sampled episodes (greedy ones when no
        sampled are played); a score above the kept one's, on windows that nominated no policy
        before, makes the policy a candidate: it is challenged."""
        windows = {level: self.windows[level, self.judge] for level in self.levels}
        s = policy_score(windows, self.cfg.eval_window)
        if s is None:  # a window not yet full
            return
        self.metrics.score.set(s.value)
        refreshed = min(self.unjudged[level] for level in self.levels) >= self.cfg.eval_window
        if refreshed and self.keeper.nominates(s):
            self._challenge(s)

    def _challenge(self, window: Score) -> None:
        """The candidate (the weights being played, which stay as they are until it ends) and
        the kept policy play the same number of fresh episodes of each level; the better mean is
        kept (actor/best.py). Abandoned when the actor stops or the learner's network changes."""
        self.unjudged = dict.fromkeys(self.levels, 0)
        candidate, version, env_frames = self.model, self.version, self.env_frames
        rival = self.keeper.rival(candidate.spec, self.levels)
        plan = challenge_plan(self.levels, self.cfg.eval_challenge_episodes)
        kept = self.keeper.best if rival is not None else None
        log.info(
            "challenge: v%d (window score %.3f) %s, %d fresh %s episodes each", version,
            window.value, f"against the kept v{kept.policy_version} ({kept.score:.3f})" if kept
            else "alone (no comparable best kept)", sum(plan.values()), self.judge,
        )  # fmt: skip
        fresh = self._play_fresh(candidate, plan)
        defended = (
            {} if rival is None or fresh is None else self._play_fresh(rival, plan, candidate)
        )
        if fresh is None or defended is None:
            log.info("challenge of v%d abandoned", version)
            return
        ours = episodes_score(fresh)
        theirs = episodes_score(defended) if defended else None
        setting = perturbed(self.spec)
        judged_by = {"policy": self.judge, "sticky_actions": setting.sticky_actions}
        judged_by["noop_max"] = setting.noop_max
        won = self.keeper.settle(
            ours, theirs, window, candidate, self.spec, version, env_frames, judged_by
        )
        best = self.keeper.best
        self.metrics.best_score.set(best.score)
        self.metrics.best_policy_version.set(best.policy_version)
        if won:
            self.metrics.bests.inc()
        log.info(
            "challenge of v%d: %.3f against %s: %s; best policy v%d, score %.3f, in %s", version,
            ours.value, "nothing kept" if theirs is None else f"{theirs.value:.3f} for the kept",
            "kept" if won else "the kept one stays", best.policy_version, best.score,
            self.keeper.path,
        )  # fmt: skip

    def _play_fresh(
        self, model: ActorCritic, plan: dict[str, int], candidate: ActorCritic | None = None
    ) -> dict[str, list[EpisodeSummary]] | None:
        """`plan[level]` episodes of each level played by `model` as the judging policy plays;
        None once stopping or the learner's network is no longer the candidate's."""
        candidate = candidate or model
        policy = model_policy(model, greedy=self.judge == "greedy", rng=self.sampler)
        played: dict[str, list[EpisodeSummary]] = {}
        for level, n in plan.items():
            played[level] = []
            for _ in range(n):
                if self.stopping or self.model is not candidate:
                    return None
                episode = self._player(level).play(policy, lambda: self.link.poll(0))
                played[level].append(episode.summary)
        return played

    def _record(self, level: str, policy: str, played: Episode) -> None:
        m, episode = self.metrics, played.summary
        window = self.windows[level, policy]
        window.append(episode)
        self.unjudged[level] += policy == self.judge
        n = len(window)
        mean_max_x = sum(e.max_x for e in window) / n
        key = (level, policy)
        self.best_mean_max_x[key] = max(self.best_mean_max_x[key], mean_max_x)
        m.episodes.labels(level, policy).inc()
        m.max_x.labels(level, policy).set(mean_max_x)
        m.median_max_x.labels(level, policy).set(statistics.median(e.max_x for e in window))
        m.flag_rate.labels(level, policy).set(sum(e.flag for e in window) / n)
        m.episode_return.labels(level, policy).set(sum(e.episode_return for e in window) / n)
        m.policy_version.labels(level, policy).set(self.version)
        m.best_max_x.labels(level, policy).set(self.best_mean_max_x[key])
        shares = [progress(level, e.max_x, e.flag) for e in window]
        if progress(level, 0) is not None:  # a level of known length
            m.progress.labels(level, policy).set(sum(shares) / n)
        log.info(
            "eval v%d %s %s: max x %d, return %.0f, %s after %d steps",
            self.version, level, policy, episode.max_x, episode.episode_return, episode.outcome,
            episode.length,
        )  # fmt: skip
        best = (episode.max_x, episode.episode_return)
        if level not in self.best or best > self.best[level]:
            self.best[level] = best
            name = f"best-{level.replace(':', '_').replace('/', '_')}"
            fps = Fraction(NES_FPS, self.spec.frame_skip)
            write_video(self.out_dir / f"{name}.mp4", played.screens, fps)
            summary = {**episode._asdict(), "policy": policy, "policy_version": self.version}
            summary["frames"] = len(played.screens)
            atomic_write(
                self.out_dir / f"{name}.json", (json.dumps(summary, indent=2) + "\n").encode()
            )

    def close(self) -> None:
        self.link.close()
        for env in self.envs.values():
            env.close()


def main(argv: list[str] | None = None) -> int:
    cfg = config_io.load(EvalConfig, argv, prog="actor.eval", description=__doc__ or "")
    try:  # before it registers: refused as a bad flag is
        make_writable(Path(cfg.eval_dir))
    except RunDirError as exc:
        print(f"actor.eval: --eval-dir {cfg.eval_dir}: {exc}; pass an --eval-dir that can be made "
              "and written", file=sys.stderr)  # fmt: skip
        return 2
    # each level's series are made at the learner's first Welcome
    return run_process(cfg, "eval", EvalMetrics(), lambda c, m: EvalActor(c, m, uuid.uuid4().hex))


if __name__ == "__main__":
    sys.exit(main())
