"""The actor's configuration: one flat dataclass; flags and TOML come from common.config."""

from __future__ import annotations

from dataclasses import dataclass, field

from common import curve
from common.env import ACTION_SETS, EnvSpec
from common.model import ARCHS, ModelSpec


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ActorConfig:
    learner: str = _f(
        "127.0.0.1:5555", "learner HOST:PORT (chunks go to PORT, weights come from PORT+1)"
    )
    actor_id: int = _f(0, "this actor's id, unique among the learner's actors")
    run_id: str = _f("default", "training run name; must match the learner's --run-id")
    curve_dir: str = _f(
        "", "CURVE keys: dir with this actor's actor.key_secret and learner.key (empty = off)"
    )
    num_envs: int = _f(4, "envs in this process (built one after another)")
    lanes: int = _f(2, "env groups: one steps in a thread while the policy runs for another")
    level: str = _f("1-1", "Super Mario Bros stage W-S, or a Gymnasium id")
    action_set: str = _f("simple", "right_only | simple | complex")
    frame_skip: int = _f(4, "NES frames per agent step")
    frame_size: int = _f(84, "observation size in pixels (square)")
    no_progress_steps: int = _f(
        100, "truncate an episode after this many steps without a new max x_pos (0 = off)"
    )
    reward_scale: float = _f(1.0, "env-side reward scale (1 = off)")
    reward_clip: float = _f(0.0, "env-side per-step reward clip (0 = off)")
    flag_bonus: float = _f(0.0, "env-side bonus for reaching the flag")
    death_penalty: float = _f(0.0, "env-side penalty for dying")
    arch: str = _f("small", "network: small | nature | resnet (must match the learner)")
    last_action: bool = _f(
        True, "the policy also sees its previous action (must match the learner)"
    )
    input_norm: bool = _f(
        True, "the policy standardises each pixel by running moments (must match the learner)"
    )
    unroll_length: int = _f(32, "agent steps per chunk (T; must match the learner)")
    torch_threads: int = _f(1, "torch CPU threads for inference")
    heartbeat_interval_s: float = _f(1.0, "seconds between heartbeats to the learner")
    learner_timeout_s: float = _f(
        10.0, "reconnect after this long without hearing from the learner"
    )
    reconnect_backoff_max_s: float = _f(10.0, "longest wait between reconnection attempts")
    build_timeout_s: float = _f(120.0, "watchdog budget for building one env (exit if exceeded)")
    build_retries: int = _f(2, "retries of a failed env build before exiting")
    metrics_host: str = _f("127.0.0.1", "address of the /metrics HTTP server")
    metrics_port: int = _f(0, "port of the /metrics HTTP server (0 = off)")
    seed: int = _f(0, "random seed (actions); combined with actor_id")
    eval: bool = _f(
        False, "evaluation mode: greedy and sampled episodes with the newest weights, no chunks"
    )
    eval_dir: str = _f(
        "runs/default/eval", "eval mode: where the best episode's video and summary go"
    )
    eval_interval_s: float = _f(60.0, "eval mode: seconds between evaluations")
    eval_episodes: int = _f(
        1, "eval mode: greedy episodes per evaluation (greedy play is deterministic)"
    )
    eval_sampled_episodes: int = _f(
        4, "eval mode: episodes per evaluation with actions sampled from the policy (--seed)"
    )
    eval_window: int = _f(
        10, "eval mode: episodes of each policy averaged in the mario_eval_* gauges"
    )
    log_level: str = _f("INFO", "logging level")

    def env_spec(self) -> EnvSpec:
        return EnvSpec(
            level=self.level,
            action_set=self.action_set,
            frame_skip=self.frame_skip,
            frame_size=self.frame_size,
            no_progress_steps=self.no_progress_steps,
            reward_scale=self.reward_scale,
            reward_clip=self.reward_clip,
            flag_bonus=self.flag_bonus,
            death_penalty=self.death_penalty,
        )

    def problems(self) -> list[str]:
        out = list(self.env_spec().problems())
        host, sep, port = self.learner.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65535:
            out.append(f"learner must be HOST:PORT with PORT < 65535, got {self.learner!r}")
        if self.actor_id < 0:
            out.append(f"actor_id must be >= 0, got {self.actor_id}")
        if self.num_envs < 1:
            out.append(f"num_envs must be >= 1, got {self.num_envs}")
        if self.lanes < 1:
            out.append(f"lanes must be >= 1, got {self.lanes}")
        if self.arch not in ARCHS:
            out.append(f"arch must be one of {list(ARCHS)}, got {self.arch!r}")
        if self.unroll_length < 1:
            out.append(f"unroll_length must be >= 1, got {self.unroll_length}")
        if self.no_progress_steps and self.no_progress_steps < self.unroll_length:
            out.append(
                "no_progress_steps must be 0 or >= unroll_length (one truncation per env per chunk)"
            )
        if self.eval_interval_s < 0 or self.eval_episodes < 1 or self.eval_window < 1:
            out.append("eval_interval_s must be >= 0, eval_episodes and eval_window >= 1")
        if self.eval_sampled_episodes < 0:
            out.append(f"eval_sampled_episodes must be >= 0, got {self.eval_sampled_episodes}")
        if self.torch_threads < 1:
            out.append(f"torch_threads must be >= 1, got {self.torch_threads}")
        for name in (
            "heartbeat_interval_s",
            "learner_timeout_s",
            "reconnect_backoff_max_s",
            "build_timeout_s",
        ):
            if getattr(self, name) <= 0:
                out.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.learner_timeout_s <= 2 * self.heartbeat_interval_s:
            out.append("learner_timeout_s must exceed 2 x heartbeat_interval_s")
        if not 0 <= self.metrics_port < 65536:
            out.append(f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        out += curve.actor_problems(self.curve_dir)
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            out.append(f"log_level must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}")
        return out

    def model_spec(self, num_actions: int) -> ModelSpec:
        return ModelSpec(
            arch=self.arch,
            num_actions=num_actions,
            frame_size=self.frame_size,
            last_action=self.last_action,
            input_norm=self.input_norm,
        )


def num_actions_for(action_set: str) -> int:
    return len(ACTION_SETS[action_set])
