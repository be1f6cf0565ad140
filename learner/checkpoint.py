"""Run directory ownership, atomic checkpoints and crash-safe logs.

One run directory belongs to one learner: an exclusive flock on run_dir/.lock, held for the
process's life, makes a second learner refuse to start. Checkpoints are written to a temp file in
the same directory, fsynced, then renamed into place, so a crash never leaves a torn file; the
`latest` file names the newest one and is replaced the same way. The newest `keep` are kept.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)


class RunDirBusy(RuntimeError):
    pass


def lock_run_dir(run_dir: Path) -> int:
    """Take the run directory for this process; RunDirBusy if another learner holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise RunDirBusy(
            f"run dir {run_dir} is in use by another learner (pid {holder}); "
            "stop it or pass another --run-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def unlock_run_dir(fd: int) -> None:
    """Give the run directory back (closing the descriptor drops its lock)."""
    os.close(fd)


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def append_lines(path: Path, lines: list[str]) -> None:
    """Append whole lines to a log (metrics.jsonl, episodes.jsonl) in one write call.

    A crash can still cut the last line short (a kill -9 during the write); the next append then
    starts on a fresh line, so only that fragment is lost, never the record after it. Readers
    skip lines that do not parse.
    """
    if not lines:
        return
    data = ("\n".join(lines) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # a torn line from a crash: keep it apart from this record
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def remove_stale_temps(ckpt_dir: Path) -> list[Path]:
    """Delete the temp files of writes that a crash interrupted; returns what was removed.

    Only the learner holding the run directory's lock writes here, so at its start every temp
    file is a dead process's half-written checkpoint (or `latest`): never loaded, and left alone
    it would cost a checkpoint's size of disk per crash.
    """
    if not ckpt_dir.is_dir():
        return []
    stale = sorted(ckpt_dir.glob(".*.tmp-*"))
    for path in stale:
        path.unlink(missing_ok=True)
        log.warning("removed %s, a write that a crash interrupted", path.name)
    return stale


def save(ckpt_dir: Path, state: dict[str, Any], policy_version: int, keep: int = 3) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"ckpt-{policy_version:010d}.pt"
    _atomic_write(path, lambda f: torch.save(state, f))
    _atomic_write(ckpt_dir / "latest", lambda f: f.write(path.name.encode() + b"\n"))
    for old in sorted(ckpt_dir.glob("ckpt-*.pt"))[:-keep]:
        old.unlink(missing_ok=True)
    return path


def latest_path(ckpt_dir: Path) -> Path | None:
    """The newest checkpoint: the highest version among ckpt-*.pt, each complete (written under
    a temp name, then renamed). `latest` names the same file, unless a crash fell between the
    rename and the pointer's own update: then the newer file wins, and nothing is lost."""
    found = sorted(ckpt_dir.glob("ckpt-*.pt"))
    pointer = ckpt_dir / "latest"
    if pointer.exists():
        named = ckpt_dir / pointer.read_text().strip()
        if not named.exists():
            log.warning("%s names %s, which is missing; using the newest file", pointer, named.name)
        elif found and named != found[-1]:
            log.warning(
                "%s names %s, but %s is newer; using it", pointer, named.name, found[-1].name
            )
    return found[-1] if found else None


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    return torch.load(path, map_location=map_location, weights_only=True)
