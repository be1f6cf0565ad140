"""`make pages`: the command blocks of README.md, getting-started and each how-to page run as a
reader types them, at the shortened lengths their markers give (scripts/dev/pages), each page on
network namespaces with checkouts of its own, all from one short run. A line that fails, or a
foreground command that does not stop cleanly on Ctrl-C, fails its page; a line its marker
skips says why it cannot run here."""

from __future__ import annotations

import subprocess

import pytest

from scripts.dev.chaos import netns
from scripts.dev.pages import rehearse
from scripts.dev.pages.blocks import PAGES, UNMARKED

WHY = netns.unavailable() or rehearse.stale_venv()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.rehearsal,
    pytest.mark.integration,
    pytest.mark.alone,  # network namespaces: the machine's, compared before and after
    pytest.mark.skipif(WHY is not None, reason=f"the pages' rehearsal cannot run here: {WHY}"),
]


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.startswith("mario-")}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The short run every page's reader has made (make train to its first update)."""
    return rehearse.seed(tmp_path_factory.mktemp("pages"))


@pytest.mark.parametrize("page", [p for p in PAGES if p not in UNMARKED])
def test_the_pages_commands_run_as_written(page, trained, tmp_path):
    before = namespaces()
    outcomes = rehearse.rehearse(page, tmp_path / "p", trained)
    failed = rehearse.failures(outcomes)
    assert not failed, "\n\n".join(f"{o.where} ({o.machine}) {o.command}: {o.why}" for o in failed)
    assert {o.result for o in outcomes} <= {"passed", "skipped", "not run"}
    assert all(o.why for o in outcomes if o.result != "passed")  # each says why not
    assert namespaces() == before  # every machine removed, what ran there with it
