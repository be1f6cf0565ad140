"""The command blocks of the user's pages and the marker above each that says how it is rehearsed.

Every ```sh block of README.md, docs/getting-started.md and docs/howto/*.md sits right under an
HTML comment (invisible on the rendered page) that says how the rehearsal runs it at a
shortened length, or why it cannot run here:

    <!-- rehearsal: DIRECTIVES            the block's own, given to each of its command lines
    PREFIX => DIRECTIVES                  more for the lines that start with PREFIX (the first
    ... -->                               clause that matches a line is its)

A command line is a line of the block that is not blank or a comment (continuations joined).
With no directive a line runs as written on the page's machine `here`: a network namespace,
where the page's ports are free, and a copy of the checkout whose runs/default holds a short run
(rehearse.py). Directives are words, quoted as in the shell:

    NAME=value        added at the end of a `make` line (make takes the last): EPISODES=1, N=1
    skip REASON...    not run here; the rest of the clause says why (a GPU, another machine)
    needs PROGRAM     run where PROGRAM is installed; elsewhere reported as not run
    until REGEX       a command that runs until Ctrl-C: once REGEX shows in its output, Ctrl-C,
                      and it must stop cleanly
    started REGEX     the same, but once REGEX shows the block goes on with it running (a
                      second terminal); Ctrl-C at the block's end, the newest first
    repeat REGEX      a check: run again, once a second, until a run exits as `exits` says
                      with REGEX in its output
    exits N,M         the exit statuses that pass (0 unless given)
    on HOST           run on HOST, a machine of the block's own (`host`) with a fresh checkout
    sub OLD NEW       OLD replaced by NEW in the line before it runs
    instead COMMAND   COMMAND runs in the line's place (a step that needs what no namespace
                      has: another machine's ssh)
    host NAME=ADDRESS (the block's only) a machine NAME, and ADDRESS, the page's address of it,
                      replaced by its own in every line; `{NAME}` in sub and instead is its
                      checkout
    before COMMAND    (the block's only) run first: what the reader has running at that point
    write FILE        (a block of another language) its text is the file FILE in the checkout

REGEX is Python's, searched line by line. After each block the rehearsal stops what it left
running: the `started` commands, then `make down` for each run directory whose supervisord runs.
This module only reads; rehearse.py runs what it reads.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from scripts.checkout import ROOT

# The pages whose blocks are rehearsed, in the order a new user meets them.
PAGES = (
    "README.md",
    "docs/getting-started.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "howto").glob("*.md")),
)
# Pages whose blocks have no markers yet, with why; one that gains them must leave this list.
UNMARKED: dict[str, str] = {}

MARKER = "rehearsal:"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
# a marker: the comment right above a fence, only white space between them
MARKED = re.compile(r"<!--\s*rehearsal:((?:(?!-->).)*)-->\s*\Z", re.S)
WORDS_WITH_ARGUMENT = ("needs", "until", "started", "repeat", "exits", "on", "instead", "host")
WORDS_WITH_ARGUMENT += ("before", "write")
BLOCK_ONLY = ("host", "before")


class MarkerError(ValueError):
    """A marker that cannot be read; the message names the page, its line and what to fix."""


@dataclass(frozen=True)
class Directives:
    variables: tuple[str, ...] = ()
    skip: str = ""
    needs: str = ""
    until: str = ""
    started: str = ""
    repeat: str = ""
    exits: tuple[int, ...] = (0,)
    on: str = ""
    subs: tuple[tuple[str, str], ...] = ()
    instead: str = ""
    hosts: tuple[tuple[str, str], ...] = ()  # (name, the page's address)
    before: tuple[str, ...] = ()
    write: str = ""

    def merged(self, more: Directives) -> Directives:
        """These, with `more` in addition (its variables and subs after these; its other
        directives in place of these)."""
        out = {}
        for name in Directives.__dataclass_fields__:
            mine, theirs = getattr(self, name), getattr(more, name)
            if name in ("variables", "subs"):
                out[name] = mine + theirs
            else:
                out[name] = theirs if theirs != getattr(Directives(), name) else mine
        return Directives(**out)


@dataclass(frozen=True)
class Clause:
    prefix: str  # "" for the block's own
    directives: Directives


@dataclass(frozen=True)
class Line:
    """One command line of a block, as the reader would type it."""

    number: int  # in the page
    text: str  # continuations joined, the comment dropped

    @property
    def is_make(self) -> bool:
        return self.text.split(maxsplit=1)[:1] == ["make"]


@dataclass(frozen=True)
class Step:
    """A line and how the rehearsal runs it."""

    page: str
    line: Line
    directives: Directives

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line.number}"

    def command(self, addresses: dict[str, str], checkouts: dict[str, Path]) -> str:
        """What runs: the line with its subs, the hosts' addresses and its variables, or its
        `instead`. `addresses` and `checkouts` are the machines' by name."""
        d = self.directives

        def fill(text: str) -> str:
            for name, path in checkouts.items():
                text = text.replace("{" + name + "}", str(path))
            return text

        text = fill(d.instead) if d.instead else self.line.text
        if not d.instead:
            for old, new in d.subs:
                text = text.replace(old, fill(new))
        for name, page_address in d.hosts:
            text = re.sub(rf"(?<![\d.]){re.escape(page_address)}(?![\d])", addresses[name], text)
        if d.variables and not d.instead:
            text += " " + " ".join(shlex.quote(v) for v in d.variables)
        return text


@dataclass(frozen=True)
class Block:
    page: str
    number: int  # the fence's line in the page
    language: str
    text: str
    marker: str | None  # the comment's text after "rehearsal:", or None: no marker
    clauses: tuple[Clause, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.page}:{self.number}"

    @property
    def own(self) -> Directives:
        return self.clauses[0].directives if self.clauses else Directives()

    def lines(self) -> list[Line]:
        """The command lines: continuations joined, comments and blank lines dropped."""
        out, pending, start = [], "", 0
        for offset, raw in enumerate(self.text.splitlines()):
            if not pending:
                start = self.number + 1 + offset
            if raw.rstrip().endswith("\\"):
                pending += raw.rstrip()[:-1].rstrip() + " "
                continue
            text = strip_comment(pending + raw.strip()).strip()
            pending = ""
            if text:
                out.append(Line(start, text))
        return out

    def steps(self) -> list[Step]:
        """Each command line with the directives that apply to it."""
        out = []
        for line in self.lines():
            d = self.own
            for clause in self.clauses[1:]:
                if matches(clause.prefix, line):
                    d = d.merged(clause.directives)
                    break
            out.append(Step(self.page, line, d))
        return out


def strip_comment(text: str) -> str:
    """`text` without a shell comment (a `#` at a word's start, outside quotes)."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i]
    return text


def matches(prefix: str, line: Line) -> bool:
    return " ".join(line.text.split()).startswith(" ".join(prefix.split()))


def parse_directives(text: str, where: str) -> Directives:
    """The directives of one clause (see the module's docstring)."""
    skip = ""
    if m := re.search(r"(?:^|\s)skip(?:\s+(.*))?$", text, re.S):
        skip = " ".join((m.group(1) or "").split())
        if not skip:
            raise MarkerError(
                f"{where}: `skip` needs a reason (what this line needs that is missing)"
            )
        text = text[: m.start()]
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise MarkerError(f"{where}: {exc} in {text.strip()!r}") from None
    values: dict[str, object] = {"skip": skip}
    variables, subs, hosts, before = [], [], [], []
    i = 0
    while i < len(words):
        word = words[i]
        if re.fullmatch(r"[A-Z][A-Z0-9_]*=.*", word):
            variables.append(word)
            i += 1
            continue
        if word == "sub":
            if i + 2 >= len(words):
                raise MarkerError(f"{where}: `sub` takes OLD and NEW")
            subs.append((words[i + 1], words[i + 2]))
            i += 3
            continue
        if word not in WORDS_WITH_ARGUMENT:
            raise MarkerError(
                f"{where}: unknown directive {word!r}; the directives are NAME=value, skip, sub, "
                + ", ".join(WORDS_WITH_ARGUMENT)
            )
        if i + 1 >= len(words):
            raise MarkerError(f"{where}: `{word}` takes an argument")
        argument = words[i + 1]
        i += 2
        if word == "host":
            name, _, address = argument.partition("=")
            if not name or not address:
                raise MarkerError(f"{where}: `host` takes NAME=ADDRESS, got {argument!r}")
            hosts.append((name, address))
        elif word == "before":
            before.append(argument)
        elif word == "exits":
            try:
                values["exits"] = tuple(int(s) for s in argument.split(","))
            except ValueError:
                raise MarkerError(f"{where}: `exits` takes N or N,M, got {argument!r}") from None
        else:
            if word in ("until", "started", "repeat"):
                try:
                    re.compile(argument)
                except re.error as exc:
                    raise MarkerError(f"{where}: `{word}` {argument!r}: {exc}") from None
            values[word] = argument
    d = Directives(variables=tuple(variables), subs=tuple(subs), hosts=tuple(hosts),
                   before=tuple(before), **values)  # type: ignore[arg-type]  # fmt: skip
    if len([w for w in (d.until, d.started, d.repeat) if w]) > 1:
        raise MarkerError(f"{where}: one of until, started and repeat at most")
    return d


def parse_marker(marker: str, where: str) -> tuple[Clause, ...]:
    first, *rest = marker.split("\n")
    clauses = [Clause("", parse_directives(first, where))]
    for offset, raw in enumerate(rest, 1):
        if not raw.strip():
            continue
        here = f"{where} (marker line {offset + 1})"
        prefix, arrow, text = raw.partition("=>")
        if not arrow or not prefix.strip():
            raise MarkerError(f"{here}: expected `PREFIX => DIRECTIVES`, got {raw.strip()!r}")
        d = parse_directives(text, here)
        if d.hosts or d.before:
            raise MarkerError(f"{here}: `host` and `before` are the block's own (its first line)")
        clauses.append(Clause(prefix.strip(), d))
    return tuple(clauses)


def blocks(page: str, text: str | None = None) -> list[Block]:
    """Every fenced block of `page` (relative to the checkout) with its marker, read."""
    if text is None:
        text = (ROOT / page).read_text()
    out = []
    for m in FENCE.finditer(text):
        number = text.count("\n", 0, m.start()) + 1
        found = MARKED.search(text[: m.start()])
        marker = found.group(1).strip(" \t") if found else None
        block = Block(page, number, m.group(1), m.group(2), marker)
        if marker is not None:
            block = replace(block, clauses=parse_marker(marker, block.where))
        out.append(block)
    return out


def problems(page: str, text: str | None = None) -> list[str]:
    """What keeps `page`'s blocks from being rehearsed as their markers say: a ```sh block
    without a marker, a marker that cannot be read, a clause that matches no line, variables on a
    line that is not a `make` command, a machine no `host` names, a marker on a block of another
    language without `write`."""
    try:
        found = blocks(page, text)
    except MarkerError as exc:
        return [str(exc)]
    bad = []
    for block in found:
        if block.marker is None:
            if block.language == "sh":
                bad.append(f"{block.where}: a ```sh block without a <!-- {MARKER} ... --> marker")
            continue
        if block.language != "sh":
            if not block.own.write:
                bad.append(f"{block.where}: a ```{block.language} block's marker says `write FILE`")
            continue
        if block.own.write:
            bad.append(f"{block.where}: `write` is for a block of another language than sh")
        lines = block.lines()
        for clause in block.clauses[1:]:
            if not any(matches(clause.prefix, line) for line in lines):
                bad.append(f"{block.where}: `{clause.prefix} =>` matches no line of the block")
        names = {name for name, _ in block.own.hosts}
        for step in block.steps():
            d = step.directives
            if d.variables and not step.line.is_make and not (d.skip or d.instead):
                bad.append(f"{step.where}: variables on a line that is not a make command")
            if d.on and d.on not in names:
                bad.append(f"{step.where}: `on {d.on}`, a machine no `host` of the block names")
            for old, _ in d.subs:
                if old not in step.line.text and not d.skip:
                    bad.append(f"{step.where}: `sub {old!r}`: not in the line")
    return bad


def make_variables(page: str, text: str | None = None) -> list[tuple[str, str]]:
    """(where, NAME) of every make variable the markers of `page` add."""
    return [
        (step.where, v.split("=", 1)[0])
        for block in blocks(page, text)
        if block.marker is not None
        for step in block.steps()
        for v in step.directives.variables
    ]
