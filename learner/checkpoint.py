"""Run directory ownership, atomic checkpoints, and resuming a learner from them.

One run directory belongs to one learner: an exclusive flock on RUN/.lock, held for the
process's life, makes a second learner refuse to start. Checkpoints and the `latest` pointer are
replaced whole (common/rundir.py's `atomic_write`), so a crash never leaves a torn file; the
newest `keep` are kept. A checkpoint holds the learner (network, optimizer, PopArt, counters),
the run's totals, the network's spec and the config; a learner resumes only from one whose
network is its config's, and never from a former release's that this one no longer builds.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch

from common.model import FormerNetwork, ModelSpec
from common.rundir import RunDir, atomic_write, make_writable, temp_files
from learner.levels import LevelStats
from learner.update import Learner

log = logging.getLogger(__name__)


class RunDirBusy(RuntimeError):
    pass


def lock_run_dir(run: RunDir) -> int:
    """Take the run directory for this process; RunDirBusy if another learner holds it,
    RunDirError if it cannot be made or written."""
    make_writable(run.root)
    fd = os.open(run.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise RunDirBusy(
            f"run dir {run.root} is in use by another learner (pid {holder}); "
            "stop it or pass another --run-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def unlock_run_dir(fd: int) -> None:
    """Give the run directory back (closing the descriptor drops its lock)."""
    os.close(fd)


def remove_stale_temps(run: RunDir) -> list[Path]:
    """Delete the temp files of checkpoint writes that a crash interrupted; returns them. Only
    the lock's holder writes there, so at its start every temp file is a dead process's."""
    stale = temp_files(run.checkpoints)
    for path in stale:
        path.unlink(missing_ok=True)
        log.warning("removed %s, a write that a crash interrupted", path.name)
    return stale


def save(run: RunDir, state: dict[str, Any], policy_version: int, keep: int = 3) -> Path:
    run.checkpoints.mkdir(parents=True, exist_ok=True)
    path = run.checkpoints / f"ckpt-{policy_version:010d}.pt"
    atomic_write(path, lambda f: torch.save(state, f))
    atomic_write(run.latest, path.name.encode() + b"\n")
    for old in sorted(run.checkpoints.glob("ckpt-*.pt"))[:-keep]:
        old.unlink(missing_ok=True)
    return path


def latest_path(run: RunDir) -> Path | None:
    """The newest checkpoint: the highest version among ckpt-*.pt, each complete (written under
    a temp name, then renamed). `latest` names the same file, unless a crash fell between the
    rename and the pointer's own update: then the newer file wins, and nothing is lost."""
    found = sorted(run.checkpoints.glob("ckpt-*.pt"))
    if run.latest.exists():
        named = run.checkpoints / run.latest.read_text().strip()
        if not named.exists():
            log.warning(
                "%s names %s, which is missing; using the newest file", run.latest, named.name
            )
        elif found and named != found[-1]:
            log.warning(
                "%s names %s, but %s is newer; using it", run.latest, named.name, found[-1].name
            )
    return found[-1] if found else None


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    return torch.load(path, map_location=map_location, weights_only=True)


# ---- the learner's state ----------------------------------------------------------------------


class Totals(NamedTuple):
    """The run's totals, which a checkpoint carries beside the learner's own counters."""

    env_frames: int = 0
    agent_steps: int = 0


def learner_state(
    learner: Learner, totals: Totals, config: dict[str, Any], levels: LevelStats | None = None
) -> dict[str, Any]:
    """What a checkpoint of `learner` holds (`resume` reads it back), with the levels' best
    windows so far."""
    return {
        "model": learner.model.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "policy_version": learner.updates,
        "sgd_steps": learner.sgd_steps,
        "env_frames": totals.env_frames,
        "agent_steps": totals.agent_steps,
        "model_spec": learner.model.spec.to_wire(),
        "popart": learner.popart.state_dict(),
        "level_bests": levels.bests() if levels is not None else {},
        "config": config,
        "saved_at": time.time(),
    }


def _spec_difference(saved: ModelSpec, asked: ModelSpec) -> str:
    """Each field where two specs differ, with the learner flag that would match the saved one."""
    out = []
    for name, have in saved.to_wire().items():
        want, flag = getattr(asked, name), name.replace("_", "-")
        fix = "the checkpoint's --action-set" if name == "num_actions" else f"--{flag} {have}"
        if have != want:
            out.append(f"{name} is {have!r} there, {want!r} here ({fix})")
    return "; ".join(out)


def _former_release(state: dict[str, Any]) -> str | None:
    """Why a checkpoint is one of a former release that this release cannot resume, or None."""
    try:
        ModelSpec.from_dict(state.get("model_spec") or {})
    except FormerNetwork as exc:
        return str(exc)
    if "popart" not in state:
        return "its value head was trained without PopArt, which this release always has"
    return None


RECIPE = ("sticky_actions", "noop_max", "lr_anneal_frames", "lr_final_fraction")


def resume(
    run: RunDir, learner: Learner, device: torch.device, levels: LevelStats | None = None,
    config: dict[str, Any] | None = None,
) -> Totals:  # fmt: skip
    """Load the run's newest checkpoint into `learner` (and the levels' bests into `levels`);
    the run's totals (zero without one). SystemExit, naming the flags to change, for one of
    another network or of a former release (common/model.py's FormerNetwork, no PopArt); a
    warning where `config` changes a RECIPE setting (defaults changed: docs/WHY-DEFAULTS.md)."""
    path = latest_path(run)
    if path is None:
        log.info("no checkpoint in %s: starting fresh", run.root)
        return Totals()
    state = load(path, device)
    if why := _former_release(state):
        raise SystemExit(
            f"learner: checkpoint {path} was written by an older release ({why}) and cannot be "
            "resumed: start a new --run-dir"
        )
    saved, spec = ModelSpec.from_dict(state["model_spec"]), learner.model.spec
    if saved != spec:
        raise SystemExit(
            f"learner: checkpoint {path} holds another network than the config asks for: "
            f"{_spec_difference(saved, spec)}; resume it with the checkpoint's flags or use "
            "another --run-dir"
        )
    learner.model.load_state_dict(state["model"])
    learner.optimizer.load_state_dict(state["optimizer"])
    learner.popart.load_state_dict(state["popart"])
    learner.updates = int(state["policy_version"])
    learner.sgd_steps = int(state.get("sgd_steps", learner.updates))
    if levels is not None:  # a checkpoint from before the bests were kept has none
        levels.restore(state.get("level_bests", {}))
    log.info("resumed from %s at policy version %d", path.name, learner.updates)
    trained, now = state.get("config", {}), config or {}
    if was := {k: trained[k] for k in RECIPE if k in trained and k in now and trained[k] != now[k]}:
        keep = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in was.items())
        changes = ", ".join(f"{k} {v} -> {now[k]}" for k, v in was.items())
        log.warning("resumed with other settings than the run trained with (%s): to keep the "
                    'run\'s, pass %s (make train: LEARNER_ARGS="%s")', changes, keep, keep)  # fmt: skip
    return Totals(int(state["env_frames"]), int(state["agent_steps"]))
