"""--tensorboard: a real learner trained by a real actor on two levels writes event files whose
scalars TensorBoard reads back, level by level, at the metrics log's env frames; without the
tensorboard package the learner refuses to start and says what to install. (Every declared tag
from the gauges it names: tests/learner/test_telemetry.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common.rundir import RunDir
from learner.tensorboard import INSTALL
from tests import procs

LEVELS = "1-1,1-2"


def test_without_tensorboard_the_learner_refuses_and_says_what_to_install(tmp_path):
    hidden = (
        "import sys; sys.modules['tensorboard'] = None; "  # as if it were not installed
        "from learner.main import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = ["--run-dir", str(tmp_path / "run"), "--tensorboard", "--metrics-port", "0"]
    proc = subprocess.run(
        [sys.executable, "-c", hidden, *argv],
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--tensorboard needs the tensorboard package" in proc.stderr
    assert INSTALL in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_a_learner_writes_the_curves_tensorboard_reads_back(tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason=f"tensorboard not installed: {INSTALL}",
    )
    run = RunDir(tmp_path / "run")
    port = procs.free_port(2)
    learner = procs.learner(
        run.root, port, procs.free_port(), "--tensorboard", "--level", LEVELS,
        "--unroll-length", "16", "--batch-chunks", "1", "--no-progress-steps", "20",
    )  # fmt: skip
    actor = procs.actor(tmp_path, port, 0, procs.free_port(), "--num-envs", "2")

    def both_levels_have_progress_and_entropy() -> bool:
        """A level's entropy is written only by an update that held its steps (one chunk an
        update here), its progress once an episode of it ended: wait for both, on each level."""
        if not run.metrics.exists():
            return False
        seen: dict[str, set[str]] = {lv: set() for lv in LEVELS.split(",")}
        for line in run.metrics.read_text().splitlines():
            try:
                levels = json.loads(line).get("levels") or {}
            except ValueError:
                continue  # a line still being written
            for lv, keys in seen.items():
                keys |= {k for k, v in (levels.get(lv) or {}).items() if v is not None}
        return all({"progress", "entropy"} <= keys for keys in seen.values())

    try:
        procs.wait_until(
            "records with progress and entropy on both levels",
            both_levels_have_progress_and_entropy,
            240,
            [learner, actor],
        )
    finally:
        actor.stop()
        assert learner.stop(30) == 0, learner.output()[-3000:]  # closes the event file
    rows = [json.loads(line) for line in run.metrics.read_text().splitlines()]
    acc = event_accumulator.EventAccumulator(str(run.tensorboard))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for level in LEVELS.split(","):
        assert {f"level/{level}/{k}" for k in ("progress", "flag_rate", "entropy")} <= tags
    assert {"levels/mean_progress", "levels/mean_flag_rate", "episodes/mean_max_x"} <= tags
    assert {"throughput/agent_steps_per_s", "loss/total", "policy/entropy"} <= tags
    # every record is a point, at the env frames of its metrics.jsonl row, with its value
    entropy = acc.Scalars("policy/entropy")
    assert [e.step for e in entropy] == [r["env_frames"] for r in rows]
    assert [e.value for e in entropy] == pytest.approx([r["entropy"] for r in rows], rel=1e-6)
    progress = {e.step: e.value for e in acc.Scalars("level/1-2/progress")}
    last = rows[-1]
    assert progress[last["env_frames"]] == pytest.approx(last["levels"]["1-2"]["progress"])
