"""The checkpoint `make eval` plays: named, or found in a run directory (the best policy the eval
actor kept, RUN/eval/best-policy.pt, else the latest checkpoint), loaded into a network, and
checked against the env it is to play, every problem saying what to change."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from common.env_spec import ACTION_SETS, EnvSpec
from common.model import ActorCritic, ModelSpec
from common.rundir import RunDir


class EvalError(Exception):
    """Bad input: a missing or foreign file, or a checkpoint that cannot play the chosen env."""


class Checkpoint(NamedTuple):
    path: Path
    model: ActorCritic
    trained_action_set: str | None
    config: dict[str, Any]
    policy_version: int
    env_frames: int  # -1: not known (a best policy kept by a release before weights carried them)
    best: dict[str, Any] | None = None  # a kept best's score and the figures behind it


class Chosen(NamedTuple):
    path: Path
    why: str  # how it was chosen, in a user's words


def resolve_checkpoint(
    run_dir: Path | None, checkpoint: Path | None, latest: bool = False
) -> Chosen:
    """The checkpoint named; else the run's kept best policy; else (or with `latest`) the run's
    latest checkpoint."""
    from learner.checkpoint import latest_path

    if checkpoint is not None:
        if not checkpoint.is_file():
            raise EvalError(f"checkpoint {checkpoint} does not exist")
        return Chosen(checkpoint, "the checkpoint named")
    assert run_dir is not None
    if not run_dir.is_dir():
        raise EvalError(f"run dir {run_dir} does not exist; pass RUN=<run dir> or CKPT=<file>")
    run = RunDir(run_dir)
    if not latest and run.best_policy.is_file():
        return Chosen(run.best_policy, "the best policy the eval actor kept")
    path = latest_path(run)
    if path is None:
        kept = "" if latest else f" and no best policy in {run.best_policy}"
        raise EvalError(
            f"{run_dir} has no checkpoints in {run.checkpoints}{kept}; train first or pass CKPT="
        )
    if latest:
        return Chosen(path, "the latest checkpoint (--latest)")
    return Chosen(path, f"the latest checkpoint: no best policy kept yet in {run.best_policy}")


def load_checkpoint(path: Path) -> Checkpoint:
    from learner.checkpoint import load

    try:
        state = load(path)
    except Exception as exc:
        raise EvalError(
            f"{path} is not a checkpoint: torch.load cannot read it ({type(exc).__name__}); "
            "expected a file written by the learner (RUN/checkpoints/ckpt-*.pt)"
        ) from exc
    if not isinstance(state, dict):
        state = {"": state}  # reported below as missing both keys
    missing = [k for k in ("model", "model_spec") if not isinstance(state.get(k), dict)]
    if missing:
        raise EvalError(f"{path} is not a checkpoint: no {' or '.join(missing)} in it")
    try:
        model = ActorCritic(ModelSpec.from_dict(state["model_spec"]))
        model.load_state_dict(state["model"])
    except (TypeError, ValueError, RuntimeError) as exc:
        raise EvalError(f"{path}: its model_spec and weights do not make a network: {exc}") from exc
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    trained = config.get("action_set") or action_set_for(model.spec.num_actions)
    version, frames = int(state.get("policy_version", -1)), int(state.get("env_frames", -1))
    best = state.get("best") if isinstance(state.get("best"), dict) else None
    return Checkpoint(path, model, trained, config, version, frames, best)


def action_set_for(num_actions: int) -> str | None:
    """The action set with this many actions, if exactly one has."""
    names = [name for name, combos in ACTION_SETS.items() if len(combos) == num_actions]
    return names[0] if len(names) == 1 else None


def check_compatible(
    model_spec: ModelSpec, trained_action_set: str | None, env_spec: EnvSpec, env_actions: int
) -> list[str]:
    """Every way the checkpoint's network cannot play this env, each saying what to change."""
    out = []
    if model_spec.num_actions != env_actions:
        trained = f" ({trained_action_set})" if trained_action_set else ""
        env_name = env_spec.action_set if env_spec.is_mario else env_spec.level
        fix = f"; pass --action-set {trained_action_set}" if trained_action_set else ""
        out.append(
            f"checkpoint has {model_spec.num_actions} actions{trained}, "
            f"env has {env_actions} ({env_name}){fix}"
        )
    if model_spec.frame_size != env_spec.frame_size:
        out.append(
            f"checkpoint expects {model_spec.frame_size}x{model_spec.frame_size} frames, env makes "
            f"{env_spec.frame_size}x{env_spec.frame_size}; pass --frame-size {model_spec.frame_size}"
        )
    return out
