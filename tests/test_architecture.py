"""The house rules that a reader of the tree relies on, checked on every file: which package may
import which, no import circle between files, no file over the size limit, one way to import."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from scripts.checkout import ROOT

PACKAGES = ("actor", "learner", "common", "scripts")
MAX_LINES = 450


def python_files(*tops: str) -> Iterator[Path]:
    for top in tops:
        yield from sorted((ROOT / top).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (type-checking imports too: they are a
    dependency a reader follows all the same)."""
    tree = ast.parse(path.read_text(), str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package, up level - 1
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names}
    return out


def project_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a `from a import b` counts a.b when that is a
    module of its own, else a)."""
    files = {module_name(p): p for p in python_files(*PACKAGES)}
    graph = {}
    for name, path in files.items():
        graph[name] = {m for m in imports(path) if m in files and m != name}
    return graph


def test_common_depends_on_neither_process_and_the_processes_not_on_each_other():
    forbidden = {
        "common": ("actor", "learner", "scripts"),
        "actor": ("learner",),
        "learner": ("actor",),
    }
    for top, banned in forbidden.items():
        for path in python_files(top):
            bad = sorted(m for m in imports(path) if m.split(".")[0] in banned)
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_user_commands_never_need_the_developer_tools():
    """scripts/ holds what a user runs, scripts/dev/ what a developer measures and rehearses with
    (scripts/README.md): a user command works with scripts/dev/ gone."""
    dev = ROOT / "scripts" / "dev"
    for path in python_files("scripts"):
        if not path.is_relative_to(dev):
            bad = sorted(m for m in imports(path) if m.split(".")[:2] == ["scripts", "dev"])
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_learner_never_loads_the_emulator():
    code = (
        "import sys, learner.main\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('nes_py', 'gym_super_mario_bros'))\n"
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_update_loads_no_io():
    """learner/update.py is the learner's logic without IO: importing it (and the config it reads,
    the batches it trains on) loads no sockets, wire format or metrics."""
    code = (
        "import sys, learner.update\n"
        "io = ('zmq', 'prometheus_client', 'msgpack')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in io)\n"
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_no_import_circle_between_files():
    graph = project_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circle = path[path.index(nxt) :] + [nxt]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_no_python_file_over_the_limit():
    long = {
        str(p.relative_to(ROOT)): n
        for p in python_files(*PACKAGES, "tests")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines (split by concern): {long}"


def test_one_way_to_import():
    """Packages are imported by name from the repository root (`python -m scripts.x`, pytest's
    rootdir): no file edits sys.path or loads another file by its path."""
    bad = []
    for p in python_files(*PACKAGES, "tests"):
        text = p.read_text()
        if p != Path(__file__) and ("sys.path" in text or "spec_from_file_location" in text):
            bad.append(str(p.relative_to(ROOT)))
    assert not bad, bad


OWN_DIR = re.compile(
    r"Path\(__file__\)(?:\.resolve\(\))?(?P<up>\.parents\[(?P<n>\d+)\]|(?:\.parent\b)+)"
)


def dirs_above(path: Path, text: str) -> Iterator[Path]:
    """The directories a file reaches up to from its own path (`Path(__file__).parents[2]`,
    `Path(__file__).parent.parent`)."""
    for m in OWN_DIR.finditer(text):
        up = int(m["n"]) if m["n"] is not None else m["up"].count(".parent") - 1
        yield path.resolve().parents[up]


def test_the_checkout_is_found_in_one_place():
    """Every script that starts processes in the checkout takes its path from
    scripts/checkout.py, so all of them agree on it."""
    here = ROOT / "scripts" / "checkout.py"
    bad = [
        str(p.relative_to(ROOT))
        for p in python_files(*PACKAGES, "tests")
        if p not in (here, Path(__file__)) and ROOT.resolve() in dirs_above(p, p.read_text())
    ]
    assert not bad, f"import ROOT from scripts.checkout instead: {bad}"
    assert ROOT.resolve() in dirs_above(here, here.read_text())  # the pattern finds it there
