"""deploy/slurm/mario-impala.sbatch on a real two-node Slurm cluster (tests/slurm.py): the job
trains, `scancel` stops it with a final checkpoint, and a second job resumes from it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from scripts.checkout import ROOT
from tests import slurm

SCRIPT = ROOT / "deploy/slurm/mario-impala.sbatch"
WHY = slurm.unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.rehearsal,
    pytest.mark.integration,
    pytest.mark.alone,  # a cluster on this machine, its second node in a network namespace
    pytest.mark.skipif(WHY is not None, reason=f"no Slurm here: {WHY}"),
]

# component 0 (the learner) : component 1 (two actors), sized for the test's nodes
SIZES = ["--ntasks=1", "--cpus-per-task=1", "--mem-per-cpu=1500", ":", "--ntasks=2",
         "--cpus-per-task=1", "--mem-per-cpu=700"]  # fmt: skip


def submit(cluster: slurm.Cluster, run: Path, tmp_path: Path) -> str:
    env = {
        "MARIO_RUN": str(run),
        "MARIO_PYTHON": sys.executable,
        "MARIO_PORT": str(slurm.free_ports(3)),
        "MARIO_LEARNER_ARGS": "--device cpu --unroll-length 16 --batch-chunks 1 "
        "--checkpoint-interval-s 5 --heartbeat-interval-s 0.5",
        "MARIO_ACTOR_ARGS": "--num-envs 1",
        "MARIO_ACTOR_METRICS_BASE": "0",
        "MARIO_LEARNER_METRICS_PORT": str(slurm.free_ports()),
    }
    cluster.env.update(env)
    out = cluster.run(["sbatch", "--parsable", f"--chdir={ROOT}", f"--output={tmp_path}/job-%j.out",
                       *SIZES, str(SCRIPT)])  # fmt: skip
    return out.stdout.strip().split(";")[0]


def learner_log(run: Path, job: str) -> str:
    path = run / "logs" / f"learner-{job}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_the_job_trains_scancel_checkpoints_and_the_next_job_resumes(tmp_path):
    run = tmp_path / "run"
    with slurm.Cluster(tmp_path / "slurm") as cluster:
        first = submit(cluster, run, tmp_path)
        cluster.wait(lambda: len(list((run / "checkpoints").glob("ckpt-*.pt"))) >= 2
                     and "registered" in "".join(p.read_text() for p in run.glob("logs/actors-*")),
                     "a training job: actors registered, checkpoints written", 300)  # fmt: skip
        cluster.run(["scancel", first])
        cluster.wait(lambda: cluster.job_done(first), "the cancelled job to end", 120)
        stopped = re.search(r"stopped at policy version (\d+)", learner_log(run, first))
        assert stopped, f"no final checkpoint:\n{learner_log(run, first)[-3000:]}"
        version = int(stopped.group(1))
        assert version > 0
        assert (run / "checkpoints" / "latest").read_text().strip() == f"ckpt-{version:010d}.pt"

        second = submit(cluster, run, tmp_path)
        cluster.wait(lambda: "resumed from" in learner_log(run, second), "the second job", 300)
        assert f"resumed from ckpt-{version:010d}.pt at policy version {version}" in learner_log(
            run, second
        )
        cluster.run(["scancel", second])
        cluster.wait(lambda: cluster.job_done(second), "the second job to end", 120)
