"""The learner's configuration: one flat dataclass; flags and TOML come from common.config."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, fields

from common import curve
from common.env import ACTION_SETS
from common.model import ARCHS, ModelSpec
from learner.batch_size import BatchSize


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class LearnerConfig:
    run_dir: str = _f(
        "runs/default", "run directory: config, checkpoints, metrics log (one learner each)"
    )
    run_id: str = _f("default", "training run name; actors must register with the same --run-id")
    device: str = _f("auto", "auto | cpu | cuda | cuda:N (auto = CUDA when available)")
    host: str = _f(
        "127.0.0.1", "address to bind; actors connect to PORT (chunks) and PORT+1 (weights)"
    )
    port: int = _f(5555, "ROUTER port for actors; the weights PUB socket binds PORT+1")
    curve_dir: str = _f(
        "", "CURVE keys: dir with learner.key_secret and authorized/*.key of actors (empty = off)"
    )
    insecure: bool = _f(
        False, "allow a non-loopback --host without --curve-dir: anyone can connect"
    )
    metrics_host: str = _f("127.0.0.1", "address of the /metrics HTTP server")
    metrics_port: int = _f(9000, "port of the /metrics HTTP server (0 = off)")
    action_set: str = _f("simple", "action set the actors use (fixes the number of actions)")
    frame_size: int = _f(84, "observation size in pixels (square)")
    arch: str = _f("small", "network: small | nature | resnet")
    last_action: bool = _f(
        True, "the policy also sees its previous action (IMPALA); actors must match"
    )
    input_norm: bool = _f(
        True, "standardise each pixel by running moments (sent with the weights); actors must match"
    )
    unroll_length: int = _f(32, "agent steps per chunk (T); actors must match")
    min_batch_chunks: int = _f(
        4,
        "an update waits for this many chunks (each one actor lane's envs), then takes all queued",
    )
    max_batch_chunks: int = _f(8, "chunks per update, at most (queue_chunks must hold them)")
    batch_wait_s: float = _f(
        2.0, "after waiting this long, train on the chunks there are (>= 1) even if < min"
    )
    batch_chunks: int | None = _f(
        None, "shorthand for --min-batch-chunks N --max-batch-chunks N (none = use those)"
    )
    learning_rate: float = _f(2.5e-4, "Adam learning rate")
    adam_eps: float = _f(1e-5, "Adam epsilon")
    discount: float = _f(
        0.9, "discount factor gamma (0.9: dense progress rewards, as Mario PPO/A3C use)"
    )
    reward_scale: float = _f(0.1, "rewards are multiplied by this before clipping")
    reward_clip: float = _f(0.0, "clip scaled rewards to +-this (0 = off)")
    baseline_cost: float = _f(0.5, "weight of the value loss")
    entropy_cost: float = _f(0.01, "weight of the entropy bonus")
    max_grad_norm: float = _f(40.0, "clip the global gradient norm to this")
    clip_rho_threshold: float = _f(1.0, "V-trace rho-bar")
    clip_pg_rho_threshold: float = _f(1.0, "V-trace rho-bar for the policy-gradient advantage")
    epochs: int = _f(
        4, "passes over each batch, at most (sample reuse; the surrogate keeps it safe)"
    )
    max_epochs: int = _f(
        8, "a GPU learner that waits for data adds passes up to this (and the sample:insert limit)"
    )
    minibatches: int = _f(2, "optimizer steps per pass, each on a share of whole sequences")
    ppo_clip: float = _f(
        0.1, "clip pi/mu to [1/(1+c), 1+c] in a PPO surrogate on V-trace advantages (APPO); 0 = off"
    )
    normalize_advantages: bool = _f(True, "advantages to zero mean, unit std per minibatch")
    popart: bool = _f(True, "normalise value targets with PopArt, preserving the head's outputs")
    popart_beta: float = _f(3e-3, "PopArt's step size for the targets' running moments")
    replay_capacity: int = _f(
        2048, "prioritized replay size in sequences (chunk envs), on the device; 0 = off"
    )
    replay_fraction: float = _f(0.0, "share of each batch's sequences drawn from replay (0 = off)")
    replay_alpha: float = _f(0.6, "priority exponent alpha: P(i) ~ p_i^alpha")
    replay_beta: float = _f(0.4, "initial importance-weight exponent beta, annealed to 1")
    replay_beta_anneal_updates: int = _f(100_000, "updates over which beta reaches 1")
    replay_max_sample_insert_ratio: float = _f(
        8.0,
        "sample:insert limit: sequences trained on per fresh one, all passes and replay counted "
        "(caps --max-epochs; replay is skipped above it)",
    )
    replay_min_size: int = _f(64, "sequences in replay before it is sampled")
    max_policy_lag: int = _f(50, "drop chunks whose policy is more than this many updates old")
    queue_chunks: int = _f(8, "ingest queue capacity; a full queue stops granting credits")
    credits_per_actor: int = _f(2, "chunks an actor may have in flight")
    publish_every_updates: int = _f(1, "broadcast weights after this many updates ...")
    publish_interval_s: float = _f(0.5, "... but no more often than this (bounds bandwidth)")
    weights_dtype: str = _f("float32", "dtype of broadcast weights: float32 | float16")
    checkpoint_interval_s: float = _f(300.0, "seconds between checkpoints (and one on SIGTERM)")
    keep_checkpoints: int = _f(3, "newest checkpoints kept in run_dir/checkpoints")
    heartbeat_interval_s: float = _f(1.0, "seconds between heartbeats to actors")
    actor_timeout_s: float = _f(15.0, "forget an actor silent for this long and return its credits")
    max_updates: int = _f(0, "stop after this many updates (0 = run until stopped)")
    status_interval_s: float = _f(0.0, "print a one-line status to stderr this often (0 = off)")
    torch_threads: int = _f(0, "torch CPU threads (0 = torch's default, one per core)")
    seed: int = _f(0, "random seed")
    log_level: str = _f("INFO", "logging level")

    @property
    def num_actions(self) -> int:
        return len(ACTION_SETS.get(self.action_set, ()))

    def model_spec(self) -> ModelSpec:
        return ModelSpec(
            arch=self.arch,
            num_actions=self.num_actions,
            frame_size=self.frame_size,
            last_action=self.last_action,
            input_norm=self.input_norm,
        )

    def batch_size(self) -> BatchSize:
        """The batch-size limits, with --batch-chunks N read as min = max = N."""
        if self.batch_chunks is not None:
            return BatchSize(self.batch_chunks, self.batch_chunks, self.batch_wait_s)
        return BatchSize(self.min_batch_chunks, self.max_batch_chunks, self.batch_wait_s)

    def problems(self) -> list[str]:
        out = []
        if self.action_set not in ACTION_SETS:
            out.append(f"action_set must be one of {sorted(ACTION_SETS)}, got {self.action_set!r}")
        if self.arch not in ARCHS:
            out.append(f"arch must be one of {list(ARCHS)}, got {self.arch!r}")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            out.append(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if not 0 < self.port < 65535:
            out.append(f"port must be in [1, 65534] (PORT+1 is used too), got {self.port}")
        if not 0 <= self.metrics_port < 65536:
            out.append(f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        if not (self.curve_dir or self.insecure or _loopback(self.host)):
            out.append(
                f"host {self.host} is not loopback: set --curve-dir (make keys) so only "
                "authorised actors can connect, or pass --insecure"
            )
        out += curve.learner_problems(self.curve_dir)
        positive_ints = (
            "epochs",
            "minibatches",
            "unroll_length",
            "min_batch_chunks",
            "max_batch_chunks",
            "queue_chunks",
            "credits_per_actor",
            "publish_every_updates",
            "keep_checkpoints",
            "frame_size",
        )
        for name in positive_ints:
            if getattr(self, name) < 1:
                out.append(f"{name} must be >= 1, got {getattr(self, name)}")
        positive = (
            "learning_rate",
            "adam_eps",
            "reward_scale",
            "max_grad_norm",
            "heartbeat_interval_s",
            "actor_timeout_s",
            "checkpoint_interval_s",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                out.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in (
            "torch_threads",
            "reward_clip",
            "baseline_cost",
            "entropy_cost",
            "publish_interval_s",
            "status_interval_s",
            "max_updates",
            "max_policy_lag",
            "batch_wait_s",
        ):
            if getattr(self, name) < 0:
                out.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.replay_fraction < 1:
            out.append(f"replay_fraction must be in [0, 1), got {self.replay_fraction}")
        if self.replay_capacity < 0 or self.replay_min_size < 0:
            out.append("replay_capacity and replay_min_size must be >= 0")
        if self.replay_capacity and self.replay_min_size > self.replay_capacity:
            out.append(
                f"replay_min_size ({self.replay_min_size}) must be <= replay_capacity ({self.replay_capacity})"
            )
        if self.replay_alpha < 0 or not 0 <= self.replay_beta <= 1:
            out.append("replay_alpha must be >= 0 and replay_beta in [0, 1]")
        if self.replay_max_sample_insert_ratio <= 0 or self.replay_beta_anneal_updates < 1:
            out.append(
                "replay_max_sample_insert_ratio must be > 0 and replay_beta_anneal_updates >= 1"
            )
        if self.max_epochs < self.epochs:
            out.append(f"max_epochs ({self.max_epochs}) must be >= epochs ({self.epochs})")
        if self.ppo_clip < 0:
            out.append(f"ppo_clip must be >= 0 (0 = IMPALA's policy gradient), got {self.ppo_clip}")
        if not 0 < self.popart_beta <= 1:
            out.append(f"popart_beta must be in (0, 1], got {self.popart_beta}")
        if self.epochs > 1 and self.ppo_clip == 0:
            out.append(
                f"epochs = {self.epochs} reuses each batch without a trust region: set --ppo-clip "
                "(e.g. 0.1) or --epochs 1"
            )
        if not 0 <= self.discount <= 1:
            out.append(f"discount must be in [0, 1], got {self.discount}")
        if self.weights_dtype not in ("float32", "float16"):
            out.append(f"weights_dtype must be float32 or float16, got {self.weights_dtype!r}")
        if self.actor_timeout_s <= 2 * self.heartbeat_interval_s:
            out.append("actor_timeout_s must exceed 2 x heartbeat_interval_s")
        out += self._batch_problems()
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            out.append(f"log_level must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}")
        return out

    def _batch_problems(self) -> list[str]:
        out = []
        n = self.batch_chunks
        if n is not None and n < 1:
            out.append(f"batch_chunks must be >= 1 or none, got {n}")
        defaults = {f.name: f.default for f in fields(self)}
        given = (self.min_batch_chunks, self.max_batch_chunks)
        if n is not None and given not in (
            (n, n),
            (defaults["min_batch_chunks"], defaults["max_batch_chunks"]),
        ):
            out.append(
                f"batch_chunks ({n}) sets min and max batch chunks, but min_batch_chunks "
                f"({given[0]}) and max_batch_chunks ({given[1]}) are given too: give "
                "--batch-chunks or --min/--max-batch-chunks, not both"
            )
        size = self.batch_size()
        if size.max_chunks < size.min_chunks:
            out.append(
                f"max_batch_chunks ({size.max_chunks}) must be >= min_batch_chunks "
                f"({size.min_chunks}): raise --max-batch-chunks or lower --min-batch-chunks"
            )
        elif self.queue_chunks < size.max_chunks:
            name = "batch_chunks" if n is not None else "max_batch_chunks"
            out.append(
                f"queue_chunks ({self.queue_chunks}) must be >= {name} ({size.max_chunks}), or a "
                f"batch could never fill: raise --queue-chunks to {size.max_chunks} or lower "
                f"--{name.replace('_', '-')}"
            )
        return out


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "*", an interface name or a DNS name: may be reachable from outside
        return False
