"""docs/reference/ written from the code: `python -m scripts.dev.reference` (`make reference`).

- learner.md, actor.md, eval-actor.md, relay.md: every flag of the process's config dataclass,
  its default, bounds and help, as its --help prints them (common/config.py `flags`);
- make.md: the targets and the variables a user sets, from the Makefile's `## NAME:` lines (what
  `make help` prints), each variable's default from its `?=` line or scripts/service/host.py;
- metrics.md: every metric declared in common/metrics.py: name, type, labels, help;
- README.md: their index.

`--check` writes nothing and exits 1 naming the stale pages, as tests/scripts/dev/test_reference.py
does. Nothing here is typed twice: a flag, variable or metric added to the code reaches the pages
on the next run.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from common import config as config_io
from common import metrics
from scripts.checkout import ROOT

OUT = Path("docs/reference")  # from the repository root
COMMAND = "make reference"  # or: python -m scripts.dev.reference


class Page(NamedTuple):
    text: str
    summary: str  # its line in the index


class Program(NamedTuple):
    page: str
    main: str  # the module whose main(argv) parses the flags; its docstring is the description
    config: str  # "module:Class"
    prog: str  # as main passes it to common.config.load: the --config file's table


PROGRAMS = (
    Program("learner.md", "learner.main", "learner.config:LearnerConfig", "learner"),
    Program("actor.md", "actor.main", "actor.config:ActorConfig", "actor"),
    Program("eval-actor.md", "actor.eval", "actor.config:EvalConfig", "actor.eval"),
    Program("relay.md", "actor.relay", "actor.relay:RelayConfig", "actor.relay"),
)


def generated(source: str) -> str:
    return (
        f"<!-- Generated from {source} by `{COMMAND}` (python -m scripts.dev.reference): "
        "edit the code, not this page. -->\n"
    )


def cell(text: Any) -> str:
    """`text` as one markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: str) -> str:
    return f"`{text}`" if text else ""


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def config_class(program: Program) -> type:
    module, _, name = program.config.partition(":")
    return getattr(importlib.import_module(module), name)


def first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def source_of(obj: Any) -> str:
    return str(Path(inspect.getsourcefile(obj) or "").resolve().relative_to(ROOT))


# ---- flags -------------------------------------------------------------------------------------


def flag_row(f: config_io.Flag) -> tuple[str, ...]:
    if f.metavar:  # a bool has none: --x turns it on, --no-x off
        name, takes = code(f.flag), code(f.metavar) + (f" {f.bounds}" if f.bounds else "")
    else:
        name, takes = f"{code(f.flag)}, {code('--no-' + f.flag[2:])}", "on / off"
    return name, takes, code(f.default), f.help


def spelling(every: list[config_io.Flag]) -> str:
    """How the kinds of value among `every` are written, those it has."""
    kinds = {
        " A bool flag takes `--no-` to turn it off.": any(not f.metavar for f in every),
        " An optional value (`|none`) takes `none` to unset it.": any(
            f.metavar.endswith("|none") for f in every
        ),
        " A list (`,...`) takes its items comma-separated.": any(
            f.metavar.endswith(",...") for f in every
        ),
    }
    return "".join(text for text, present in kinds.items() if present)


def flags_page(program: Program) -> Page:
    cls = config_class(program)
    command = f"python -m {program.main.removesuffix('.main')}"
    description = first_paragraph(importlib.import_module(program.main).__doc__)
    description = description.removeprefix(f"`{command}`: ")
    description = description[:1].upper() + description[1:]
    table_name = f"[{program.prog}]"
    every = config_io.flags(cls)
    example = next((f for f in every if f.metavar == "STR" and f.default != "''"), every[0])
    lines = [
        f"# `{command}`",
        "",
        generated(source_of(cls)),
        description,
        "",
        f"{len(every)} flags. Each is also a key of a `--config FILE` TOML file's `{table_name}` "
        f"table, spelled with underscores (`{example.flag} {example.default}` is "
        f'`{example.name} = "{example.default}"`); the flags win over the file, the file over the '
        f"defaults.{spelling(every)} Every problem is reported at once, each saying what to "
        f"change. `{command} --help` prints the same.",
        "",
    ]
    head = ("flag", "takes", "default", "help")
    base = next((b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)), None)
    if base is None:
        lines += table(head, [flag_row(f) for f in every])
    else:  # its own flags first, then those it shares with the class it extends
        inherited = {f.name for f in dataclasses.fields(base)}
        lines += ["## Its own flags", ""]
        lines += table(head, [flag_row(f) for f in every if f.name not in inherited])
        shared = next((p for p in PROGRAMS if config_class(p) is base), None)
        shared = shared or next(  # a program whose class extends the same base
            (p for p in PROGRAMS if p != program and issubclass(config_class(p), base)), None
        )
        name = f"[`python -m {shared.prog}`]({shared.page})" if shared else base.__name__
        lines += ["", f"## The flags it shares with {name}", ""]
        lines += table(head, [flag_row(f) for f in every if f.name in inherited])
    retired = getattr(cls, "RETIRED", {})
    if retired:
        lines += ["", "## Flags it refuses", "", "Former flags, and those of other processes, "
                  "refused with this message:", ""]  # fmt: skip
        rows = [(code("--" + n.replace("_", "-")), why) for n, why in sorted(retired.items())]
        lines += table(("flag", "what to do instead"), rows)
    return Page("\n".join(lines) + "\n", f"{len(every)} flags. {description}")


# ---- make --------------------------------------------------------------------------------------

HELP_LINE = re.compile(r"^## (?P<name>\S+): (?P<help>.+)$")
GROUP_LINE = re.compile(r"^##@ (?P<title>.+)$")
DEFAULT_LINE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*) \?=[ \t]*(?P<value>.*)$", re.M)


class MakeHelp(NamedTuple):
    group: str
    name: str  # a target (lowercase) or a variable (uppercase)
    help: str

    @property
    def is_variable(self) -> bool:
        return self.name[0].isupper()


def make_help(makefile: str) -> list[MakeHelp]:
    """The Makefile's `## NAME: help` lines, each in its `##@` group (what `make help` prints)."""
    out, group = [], ""
    for line in makefile.splitlines():
        if m := GROUP_LINE.match(line):
            group = m["title"]
        elif m := HELP_LINE.match(line):
            out.append(MakeHelp(group, m["name"], m["help"]))
    return out


def service_vars(makefile: str) -> list[str]:
    """The variables the Makefile passes to scripts/service as MARIO_<NAME>."""
    m = re.search(r"^SERVICE_VARS :?= ((?:.*\\\n)*.*)$", makefile, re.M)
    return m[1].replace("\\\n", " ").split() if m else []


def make_defaults(makefile: str) -> dict[str, str]:
    """Each variable's default: its `?=` value in the Makefile, else scripts/service's."""
    from scripts.service.host import Host

    out = {
        f.name.upper(): _typed(f.default)
        for f in dataclasses.fields(Host)
        if f.default is not dataclasses.MISSING  # not `cores`: the machine's
    }
    out.update({m["name"]: m["value"].strip() for m in DEFAULT_LINE.finditer(makefile)})
    return out


def _typed(value: object) -> str:
    """A default as a variable would be set to it."""
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def make_page(makefile: str) -> Page:
    helps, defaults, passed = make_help(makefile), make_defaults(makefile), service_vars(makefile)
    lines = [
        "# `make`: targets and variables",
        "",
        generated("the Makefile's `## NAME:` lines and defaults, and scripts/service/host.py"),
        "`make help` prints the same lines. A variable is given on the command line "
        "(`make train N=8 LEVELS=1-1,1-2`) or in the environment. An empty default is left to the "
        "command (its help says what empty means).",
        "",
    ]
    groups = list(dict.fromkeys(h.group for h in helps))
    for group in groups:
        lines += [f"## {group}", ""]
        targets = [h for h in helps if h.group == group and not h.is_variable]
        variables = [h for h in helps if h.group == group and h.is_variable]
        if targets:
            rows = [(code(f"make {h.name}"), h.help) for h in targets]
            lines += table(("target", "what it does"), rows) + [""]
        if variables:
            rows = [(code(h.name), code(defaults.get(h.name, "")), h.help) for h in variables]
            lines += table(("variable", "default", "help"), rows) + [""]
    lines += [
        "## Under supervisord and systemd",
        "",
        "These variables reach the processes as `MARIO_<NAME>` (scripts/service/host.py): "
        "supervisord passes them on, systemd reads them from /etc/mario-impala/env: "
        + ", ".join(code(f"MARIO_{v}") for v in passed)
        + ".",
    ]
    targets = sum(not h.is_variable for h in helps)
    summary = f"{targets} targets and {len(helps) - targets} variables, as `make help` lists them."
    return Page("\n".join(lines) + "\n", summary)


# ---- metrics -----------------------------------------------------------------------------------

# The label values beyond common/metrics.py's LABEL_VALUES
OPEN_LABELS = {"level": "the run's levels", "gpu": "the GPU's NVML index"}
SERIES = {"Counter": "{}_total", "Info": "{}_info"}  # the name a scrape shows


class MetricTable(NamedTuple):
    name: str  # the class, or the module-level table
    about: str
    rows: tuple[Any, ...]  # common/metrics.py's rows: attr, kind, name, help, labels, ...
    info_labels: dict[str, tuple[str, ...]]  # an Info's labels, read from a registry


def metric_tables() -> Iterator[MetricTable]:
    """Every table of common/metrics.py in the order of the file: each metrics class's TABLE,
    each table of rows declared at module level (GPU_TABLE) with the comment above it."""
    source = inspect.getsource(metrics)
    for name, value in vars(metrics).items():
        if isinstance(value, type) and value.__module__ == metrics.__name__:
            if rows := getattr(value, "TABLE", ()):
                yield MetricTable(name, first_paragraph(value.__doc__), rows, _info_labels(value))
        elif name.endswith("TABLE") and isinstance(value, tuple) and value:
            comment = re.search(rf"((?:^# .*\n)+)(?:# fmt: off\n)?{name} =", source, re.M)
            lines = comment[1].splitlines() if comment else []
            about = " ".join(line[2:] for line in lines if line != "# fmt: off")
            yield MetricTable(name, about, value, {})


def _info_labels(cls: type) -> dict[str, tuple[str, ...]]:
    """The labels each Info metric of `cls` sets, read from a registry it filled."""
    out = {}
    for family in cls().registry.collect():
        if family.type == "info":
            out[family.name] = tuple(k for s in family.samples for k in s.labels)
    return out


def series(row: Any) -> str:
    """The name a scrape shows: prometheus_client adds _total to a Counter, _info to an Info."""
    return SERIES.get(row.kind.__name__, "{}").format(row.name)


def kind(row: Any) -> str:
    name = row.kind.__name__.lower()
    return f"{name} (`_bucket`, `_sum`, `_count`)" if name == "histogram" else name


def outputs(row: Any) -> str:
    """Where else the learner writes the metric: metrics.jsonl, TensorBoard, the status line."""
    out = []
    if row.row:
        keys = row.row if isinstance(row.row, str) else ", ".join(row.row.values())
        out.append(f"metrics.jsonl {code(keys)}")
    if row.tag:
        out.append(f"TensorBoard {code(row.tag)}")
    if row.status:
        out.append("status line")
    return "; ".join(out)


def metrics_page() -> Page:
    tables = list(metric_tables())
    count = sum(len(t.rows) for t in tables)
    conventions = (metrics.__doc__ or "").partition("Conventions:")[2]
    lines = [
        "# Metrics",
        "",
        generated("common/metrics.py"),
        f"{count} metrics, each process's at http://METRICS_HOST:PORT/metrics (the learner's "
        "`--metrics-port`, an actor's, the eval actor's or a relay's). Each process also exports "
        "prometheus_client's standard `process_*` and `python_*` metrics (CPU, memory, GC).",
        "",
        "Conventions: " + first_paragraph(conventions),
        "",
        "## Labels",
        "",
    ]
    values = {k: ", ".join(code(v) for v in vs) for k, vs in metrics.LABEL_VALUES.items()}
    lines += table(
        ("label", "values"), [(code(k), v) for k, v in {**values, **OPEN_LABELS}.items()]
    )
    for t in tables:
        lines += ["", f"## `{t.name}`", "", t.about, ""]
        with_outputs = any(outputs(row) for row in t.rows)
        head = ("metric", "type", "labels", "help") + (("also in",) if with_outputs else ())
        rows = []
        for row in t.rows:
            labels = t.info_labels.get(row.name, row.labels)
            cells = (code(series(row)), kind(row), ", ".join(labels), row.help)
            rows.append(cells + ((outputs(row),) if with_outputs else ()))
        lines += table(head, rows)
    summary = f"{count} metrics: name, type, labels and help."
    return Page("\n".join(lines) + "\n", summary)


# ---- the pages ---------------------------------------------------------------------------------


def index_page(pages: dict[str, Page]) -> str:
    lines = [
        "# Reference",
        "",
        generated("the code"),
        "Every option a user sets and every number the system exports, written from their "
        "declarations in the code. A test fails when these pages are stale; "
        f"`{COMMAND}` writes them anew.",
        "",
    ]
    for name, page in pages.items():
        title = page.text.splitlines()[0].removeprefix("# ")
        lines.append(f"- [{title}]({name}): {page.summary}")
    return "\n".join(lines) + "\n"


def render(root: Path = ROOT) -> dict[str, str]:
    """Every page of docs/reference, by file name."""
    pages = {p.page: flags_page(p) for p in PROGRAMS}
    pages["make.md"] = make_page((root / "Makefile").read_text())
    pages["metrics.md"] = metrics_page()
    return {"README.md": index_page(pages), **{name: page.text for name, page in pages.items()}}


def stale(root: Path = ROOT) -> list[str]:
    """The pages of docs/reference that differ from what `render` writes, missing ones and
    ones it no longer writes included."""
    pages, out_dir = render(root), root / OUT
    have = {p.name for p in out_dir.glob("*.md")} if out_dir.is_dir() else set()
    wrong = [n for n, text in pages.items() if n not in have or (out_dir / n).read_text() != text]
    return sorted(wrong + sorted(have - set(pages)))


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.dev.reference", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    names = stale(root)
    if args.check:
        if names:
            print(f"{OUT} is stale ({', '.join(names)}): run `{COMMAND}`", file=sys.stderr)
        return 1 if names else 0
    out_dir = root / OUT
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = render(root)
    for name in names:
        if name in pages:
            (out_dir / name).write_text(pages[name])
            print(f"wrote {OUT / name}")
        else:
            (out_dir / name).unlink()
            print(f"removed {OUT / name}, which nothing writes any more")
    if not names:
        print(f"{OUT} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
