"""The learner's configuration: one flat dataclass; flags and TOML come from common.config."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, fields, replace
from typing import Annotated, ClassVar, Literal

from common.config import (
    Count,
    Ge,
    Gt,
    Le,
    LogLevel,
    NonNegative,
    Port,
    Positive,
    PositiveInt,
    Share,
    UnitInterval,
)
from common.config import option as _f
from common.env_spec import ACTION_SETS, PERTURBATION, ActionSet, EnvSpec
from common.levels import LevelSetError, parse_levels, unregistered
from common.model import Arch, Core, ModelSpec, device_problem
from learner import batch_size
from learner.batch_size import DEFAULT_WAIT_S, BatchSize

Precision = Literal["fp32", "bf16"]
# A run of one level starts this share of its episodes near the frontier; a set none, as on World 1
# they bought no progress (docs/WHY-DEFAULTS.md).
ONE_LEVEL_FRONTIER_STARTS = 0.25


_LOST_ON_WORLD_1 = (
    "{what} lost to per-level PopArt on World 1 and was removed "
    "(docs/lab/2026-12-many-levels-study.md): remove it"
)

_BATCH_SIZE = (
    "the batch size is one flag now: --batch-chunks MIN-MAX (e.g. 4-8, the default: all queued "
    "once MIN are, at most MAX) or --batch-chunks N (always N)"
)


@dataclass(frozen=True)
class LearnerConfig:
    run_dir: str = _f("runs/default", "run directory: config, checkpoints, metrics (one learner)")
    run_id: str = _f("default", "training run name; actors must register with the same --run-id")
    device: str = _f("auto", "auto | cpu | cuda | cuda:N (auto = CUDA when available)")
    host: str = _f("127.0.0.1", "address to bind: PORT (chunks) and PORT+1 (weights)")
    port: Annotated[int, Ge(1), Le(65534)] = _f(5555, "ROUTER port for actors; weights on PORT+1")
    curve_dir: str = _f("", "CURVE keys: learner.key_secret, authorized/*.key (empty = off)")
    insecure: bool = _f(False, "allow a non-loopback --host without CURVE (anyone connects)")
    metrics_host: str = _f("127.0.0.1", "address of the /metrics HTTP server")
    metrics_port: Port = _f(9000, "port of the /metrics HTTP server (0 = off)")
    # ---- the env spec, sent to every actor in its Welcome (EnvSpec's defaults, but the recipe's)
    level: str = _f(EnvSpec.level, "the run's levels: 1-1 | 1-1,1-2 | world:1 | all | a Gym id")
    action_set: ActionSet = _f(EnvSpec.action_set, "buttons the agent may press (its actions)")
    frame_size: PositiveInt = _f(EnvSpec.frame_size, "observation size in pixels (square)")
    frame_skip: PositiveInt = _f(EnvSpec.frame_skip, "NES frames per agent step")
    no_progress_steps: Count = _f(
        EnvSpec.no_progress_steps,
        "agent steps without a new max x before an episode is cut (0 = off)",
    )
    flag_bonus: float = _f(EnvSpec.flag_bonus, "training reward added on reaching the flag")
    death_penalty: float = _f(EnvSpec.death_penalty, "training reward taken away on a death")
    sticky_actions: Share = _f(  # trained as evaluation plays
        PERTURBATION.sticky_actions, "each NES frame repeats the last buttons with p (0 = off)"
    )
    noop_max: Annotated[int, Ge(0), Le(1000)] = _f(
        PERTURBATION.noop_max, "episodes start after 0..N agent steps without buttons (0 = off)"
    )
    frontier_starts: Share | None = _f(  # the recipe on one level: practice where episodes fail
        None,
        "share of episodes started near the level's frontier (none = "
        f"{ONE_LEVEL_FRONTIER_STARTS} on one level, 0 on a set; 0 = off; Mario levels only)",
    )
    # ---- the network, likewise sent in the Welcome
    arch: Arch = _f("small", "network, sent to the actors at registration")
    core: Core = _f("none", "recurrent core between trunk and heads: none | lstm | gru")
    core_size: PositiveInt = _f(256, "units of the recurrent core")
    precision: Precision = _f("fp32", "the network's training precision: fp32 | bf16 (autocast)")
    unroll_length: PositiveInt = _f(32, "agent steps per chunk (T), sent to the actors")
    batch_chunks: str = _f(
        "4-8", "chunks per update: MIN-MAX, all queued once MIN are, at most MAX; N: always N"
    )
    batch_wait_s: NonNegative | None = _f(
        None, f"a MIN-MAX batch trains on fewer (>= 1) after this long (none = {DEFAULT_WAIT_S})"
    )
    learning_rate: Positive = _f(1e-3, "Adam learning rate (at the start, when annealed)")
    lr_anneal_frames: Count = _f(
        1_500_000, "the rate falls linearly over these env frames (0 = flat)"
    )
    lr_final_fraction: UnitInterval = _f(0.1, "the share of the start rate it falls to, then holds")
    discount: UnitInterval = _f(0.9, "discount factor gamma")
    loss_reward_scale: Positive = _f(0.1, "the loss multiplies each step's reward by this ...")
    loss_reward_clip: NonNegative = _f(0.0, "... then clips it to +-this (0 = off)")
    baseline_cost: NonNegative = _f(0.5, "weight of the value loss")
    entropy_cost: NonNegative = _f(0.01, "weight of the entropy bonus")
    max_grad_norm: Positive = _f(40.0, "clip the global gradient norm to this")
    vtrace_lambda: Annotated[float, Gt(0), Le(1)] = _f(1.0, "V-trace's lambda (GAE's on policy)")
    epochs: PositiveInt = _f(4, "passes over each batch (a GPU learner that waits adds more)")
    max_epochs: PositiveInt = _f(8, "passes a GPU learner that waits for data may make")
    minibatches: PositiveInt = _f(2, "optimizer steps per pass, each on a share of the sequences")
    ppo_clip: NonNegative = _f(0.1, "clip pi/mu to [1/(1+c), 1+c] in APPO's surrogate (0 = off)")
    normalize_advantages: bool = _f(True, "advantages to zero mean, unit std per minibatch")
    replay_capacity: Count = _f(2048, "prioritized replay size in sequences (0 = off)")
    replay_fraction: Share = _f(0.0, "share of each batch from replay")
    max_policy_lag: Count = _f(50, "drop chunks of a policy more updates old than this")
    queue_chunks: PositiveInt = _f(8, "ingest queue capacity; full, it stops granting credits")
    credits_per_actor: PositiveInt = _f(2, "chunks an actor may have in flight")
    checkpoint_interval_s: Positive = _f(300.0, "seconds between checkpoints (and on SIGTERM)")
    heartbeat_interval_s: Positive = _f(
        1.0, "seconds between heartbeats, both ways (actors take it at registration)"
    )
    actor_timeout_s: Positive = _f(15.0, "forget an actor silent this long")
    train_frames: Count = _f(0, "stop at this many env frames, the run's length (0 = never)")
    tensorboard: bool = _f(False, "also write the curves as TensorBoard scalars in RUN/tensorboard")
    status_interval_s: NonNegative = _f(0.0, "print a status line to stderr this often (0 = off)")
    torch_threads: Count = _f(0, "torch CPU threads (0 = torch's default)")
    seed: Count = _f(0, "random seed")
    log_level: LogLevel = _f("INFO", "logging level")

    RETIRED: ClassVar[dict[str, str]] = {
        "min_batch_chunks": _BATCH_SIZE,
        "max_batch_chunks": _BATCH_SIZE,
        "self_imitation": _LOST_ON_WORLD_1.format(what="self-imitation"),
        "level_sampling": _LOST_ON_WORLD_1.format(what="level sampling by value error"),
        "popart_per_level": (
            "per-level PopArt led World 1's set early and then fell behind today's defaults "
            "(docs/lab/2026-12-many-levels-study.md): remove it"
        ),
        "frontier_starts_by": (
            "frontier starts by stall rate trailed today's defaults on World 1 "
            "(docs/lab/2026-12-many-levels-study.md): remove it; --frontier-starts alone starts "
            "that share of every level's episodes near its frontier"
        ),
    }

    @property
    def num_actions(self) -> int:
        return len(ACTION_SETS[self.action_set])

    def env_spec(self) -> EnvSpec:
        """The envs every actor builds, as its Welcome tells it."""
        values = {f.name: getattr(self, f.name) for f in fields(EnvSpec)}
        if self.frontier_starts is None:
            try:
                one = len(self.levels) == 1
            except LevelSetError:
                one = True  # no set: problems() says what is wrong with it
            values["frontier_starts"] = ONE_LEVEL_FRONTIER_STARTS if one else 0.0
        return EnvSpec(**values)

    def resolved(self) -> LearnerConfig:
        """The config as run, each default that depends on other settings given its value: what
        RUN/config.json records (a pinned batch's wait stays none: it has none)."""
        size = self.batch_size()
        return replace(
            self, frontier_starts=self.env_spec().frontier_starts,
            batch_wait_s=None if size.pinned else size.wait_s,
        )  # fmt: skip

    def model_spec(self) -> ModelSpec:
        return ModelSpec(
            arch=self.arch, num_actions=self.num_actions, frame_size=self.frame_size,
            core=self.core, core_size=self.core_size,
        )  # fmt: skip

    def batch_size(self) -> BatchSize:
        """The batch-size limits of --batch-chunks and --batch-wait-s (learner/batch_size.py);
        ValueError where problems() has one."""
        return batch_size.parse(self.batch_chunks, self.batch_wait_s)

    @property
    def levels(self) -> tuple[str, ...]:
        return parse_levels(self.level)

    def problems(self) -> list[str]:
        # imported here: the config, and the IO-free update that reads it, load no zmq or metrics
        from common import curve
        from learner import tensorboard

        out = self.env_spec().problems() + unregistered(self.level)
        cutoff, T = self.no_progress_steps, self.unroll_length
        if 0 < cutoff < T:
            out.append(
                f"no_progress_steps ({cutoff}) is below unroll_length ({T}), and a chunk holds one "
                f"truncation per env: set --no-progress-steps to 0 or >= {T}, or --unroll-length "
                f"to <= {cutoff}"
            )
        if problem := device_problem(self.device):
            out.append(problem)
        if not (self.curve_dir or self.insecure or _loopback(self.host)):
            out.append(
                f"host {self.host} is not loopback: set --curve-dir (make keys) so only "
                "authorised actors can connect, or pass --insecure"
            )
        out += curve.learner_problems(self.curve_dir)
        if self.tensorboard:
            out += tensorboard.problems()
        if self.max_epochs < self.epochs:
            out.append(f"max_epochs ({self.max_epochs}) must be >= epochs ({self.epochs})")
        if self.epochs > 1 and self.ppo_clip == 0:
            out.append(
                f"epochs = {self.epochs} reuses each batch without a trust region: set --ppo-clip "
                "(e.g. 0.1) or --epochs 1"
            )
        if self.actor_timeout_s <= 2 * self.heartbeat_interval_s:
            out.append(
                f"actor_timeout_s ({self.actor_timeout_s:g}) must exceed 2 x "
                f"heartbeat_interval_s ({self.heartbeat_interval_s:g}): raise --actor-timeout-s "
                "or lower --heartbeat-interval-s"
            )
        return out + self._batch_problems()

    def _batch_problems(self) -> list[str]:
        try:
            size = self.batch_size()
        except ValueError as exc:
            return [str(exc)]
        if self.queue_chunks < size.max_chunks:
            return [
                f"queue_chunks ({self.queue_chunks}) must be >= the most chunks an update takes "
                f"({size.max_chunks}, --batch-chunks {self.batch_chunks}), or a batch could never "
                f"fill: raise --queue-chunks to {size.max_chunks} or lower --batch-chunks"
            ]
        return []


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "*", an interface name or a DNS name: may be reachable from outside
        return False
