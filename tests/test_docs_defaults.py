"""Where a user-facing page states a default, it states the code's: each statement below is
found in README.md and docs/*.md (not docs/lab/, whose dated studies keep the figures of their
day) and compared with the default read from the config dataclasses, never repeated here."""

from __future__ import annotations

import dataclasses
import re

import pytest

from common import wire
from common.env_spec import EnvSpec
from learner.config import ONE_LEVEL_FRONTIER_STARTS, LearnerConfig
from scripts.checkout import ROOT

NUMBER = r"(\d+(?:\.\d+)?(?:e-?\d+)?)"


def default(cls: type, name: str) -> float:
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    return float(field.default)


# (what, the code's default, every phrasing that states it; group 1 is the figure)
STATEMENTS = [
    (
        "the learning rate",
        default(LearnerConfig, "learning_rate"),
        [
            rf"`--learning-rate`[^|\n]*\| {NUMBER} \|",  # a table row: flag | default
            rf"`--learning-rate` {NUMBER}",
            rf"Adam {NUMBER}",
            rf"today's defaults?\W*\([^)]*learning rate {NUMBER}",
            rf"learning rate[^.\n]{{0,20}}\bdefault[^.\n\d]{{0,20}}{NUMBER}",
        ],
    ),
    (
        "the actor's silence timeout (the learner's heartbeat intervals), s",
        wire.SILENT_HEARTBEATS * default(LearnerConfig, "heartbeat_interval_s"),
        [
            rf"{NUMBER} s \((?:five|{wire.SILENT_HEARTBEATS}) (?:of the learner's|heartbeat)",
            rf"{NUMBER} s \(`--learner-timeout-s`\)",
            rf"`--learner-timeout-s`(?:, `[^`]+`)* \| {NUMBER} s",
            rf"`--learner-timeout-s`[^.\n\d]{{0,30}}\bdefault[^.\n\d]{{0,10}}{NUMBER}",
        ],
    ),
    (
        "the share of frontier starts on one level",
        ONE_LEVEL_FRONTIER_STARTS,
        [
            rf"`--frontier-starts` \| {NUMBER}",  # a table row: flag | default
            rf"frontier starts[^.\n\d]{{0,20}}\bdefault[^.\n\d]{{0,20}}{NUMBER}",
        ],
    ),
    (
        "the no-progress cutoff (training, make eval and the eval actor), agent steps",
        default(EnvSpec, "no_progress_steps"),
        [
            rf"no-progress cutoff \({NUMBER} agent steps",
            rf"{NUMBER}-step no-progress cutoff",
            rf"`--no-progress-steps` \| {NUMBER}",
            rf"`no_progress_steps`, default {NUMBER}",
        ],
    ),
]


def pages() -> dict[str, str]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    paths = [ROOT / "README.md", *(p for p in docs if "lab" not in p.relative_to(ROOT).parts)]
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def stated(patterns: list[str]) -> list[tuple[str, int, float]]:
    """(page, line, figure) of every statement matching one of `patterns`."""
    out = []
    for page, text in pages().items():
        for pattern in patterns:
            for m in re.finditer(pattern, text):
                out.append((page, text.count("\n", 0, m.start()) + 1, float(m.group(1))))
    return out


@pytest.mark.parametrize(("what", "code", "patterns"), STATEMENTS, ids=[s[0] for s in STATEMENTS])
def test_a_page_that_states_a_default_states_the_codes(what, code, patterns):
    found = stated(patterns)
    assert found, f"no page states {what} any more: drop its phrasings here"
    wrong = [f"{page}:{line} says {figure:g}" for page, line, figure in found if figure != code]
    assert not wrong, f"{what} is {code:g} in the code, but " + "; ".join(wrong)
