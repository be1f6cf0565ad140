"""deploy/prometheus/prometheus.yml finds what scripts/service/targets.py writes: every job reads
the file_sd lists of every run, resolved as Prometheus resolves them (against the config's own
directory), and no job names a fixed port that a second run's process would not listen on."""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

from scripts.checkout import ROOT
from scripts.service import targets
from scripts.service.host import Host

CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
JOBS = {"learner": "mario-learner", "actors": "mario-actor", "eval": "mario-eval"}
JOBS["relay"] = "mario-relay"


def scrape_jobs() -> dict[str, str]:
    """Each scrape job's block of prometheus.yml, by its name."""
    text = CONFIG.read_text().split("scrape_configs:", 1)[1]
    blocks = re.split(r"\n\s*- job_name: ", text)[1:]
    return {block.split()[0]: block for block in blocks}


def file_sd_patterns(block: str) -> list[Path]:
    return [(CONFIG.parent / p).resolve() for p in re.findall(r'files: \["([^"]*)"\]', block)]


def test_every_job_reads_file_sd_lists_and_none_a_fixed_target():
    jobs = scrape_jobs()
    assert sorted(jobs) == sorted(JOBS.values())
    for name, block in jobs.items():
        assert "static_configs" not in block, f"{name} names fixed targets"
        assert file_sd_patterns(block), f"{name} reads no file_sd list"


@pytest.mark.parametrize("role", targets.ROLES)
def test_every_runs_lists_are_read_by_their_job(role, tmp_path):
    jobs = scrape_jobs()
    for run in (tmp_path / "runs" / "default", tmp_path / "second"):
        h = Host(run=str(run), relay=True).resolved()  # TARGETS: runs/targets, from the root
        path = (ROOT / targets.paths(h)[role]).resolve()
        for job, block in jobs.items():
            read = any(fnmatch(str(path), str(p)) for p in file_sd_patterns(block))
            assert read == (job == JOBS[role]), (path, job)
