"""The run directory's layout, written once, and the two ways anything is written there: files
replaced whole (`atomic_write`: config.json, checkpoints, `latest`) and logs appended to line by
line (`append_lines`: the .jsonl logs). A crash never leaves a torn file behind, at most a temp
file or a torn last line that readers skip.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

BEST_POLICY = "best-policy.pt"  # in the eval dir: the eval actor's best policy (actor/best.py)


class RunDir:
    """The paths of one run directory (none is created here)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config = self.root / "config.json"  # the learner's resolved config
        self.checkpoints = self.root / "checkpoints"  # ckpt-<policy version>.pt, the newest few
        self.latest = self.checkpoints / "latest"  # names the newest checkpoint
        self.metrics = self.root / "metrics.jsonl"  # the learner's numbers every few seconds
        self.episodes = self.root / "episodes.jsonl"  # a row per training episode
        self.tensorboard = self.root / "tensorboard"  # --tensorboard's event files
        self.eval = self.root / "eval"  # the eval actor's and `make eval`'s videos, summaries
        self.best_policy = self.eval / BEST_POLICY  # never rotated; `make eval` plays it
        self.logs = self.root / "logs"  # supervisord's log and its programs'
        self.lock = self.root / ".lock"  # flocked by the learner that owns the run; its pid
        # supervisord's, named in deploy/supervisord/mario-impala.conf too
        self.supervisor_socket = self.root / "supervisor.sock"
        self.supervisord_pid = self.root / "supervisord.pid"


class RunDirError(RuntimeError):
    """A directory a run writes in cannot be made, or written in; the message says why."""


def make_writable(path: Path) -> None:
    """Make the directory `path` (and its parents) unless it exists, and check that a file can
    be written in it: RunDirError, saying why not, before anything is started that would write
    there (the caller adds which setting to change)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise RunDirError(f"cannot make the directory {path}: {exc.filename} is a file") from exc
    except OSError as exc:
        raise RunDirError(f"cannot make the directory {path} ({_reason(exc)})") from exc
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise RunDirError(f"cannot write in the directory {path} ({exc.strerror or exc})") from exc


def _reason(exc: OSError) -> str:
    return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc.strerror or exc)


def atomic_write(path: Path, content: bytes | Callable[[BinaryIO], object]) -> None:
    """Write `path` whole or not at all: `content` (bytes, or a function that writes them to the
    file it is given) goes to a temp file beside it (.NAME.tmp-PID), which is fsynced and renamed
    over `path`; the directory is fsynced so that the rename survives a power cut. A reader sees
    the old file or the new one; a crash leaves at most the temp file (the learner removes those
    in checkpoints/ when it starts)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def temp_files(directory: Path) -> list[Path]:
    """The temp files of `atomic_write`s in `directory` that a crash interrupted (or in flight)."""
    return sorted(directory.glob(".*.tmp-*"))


def append_lines(path: Path, lines: list[str]) -> None:
    """Append whole lines to a log (metrics.jsonl, episodes.jsonl) in one write call. A crash can
    still cut the last line short; the next append starts on a fresh line, so only that fragment
    is lost, never the record after it (readers skip lines that do not parse)."""
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
