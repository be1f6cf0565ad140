"""The run directory's layout, written once, and the two ways anything is written there.

    RUN/config.json         the learner's resolved config
    RUN/checkpoints/        ckpt-<policy version>.pt, the newest few, and `latest` naming the newest
    RUN/metrics.jsonl       a row of the learner's numbers every few seconds (`make report`)
    RUN/episodes.jsonl      a row per training episode the actors report (learning curves)
    RUN/eval/               the eval actor's and `make eval`'s videos and summaries
    RUN/logs/               supervisord's log and its programs'
    RUN/.lock               flocked by the learner that owns the run; holds its pid
    RUN/supervisor.sock     supervisord's XML-RPC socket } also named in
    RUN/supervisord.pid     supervisord's pid file        } deploy/supervisord/mario-impala.conf

Files are replaced whole (`atomic_write`: config.json, checkpoints, `latest`) or appended to
line by line (`append_lines`: the .jsonl logs), so a crash never leaves a torn file behind, at
most a temp file or a torn last line that readers skip.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class RunDir:
    """The paths of one run directory (none is created here)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config = self.root / "config.json"
        self.checkpoints = self.root / "checkpoints"
        self.latest = self.checkpoints / "latest"
        self.metrics = self.root / "metrics.jsonl"
        self.episodes = self.root / "episodes.jsonl"
        self.eval = self.root / "eval"
        self.logs = self.root / "logs"
        self.lock = self.root / ".lock"
        self.supervisor_socket = self.root / "supervisor.sock"
        self.supervisord_pid = self.root / "supervisord.pid"


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
