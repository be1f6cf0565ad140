"""scripts/dev/reference.py: the committed docs/reference/ is what the generator writes now; it
lists every flag the programs' --help prints (with the same default, bounds and help), every
metric common/metrics.py declares, and every make target and variable, each with one help line
that `make help` prints too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from scripts.checkout import ROOT
from scripts.dev import reference

PAGES = ROOT / reference.OUT


def test_the_committed_reference_is_current():
    names = reference.stale()
    assert not names, (
        f"docs/reference is stale ({', '.join(names)}): a flag, make variable or metric changed "
        f"without the pages; run `{reference.COMMAND}` and commit docs/reference"
    )


def test_a_changed_missing_or_extra_page_is_stale(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    out = tmp_path / reference.OUT
    out.mkdir(parents=True)
    for name, text in reference.render().items():
        (out / name).write_text(text)
    assert reference.stale(tmp_path) == []
    learner = out / "learner.md"
    learner.write_text(learner.read_text().replace("| `--seed` |", "| `--sed` |"))
    (out / "metrics.md").unlink()
    (out / "old.md").write_text("a page nothing writes\n")
    assert reference.stale(tmp_path) == ["learner.md", "metrics.md", "old.md"]


def test_check_names_the_command_that_regenerates(tmp_path, capsys):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    assert reference.main(["--check"], root=tmp_path) == 1
    assert "run `make reference`" in capsys.readouterr().err
    assert not (tmp_path / reference.OUT).exists(), "--check wrote pages"
    assert reference.main([], root=tmp_path) == 0
    assert reference.main(["--check"], root=tmp_path) == 0


# ---- flags: what --help prints ---------------------------------------------------------------


def help_entries(text: str) -> dict[str, str]:
    """--help's options as {flag: its help, one line}, each bool's --no- form included."""
    options = text.split("\noptions:\n", 1)[1]
    entries: list[list[str]] = []
    for line in options.splitlines():
        if re.match(r"^  -", line):
            head, *rest = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            entries.append([head, " ".join(rest)])
        elif entries:
            entries[-1][1] += " " + line.strip()
    out = {}
    for head, rest in entries:
        for flag in re.findall(r"--[a-z0-9-]+", head):
            out[flag] = rest.strip()
    return out


def page_entries(text: str) -> dict[str, str]:
    """The page's flag rows as {flag: help (default: D, bounds)}, as --help would print them."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 4:  # a former flag's row: --help hides those
            continue
        flags, takes, default, help = cells
        bounds = re.sub(r"^`[^`]*` ?", "", takes) if takes.startswith("`") else ""
        shown = f"{help} (default: {default.strip('`')}{', ' + bounds if bounds else ''})"
        for flag in re.findall(r"`(--[a-z0-9-]+)`", flags):
            out[flag] = shown
    return out


@pytest.mark.slow
@pytest.mark.parametrize("program", reference.PROGRAMS, ids=lambda p: p.page)
def test_the_reference_lists_every_flag_that_help_prints(program):
    module = program.main.removesuffix(".main")
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    printed = help_entries(done.stdout)
    for own in ("--help", "--config"):  # argparse's and common/config.py's, not fields
        printed.pop(own)
    listed = page_entries((PAGES / program.page).read_text())
    assert len(printed) > 5, f"no flags parsed from {module} --help:\n{done.stdout}"
    unlisted, gone = sorted(set(printed) - set(listed)), sorted(set(listed) - set(printed))
    assert not (unlisted or gone), (
        f"`python -m {module} --help` prints {unlisted} that {program.page} lacks, and not "
        f"{gone} that it lists: run `{reference.COMMAND}`"
    )
    squash = {flag: re.sub(r"\s+", "", text) for flag, text in printed.items()}
    differ = [f for f in printed if squash[f] != re.sub(r"\s+", "", listed[f])]
    assert not differ, f"{program.page} shows another default, bound or help for {differ}"


# ---- metrics: what common/metrics.py declares ------------------------------------------------

DECLARED = re.compile(r'_M\("\w+", (?P<kind>\w+), "(?P<name>mario_\w+)"')
SERIES = {"Counter": "{}_total", "Info": "{}_info"}


def test_the_reference_lists_every_declared_metric():
    """Read from the module's text, so a table the generator failed to find still counts."""
    source = (ROOT / "common" / "metrics.py").read_text()
    declared = [SERIES.get(m["kind"], "{}").format(m["name"]) for m in DECLARED.finditer(source)]
    assert len(declared) > 50, "the declarations' pattern no longer matches common/metrics.py"
    page = (PAGES / "metrics.md").read_text()
    rows = re.findall(r"^\| `(mario_\w+)` \|", page, re.M)
    missing = sorted(set(declared) - set(rows))
    assert not missing, f"metrics.md lacks {missing}: run `{reference.COMMAND}`"
    assert sorted(rows) == sorted(declared), "metrics.md lists a metric twice or one not declared"


def test_the_reference_lists_every_metric_a_registry_exports():
    """Every mario_* series the metrics classes register, as a scrape would name it."""
    from common import metrics

    page = (PAGES / "metrics.md").read_text()
    classes = (
        metrics.LearnerMetrics,
        metrics.ActorMetrics,
        metrics.RelayMetrics,
        metrics.EvalMetrics,
    )
    families = [f for cls in classes for f in cls().registry.collect()]
    exported = {SERIES.get(f.type.capitalize(), "{}").format(f.name) for f in families}
    assert len(exported) > 50
    missing = sorted(n for n in exported if n.startswith("mario_") and f"`{n}`" not in page)
    assert not missing, f"metrics.md lacks {missing}: run `{reference.COMMAND}`"


# ---- make: one help line per target and variable --------------------------------------------

MAKE_OWN = {"MAKEFILE_LIST", "MAKE", "MAKEFLAGS", "CURDIR", "SHELL"}  # make's, not a user's


def makefile_names(makefile: str) -> tuple[set[str], set[str]]:
    """The Makefile's targets, and the variables a user sets: each `?=` variable, each one
    passed to scripts/service, each one read (`$(NAME)`) but never assigned."""
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):(?!=)", makefile, re.M))
    assigned = set(re.findall(r"^([A-Z][A-Z0-9_]*) *[:+]?=", makefile, re.M))
    optional = set(re.findall(r"^([A-Z][A-Z0-9_]*) \?=", makefile, re.M))
    read = set(re.findall(r"(?<!\$)\$\(([A-Z][A-Z0-9_]*)\)", makefile))
    variables = optional | set(reference.service_vars(makefile)) | (read - assigned - MAKE_OWN)
    return targets, variables


def test_every_make_target_and_variable_has_one_help_line():
    makefile = (ROOT / "Makefile").read_text()
    targets, variables = makefile_names(makefile)
    assert {"train", "help", "reference"} <= targets and {"RUN", "N", "PYTHON"} <= variables
    helps = reference.make_help(makefile)
    named = [h.name for h in helps]
    twice = sorted({n for n in named if named.count(n) > 1})
    assert not twice, f"the Makefile has two `## NAME:` lines for {twice}; keep one"
    lacking = sorted((targets | variables) - set(named))
    assert not lacking, (
        f"the Makefile has no `## NAME: help` line for {lacking}: add one at its top, in the "
        f"group it belongs to, then run `{reference.COMMAND}`"
    )
    unknown = sorted(set(named) - targets - variables)
    assert not unknown, f"the Makefile's `## NAME:` lines name {unknown}, which it does not use"
    assert all(h.group for h in helps), "a `## NAME:` line above the first `##@` group"


def test_make_help_prints_every_line():
    """`make help` prints each group, then its `make TARGET` and `NAME=` lines, from the same
    `## NAME:` lines the reference is written from."""
    done = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    helps = reference.make_help((ROOT / "Makefile").read_text())
    printed = [line for line in done.stdout.splitlines()[1:] if line]  # past the usage line
    groups, rows = [], []
    for line in printed:
        if m := re.match(r"^  (make \S+|[A-Z][A-Z0-9_]*=) +(.+)$", line):
            rows.append((m[1].removeprefix("make ").removesuffix("="), m[2]))
        else:
            groups.append(line)
    assert groups == list(dict.fromkeys(h.group for h in helps))
    assert rows == [(h.name, h.help) for h in helps]


def test_a_variable_without_a_help_line_is_found():
    """A variable passed to scripts/service with no help line is one the check above
    reports."""
    text = (ROOT / "Makefile").read_text()
    assert "SERVICE_VARS := RUN " in text  # where the new name goes
    makefile = text.replace("SERVICE_VARS := RUN ", "SERVICE_VARS := RUN NEW_SETTING ")
    _, variables = makefile_names(makefile)
    assert "NEW_SETTING" in variables - {h.name for h in reference.make_help(makefile)}
