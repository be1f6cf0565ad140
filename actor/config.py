"""The configurations of the actor processes, one flat dataclass each (flags and TOML come from
common.config): the training actor's (`python -m actor`) and the eval actor's
(`python -m actor.eval`). Both extend `ActorLink`, what every actor process sets: its link to the
learner, its env builds, metrics, seed and logging; each adds only what it uses.

The run's settings are the learner's: it sends the network, the unroll length, the env spec
(levels, frame skip, action set, frame size, cutoff, perturbations, reward shaping) and the
heartbeat interval at registration, and a flag for any of them here is refused naming the
learner's flag.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from common import curve, wire
from common.config import (
    Count,
    LogLevel,
    NonNegative,
    Port,
    Positive,
    PositiveInt,
    is_host_port,
)
from common.config import option as _f
from common.env_spec import EnvSpec


def _from_learner(what: str, flag: str) -> str:
    return (
        f"the actor takes {what} from the learner at registration; "
        f"set {flag} on the learner and remove it here"
    )


_IN_THE_LOSS = "the learner scales and clips rewards in its loss: set {flag} there, remove it here"


@dataclass(frozen=True)
class ActorLink:
    """What every actor process sets, the training actors and the eval actor alike."""

    learner: str = _f("127.0.0.1:5555", "learner HOST:PORT (weights come from PORT+1)")
    actor_id: Count = _f(0, "this actor's id, unique among the learner's actors")
    run_id: str = _f("default", "training run name; must match the learner's --run-id")
    curve_dir: str = _f("", "CURVE keys: actor.key_secret and learner.key (empty = off)")
    weights_from: str = _f("", "HOST:PORT of a weight relay on this host (empty = the learner)")
    torch_threads: PositiveInt = _f(1, "torch CPU threads for inference")
    reconnect_backoff_max_s: Positive = _f(
        2.0, "longest pause before a new session after a connection fell silent"
    )
    build_timeout_s: Positive = _f(120.0, "watchdog budget for building one env")
    build_retries: Count = _f(2, "retries of a failed env build before exiting")
    metrics_host: str = _f("127.0.0.1", "address of the /metrics HTTP server")
    metrics_port: Port = _f(0, "port of the /metrics HTTP server (0 = off)")
    seed: Count = _f(0, "random seed (actions); combined with actor_id")
    log_level: LogLevel = _f("INFO", "logging level")

    RETIRED: ClassVar[dict[str, str]] = {
        "arch": _from_learner("its network", "--arch"),
        "last_action": "the network always takes the previous action now: remove it here",
        "input_norm": "the network always normalises its input now: remove it here",
        "unroll_length": _from_learner("the unroll length", "--unroll-length"),
        **{  # every field of the env spec: --level, --frame-skip, ...
            f.name: _from_learner("its env settings", f"--{f.name.replace('_', '-')}")
            for f in fields(EnvSpec)
        },
        "reward_scale": _IN_THE_LOSS.format(flag="--loss-reward-scale"),
        "reward_clip": _IN_THE_LOSS.format(flag="--loss-reward-clip"),
        "heartbeat_interval_s": _from_learner("its heartbeat interval", "--heartbeat-interval-s"),
        "learner_timeout_s": (
            f"an actor starts a new session after {wire.SILENT_HEARTBEATS} of the learner's "
            "heartbeat intervals without word: set --heartbeat-interval-s on the learner and "
            "remove it here"
        ),
    }

    def problems(self) -> list[str]:
        out = []
        if not is_host_port(self.learner, below=65535):
            out.append(f"learner must be HOST:PORT with PORT < 65535, got {self.learner!r}")
        if self.weights_from and not is_host_port(self.weights_from):
            out.append(
                f"weights_from must be HOST:PORT of a relay (actor.relay), got {self.weights_from!r}"
            )
        return out + curve.actor_problems(self.curve_dir)


def _own_fields(cls: type[ActorLink]) -> tuple[str, ...]:
    """The fields of `cls` that not every actor process has, in order."""
    shared = {f.name for f in fields(ActorLink)}
    return tuple(f.name for f in fields(cls) if f.name not in shared)


def _training_actors_only(flag: str) -> str:
    return (
        f"the eval actor plays one env at a time: {flag} is the training actors' (make's "
        "ACTOR_ARGS, which the eval actor leaves to them); remove it here"
    )


@dataclass(frozen=True)
class EvalConfig(ActorLink):
    """The eval actor: episodes of the newest weights, one level of the set at a time."""

    eval_dir: str = _f(
        "runs/default/eval", "where the best policy and each level's best episode's video go"
    )
    eval_interval_s: NonNegative = _f(60.0, "seconds between evaluations")
    eval_episodes: PositiveInt = _f(3, "greedy episodes per evaluation (perturbed: no two alike)")
    eval_sampled_episodes: Count = _f(
        4, "sampled episodes per evaluation (they score the policy; 0: the greedy ones do)"
    )
    eval_window: PositiveInt = _f(
        10, "episodes averaged in mario_eval_* gauges and in each level's score"
    )
    eval_challenge_episodes: PositiveInt = _f(
        30, "fresh episodes a nominated policy and the kept best each play (over the levels)"
    )

    RETIRED: ClassVar[dict[str, str]] = {
        **ActorLink.RETIRED,
        "eval": "python -m actor.eval is the eval actor: remove --eval",
        "num_envs": _training_actors_only("--num-envs"),
        "lanes": _training_actors_only("--lanes"),
    }


@dataclass(frozen=True)
class ActorConfig(ActorLink):
    """A training actor: lanes of envs that stream chunks to the learner."""

    num_envs: PositiveInt = _f(4, "envs in this process (built one after another)")
    lanes: PositiveInt = _f(2, "env groups: one steps in a thread while the policy runs another")

    RETIRED: ClassVar[dict[str, str]] = {
        **ActorLink.RETIRED,
        "eval": "the eval actor is its own command: python -m actor.eval (it takes --eval-*)",
        **{  # for a user who meant the eval actor
            name: f"--{name.replace('_', '-')} is the eval actor's (python -m actor.eval): pass "
            "it in make's EVAL_ACTOR_ARGS, not ACTOR_ARGS"
            for name in _own_fields(EvalConfig)
        },
    }


# The training actors' own flags, which the eval actor leaves to them (scripts/service passes it
# the rest of ACTOR_ARGS)
TRAINING_ACTORS_ONLY: tuple[str, ...] = _own_fields(ActorConfig)
