"""`make test` and `make test-all` between them run every test exactly once: the pytest commands
of their recipes, as `make -n` prints them, select disjoint sets of the collection whose union is
all of it. A rehearsal is `slow` too (`make test-fast` skips it as well), and `make test` keeps a
real end-to-end run of a learner and actors."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from _pytest.mark.expression import Expression  # the grammar and meaning of pytest's own -m

from scripts.checkout import ROOT

# the whole collection, each test with the names of its markers, written to the file argv[1]
COLLECT = """
import json, sys, pytest

class Markers:
    def pytest_collection_finish(self, session):
        items = {i.nodeid: sorted({m.name for m in i.iter_markers()}) for i in session.items}
        with open(sys.argv[1], "w") as f:
            json.dump(items, f)

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[Markers()]))
"""


def collection(out: Path) -> dict[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {nodeid: set(names) for nodeid, names in json.loads(out.read_text()).items()}


def mark_expressions(target: str) -> list[str]:
    """The -m expression of each pytest command `make TARGET` runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    argv = ["make", "--no-print-directory", "-n", target]  # as a user's shell would run it
    printed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    expressions = []
    for line in printed.stdout.splitlines():
        argv = shlex.split(line) if " pytest " in f"{line} " else []
        if "pytest" in argv:
            options = argv[argv.index("pytest") + 1 :]
            assert "-m" in options, f"`make {target}` runs pytest without -m: {line}"
            expressions.append(options[options.index("-m") + 1])
    assert expressions, f"`make {target}` runs no pytest:\n{printed.stdout}"
    return expressions


def selected(expression: str, tests: dict[str, set[str]]) -> set[str]:
    compiled = Expression.compile(expression)
    return {t for t, names in tests.items() if compiled.evaluate(names.__contains__)}


def test_make_test_and_test_all_run_every_test_once(tmp_path):
    tests = collection(tmp_path / "tests.json")
    make_test = mark_expressions("test")
    make_test_all = mark_expressions("test-all")
    assert make_test_all[: len(make_test)] == make_test, "make test-all starts with make test"

    runs: dict[str, list[str]] = {t: [] for t in tests}
    for expression in make_test_all:
        for t in selected(expression, tests):
            runs[t].append(expression)
    assert not [t for t, r in runs.items() if not r], "in neither make test nor make test-all"
    twice = {t: r for t, r in runs.items() if len(r) > 1}
    assert not twice, f"run more than once by make test-all: {twice}"

    fast = set().union(*(selected(e, tests) for e in make_test))
    rehearsals = {t for t, names in tests.items() if "rehearsal" in names}
    assert rehearsals and fast == set(tests) - rehearsals
    assert not [t for t in rehearsals if "slow" not in tests[t]], "a rehearsal is slow too"
    end_to_end = [
        t for t in fast if t.startswith("tests/integration/") and "integration" in tests[t]
    ]
    assert end_to_end, "make test keeps a real run of a learner and actor processes"
