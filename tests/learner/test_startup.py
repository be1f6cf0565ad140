"""Starting a learner where something is already taken: a clear error naming the flag to change,
exit status 1, no traceback, and the run directory free again for the next start; a run
directory that cannot be made is refused as a bad flag is (exit status 2)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from common.metrics import LearnerMetrics
from learner.config import LearnerConfig
from learner.ingest import BindError
from learner.loop import TrainLoop
from tests import procs
from tests.procs import free_port

pytestmark = pytest.mark.integration


@contextmanager
def listening(port: int) -> Iterator[None]:
    """Another program holding 127.0.0.1:port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield


def run_learner(run_dir, port: int, metrics_port: int, *args: str) -> tuple[int, str]:
    """Exit status and output of a learner process expected to refuse to start."""
    proc = procs.learner(run_dir, port, metrics_port, *args)
    try:
        return proc.popen.wait(120), proc.output()
    finally:
        proc.stop()


def loop(run_dir, port: int) -> TrainLoop:
    cfg = LearnerConfig(run_dir=str(run_dir), port=port, device="cpu")
    return TrainLoop(cfg, LearnerMetrics())


@pytest.mark.parametrize(
    ("taken", "message"),
    [
        (0, r"cannot bind tcp://127\.0\.0\.1:\d+ \(chunks, PORT\): .*pass another --port"),
        (1, r"cannot bind tcp://127\.0\.0\.1:\d+ \(weights, PORT\+1\): .*pass another --port"),
        (2, r"cannot serve metrics on 127\.0\.0\.1:\d+: .*pass another --metrics-port"),
    ],
    ids=["chunk-port", "weights-port", "metrics-port"],
)
def test_a_port_in_use_is_refused_with_the_flag_to_change(tmp_path, taken: int, message: str):
    base = free_port(3)  # PORT, PORT+1 for the learner's sockets, PORT+2 for /metrics
    with listening(base + taken):
        code, out = run_learner(tmp_path / "run", base, base + 2)
    assert code == 1, out
    assert "Traceback" not in out
    assert re.search(message, out), out
    # the refused learner left the run directory free
    ok = loop(tmp_path / "run", free_port(2))
    ok.close()


def test_a_run_dir_held_by_another_learner_is_refused(tmp_path):
    holder = loop(tmp_path / "run", free_port(2))
    try:
        code, out = run_learner(tmp_path / "run", free_port(2), 0)
    finally:
        holder.close()
    assert code == 1, out
    assert "is in use by another learner" in out and "--run-dir" in out
    assert "Traceback" not in out


def test_a_loop_that_cannot_bind_frees_the_run_dir_in_process(tmp_path):
    port = free_port(2)
    with listening(port + 1), pytest.raises(BindError, match=r"\(weights, PORT\+1\)"):
        loop(tmp_path / "run", port)
    again = loop(tmp_path / "run", free_port(2))  # would raise RunDirBusy if the lock leaked
    again.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is there: nothing to refuse")
def test_cuda_asked_for_where_there_is_none_is_refused_with_the_flag_to_change(tmp_path):
    code, out = run_learner(tmp_path / "run", free_port(2), 0, "--device", "cuda")
    assert code == 1, out
    assert "--device cuda asked for, but torch sees no CUDA device; pass --device cpu" in out
    assert "Traceback" not in out


@pytest.mark.parametrize("run_dir", ["/proc/nope", "/dev/null/run"])
def test_a_run_dir_that_cannot_be_made_is_refused_with_the_flag_to_change(run_dir):
    argv = [sys.executable, "-m", "learner", "--run-dir", run_dir, "--port", str(free_port(2))]
    argv += ["--metrics-port", "0", "--device", "cpu"]
    out = subprocess.run(argv, cwd=procs.ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"--run-dir {run_dir}: cannot make the directory {run_dir}" in out.stderr
    assert "pass a --run-dir that can be made and written" in out.stderr
    assert "Traceback" not in out.stderr
