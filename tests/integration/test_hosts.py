"""`make hosts MINUTES=2`: the multi-host rehearsal, short, as CI runs it: docs/DEPLOY.md's layout
(the learner host with its actors and the eval actor, and an actor host) in network namespaces,
CURVE on, Prometheus scraping every host; each kind of fault once, with short outages (the
20-minute run's are 20-30 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.dev.chaos.hosts.__main__ import unavailable
from scripts.dev.chaos.hosts.schedule import KINDS
from tests import procs

WHY = unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.rehearsal,
    pytest.mark.integration,
    pytest.mark.alone,  # network namespaces: the machine's, compared before and after
    pytest.mark.skipif(WHY is not None, reason=f"the rehearsal cannot run here: {WHY}"),
]

VENV = Path(sys.executable).parent.parent
SHORT = ("--partition-s 8 --learner-link-s 6 --block-s 8 --death-s 8 --gap-s 8 "
         "--actor-timeout-s 4 --num-envs 2")  # fmt: skip


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.startswith("mario-")}


def test_a_two_minute_rehearsal_passes_and_leaves_no_host_behind(tmp_path):
    before = namespaces()
    run = tmp_path / "hosts"
    argv = ["make", "--no-print-directory", "-o", f"{VENV}/.installed", "hosts", f"VENV={VENV}"]
    argv += ["MINUTES=2", f"HOSTS_RUN={run}", f"HOSTS_ARGS={SHORT}"]
    out = subprocess.run(
        argv, cwd=procs.ROOT, capture_output=True, text=True, timeout=1200, check=False
    )
    assert (run / "hosts.json").exists(), out.stdout[-6000:] + out.stderr[-3000:]
    summary = json.loads((run / "hosts.json").read_text())
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert summary["verdict"] == "PASS"
    faults = summary["faults"]
    assert {f["kind"] for f in faults} == set(KINDS)
    cut = [f for f in faults if f["kind"] == "partition"]
    assert all(f["streaming_again_s"] and f["sent_while_cut"] for f in cut)  # measured, not empty
    assert summary["chunks"]["learner_lives"] >= 2  # killed, started again, scraped again
    assert summary["chunks"]["chunks_received_by_learner"] > 0
    # Prometheus scraped every process of every host: the learner, its 2 actors and the eval
    # actor, the actor host's 2 actors and relay, and the replacement host's
    assert len(summary["prometheus"]["targets_ever_up"]) >= 10
    assert "mario-eval" in " ".join(summary["prometheus"]["targets_ever_up"])
    assert namespaces() == before  # every host removed, the dead one too
