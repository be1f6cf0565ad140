"""Every command block of README.md, getting-started and the how-to pages says how the pages'
rehearsal runs it (tests/integration/test_pages.py) or why it cannot run here, in a marker the
rehearsal can read; a block added without one fails here, in `make test`, before any rehearsal."""

from __future__ import annotations

import re

import pytest

from scripts.checkout import ROOT
from scripts.dev.pages import blocks
from scripts.dev.pages.blocks import PAGES, UNMARKED, MarkerError, problems

MARKED = [p for p in PAGES if p not in UNMARKED]


@pytest.mark.parametrize("page", MARKED)
def test_every_command_block_has_a_marker_that_reads(page):
    assert not (bad := problems(page)), "\n".join(bad)


@pytest.mark.parametrize("page", MARKED)
def test_the_markers_make_variables_are_the_makefiles(page):
    makefile = (ROOT / "Makefile").read_text()
    unread = [f"{where}: {name}" for where, name in blocks.make_variables(page)
              if not re.search(rf"\b{re.escape(name)}\b", makefile)]  # fmt: skip
    assert not unread, f"the Makefile never reads: {unread}"


def test_the_rehearsed_pages_are_readme_getting_started_and_every_how_to():
    howtos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "howto").glob("*.md"))
    assert PAGES[:2] == ("README.md", "docs/getting-started.md")
    assert sorted(PAGES[2:]) == howtos


@pytest.mark.parametrize("page", sorted(UNMARKED))
def test_a_page_left_unmarked_still_lacks_its_markers(page):
    """A page on the list whose blocks have all gained markers must leave it, to be rehearsed."""
    assert page in PAGES
    assert any(b.marker is None and b.language == "sh" for b in blocks.blocks(page)), (
        f"{page} has a marker above every block: drop it from UNMARKED"
    )


PAGE = """\
# A page

<!-- rehearsal: EPISODES=1 host far=10.0.0.5
make train => until 'updates +[1-9]'
make eval CKPT= => sub ckpt-1.pt '$(cat latest)'
rsync => on far instead 'cp -a {far}/keys runs/keys'
-->
```sh
make train   # Ctrl-C stops
# a comment line
make eval CKPT=runs/x/ckpt-1.pt \\
    POLICY=sampled   # continued
make learner HOST=10.0.0.5
rsync -a far:keys runs/
```

<!-- rehearsal: write run.toml -->
```toml
[learner]
```
"""


def test_a_marker_gives_each_line_its_directives():
    found = blocks.blocks("page.md", PAGE)
    assert [(b.language, b.number) for b in found] == [("sh", 8), ("toml", 18)]
    steps = found[0].steps()
    assert [(s.line.number, s.line.text) for s in steps] == [
        (9, "make train"),
        (11, "make eval CKPT=runs/x/ckpt-1.pt POLICY=sampled"),
        (13, "make learner HOST=10.0.0.5"),
        (14, "rsync -a far:keys runs/"),
    ]
    addresses, checkouts = {"here": "10.9.9.2", "far": "10.9.9.3"}, {"far": "/tmp/far"}
    commands = [s.command(addresses, checkouts) for s in steps]
    assert commands == [
        "make train EPISODES=1",
        "make eval CKPT=runs/x/$(cat latest) POLICY=sampled EPISODES=1",
        "make learner HOST=10.9.9.3 EPISODES=1",
        "cp -a /tmp/far/keys runs/keys",
    ]
    assert steps[0].directives.until == "updates +[1-9]"
    assert [s.directives.on for s in steps] == ["", "", "", "far"]
    assert found[1].own.write == "run.toml"
    assert problems("page.md", PAGE) == []


@pytest.mark.parametrize(
    ("marker", "named"),
    [
        ("", "a ```sh block without a <!-- rehearsal: ... --> marker"),
        ("<!-- rehearsal: frobnicate -->", "unknown directive 'frobnicate'"),
        ("<!-- rehearsal: skip -->", "`skip` needs a reason"),
        ("<!-- rehearsal: until '(' -->", "`until` '('"),
        ("<!-- rehearsal:\nmake eval => EPISODES=1\n-->", "`make eval =>` matches no line"),
        ("<!-- rehearsal:\nls => N=1\n-->", "variables on a line that is not a make command"),
        ("<!-- rehearsal: on far -->", "`on far`, a machine no `host` of the block names"),
        ("<!-- rehearsal:\nls => host a=1.2.3.4\n-->", "`host` and `before` are the block's own"),
        ("<!-- rehearsal: sub nowhere x -->", "`sub 'nowhere'`: not in the line"),
        ("<!-- rehearsal: until a repeat b -->", "one of until, started and repeat"),
        ("<!-- rehearsal:\nmake train\n-->", "expected `PREFIX => DIRECTIVES`"),
    ],
)
def test_a_marker_that_cannot_be_rehearsed_is_named(marker, named):
    page = f"# A page\n\n{marker}\n```sh\nls -l   # the files\nmake train\n```\n"
    assert any(named in p for p in problems("page.md", page)), problems("page.md", page)


def test_a_block_of_another_language_needs_no_marker_but_one_says_write():
    assert problems("page.md", "```toml\n[learner]\n```\n") == []
    assert problems("page.md", "<!-- rehearsal: N=1 -->\n```toml\n[learner]\n```\n") == [
        "page.md:2: a ```toml block's marker says `write FILE`"
    ]


def test_a_marker_for_another_block_is_not_this_ones():
    """Only a comment right above a fence is its marker, white space between them at most."""
    page = "<!-- rehearsal: N=1 -->\ntext\n```sh\nmake up\n```\n"
    assert problems("page.md", page) == [
        "page.md:3: a ```sh block without a <!-- rehearsal: ... --> marker"
    ]
    assert problems("page.md", "<!-- rehearsal: N=1 -->\n\n```sh\nmake up\n```\n") == []


def test_a_quoted_hash_is_not_a_comment():
    (block,) = blocks.blocks("page.md", "<!-- rehearsal: -->\n```sh\necho 'a # b'  # c\n```\n")
    assert [line.text for line in block.lines()] == ["echo 'a # b'"]
    with pytest.raises(MarkerError, match="No closing quotation"):
        blocks.parse_directives("until 'x", "page.md:1")
