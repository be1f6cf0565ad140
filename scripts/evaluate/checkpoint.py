"""The checkpoint `make eval` plays: named, or found in a run directory (the best policy the eval
actor kept, RUN/eval/best-policy.pt, else the latest checkpoint), loaded into a network, and
checked against the env it is to play, every problem saying what to change; and the levels it
plays when none are named: its run's (RUN/config.json), else those the checkpoint records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from common.env_spec import ACTION_SETS, EnvSpec
from common.model import ActorCritic, FormerNetwork, ModelSpec
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


class Levels(NamedTuple):
    level: str  # a level set, as --levels takes it
    source: str  # where it came from, in a user's words


def run_played(checkpoint: Path, run_dir: Path | None) -> RunDir | None:
    """The run played: the run dir named, else the one whose checkpoints/ or eval/ holds the
    checkpoint, if any."""
    if run_dir is not None:
        return RunDir(run_dir)
    parent = checkpoint.resolve().parent
    run = RunDir(parent.parent)
    return run if parent in (run.checkpoints, run.eval) else None


def default_out(checkpoint: Path, run_dir: Path | None) -> Path:
    """Where the results go: the eval/ of the run played, else of the checkpoint's directory."""
    run = run_played(checkpoint, run_dir)
    return run.eval if run is not None else RunDir(checkpoint.resolve().parent).eval


def levels_to_play(given: str | None, run: RunDir | None, config: dict[str, Any]) -> Levels:
    """The levels named (--levels); else the run's own, from its config.json (what its learner
    trains now); else those the checkpoint's `config` records; else EnvSpec's."""
    if given is not None:
        return Levels(given, "as named")
    if run is not None and run.config.is_file():
        try:
            level = json.loads(run.config.read_text()).get("level")
        except (OSError, ValueError, AttributeError) as exc:
            raise EvalError(
                f"cannot read the run's levels from {run.config} ({type(exc).__name__}: {exc}); "
                "name the levels to play: LEVELS=world:1 (--levels)"
            ) from exc
        if isinstance(level, str) and level:
            return Levels(level, f"the run's, from {run.config}")
    if isinstance(level := config.get("level"), str) and level:
        return Levels(level, "the run's, as the checkpoint records them")
    return Levels(EnvSpec.level, "the default: neither a run config nor the checkpoint names any")


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
    except FormerNetwork as exc:
        raise EvalError(
            f"{path} was written by an older release ({exc}) and this release cannot play it: "
            "evaluate it with the release that trained it"
        ) from exc
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
