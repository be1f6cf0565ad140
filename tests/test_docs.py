"""The user-facing docs (README.md, docs/ but the dated studies in docs/lab/): every relative link
reaches a file and, with `#anchor`, a heading of it; every `make` line of a code block names a
target and variables the Makefile has, so a documented command cannot silently do nothing."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from scripts.checkout import ROOT

LAB = ROOT / "docs" / "lab"
REFERENCE = ROOT / "docs" / "reference"
PAGES = sorted(
    [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if not p.is_relative_to(LAB))]
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def links(page: Path) -> list[str]:
    return [
        m.group(1)
        for m in LINK.finditer(FENCE.sub("", page.read_text()))
        if not m.group(1).startswith(("http://", "https://", "mailto:"))
    ]


def link_problems(page: Path) -> list[str]:
    bad = []
    for link in links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if target.is_relative_to(REFERENCE) and not REFERENCE.exists():
            continue  # the generated reference is written by its own command
        if not target.exists():
            bad.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            bad.append(f"{link}: {target.name} has no heading '#{anchor}'")
    return bad


def makefile() -> tuple[set[str], str]:
    text = (ROOT / "Makefile").read_text()
    targets = {m.group(1) for m in re.finditer(r"^([a-z][\w-]*):", text, re.M)}
    return targets, text


def make_commands(page: Path) -> list[list[str]]:
    """The argument lists of every `make` in the page's code blocks (after `sudo`, `timeout`,
    `cd DIR &&`), continuation lines joined and comments dropped."""
    out = []
    for block in FENCE.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines()[1:-1]:
            for part in re.split(r"&&|;", line.split(" #")[0]):
                try:
                    words = shlex.split(part, comments=True)
                except ValueError:
                    continue
                while words and words[0] in ("sudo", "timeout"):
                    command, words = words[0], words[1:]
                    if command == "timeout":  # its options (-s SIGNAL), then its duration
                        while words and words[0].startswith("-"):
                            words = words[2 if words[0] in ("-s", "--signal", "-k") else 1 :]
                        words = words[1:]
                if words[:1] == ["make"]:
                    out.append(words[1:])
    return out


def make_problems(page: Path) -> list[str]:
    targets, text = makefile()
    bad = []
    for args in make_commands(page):
        for word in args:
            if word.startswith("-"):
                continue
            if "=" in word:
                var = word.split("=")[0]
                if not re.search(rf"\b{re.escape(var)}\b", text):
                    bad.append(f"make {' '.join(args)}: the Makefile never reads {var}")
            elif word not in targets:
                bad.append(f"make {' '.join(args)}: no target {word}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_link_reaches_a_file_and_its_heading(page):
    assert not (bad := link_problems(page)), f"{name(page)}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_make_line_names_what_the_makefile_has(page):
    assert not (bad := make_problems(page)), f"{name(page)}: " + "; ".join(bad)


def test_the_checks_can_fail(tmp_path):
    """A missing file, a missing heading, an unknown target and a variable the Makefile never
    reads are each named."""
    (tmp_path / "page.md").write_text(
        "# Title\n[a](missing.md) [b](#nowhere) [c](#title)\n"
        "```sh\nsudo make trian\ntimeout -s INT 60 make up NO_SUCH_SETTING=1   # ignored\n"
        "cd x && make train \\\n    FRAMES=1\n```\n"
    )
    page = tmp_path / "page.md"
    assert link_problems(page) == [
        "missing.md: no such file",
        "#nowhere: page.md has no heading '#nowhere'",
    ]
    assert make_commands(page) == [["trian"], ["up", "NO_SUCH_SETTING=1"], ["train", "FRAMES=1"]]
    assert make_problems(page) == [
        "make trian: no target trian",
        "make up NO_SUCH_SETTING=1: the Makefile never reads NO_SUCH_SETTING",
    ]
