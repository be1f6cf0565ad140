"""`make soak MINUTES=2`: the chaos soak, short, as CI runs it: real supervisord, learner, actors,
eval actor and rogue peer, with kill -9 of actors and of the learner (also mid-checkpoint)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.rundir import RunDir
from tests import procs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.rehearsal,
    pytest.mark.integration,
    pytest.mark.alone,  # p99 targets
]

VENV = Path(sys.executable).parent.parent


def test_a_two_minute_soak_passes(tmp_path):
    run = tmp_path / "soak"
    argv = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", "soak", f"VENV={VENV}"]
    argv += ["MINUTES=2", f"SOAK_RUN={run}"]
    out = subprocess.run(
        argv, cwd=procs.ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    summary = json.loads((run / "soak.json").read_text())
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert summary["verdict"] == "PASS"
    faults = summary["faults"]
    assert faults["actor_kills"] >= 2 and faults["learner_kills"] >= 1
    assert faults["midwrite_kills"] >= 1
    # every kill -9 the soak made is the one supervisord saw, and nothing else died
    kills = faults["actor_kills"] + faults["learner_kills"] + faults["midwrite_kills"]
    kills += faults["midwrite_missed"]
    assert faults["kill9_exits_in_supervisord_log"] == kills
    assert summary["crashes"] == 0
    # every actor life, the first two and one per kill, read from its /metrics: 4 envs each
    builds = summary["env_builds"]
    assert builds["actor_lives"] == summary["actors"] + faults["actor_kills"]
    assert builds["builds"] == 4 * builds["actor_lives"] and builds["failures"] == 0
    assert len(summary["resume_s"]) >= 2
    assert not RunDir(run).supervisord_pid.exists()  # make down ran
