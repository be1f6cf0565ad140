"""The C heap, read from glibc in a fresh interpreter: live allocations count as in use, freed
ones as free in the arenas (where resident memory keeps them), and every page exports both."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common.heap import heap

pytestmark = pytest.mark.skipif(heap() is None, reason="the C library has no mallinfo2")

# 20,000 arrays of 8 kB each: 160 MB of chunks in the main arena, each below any mmap threshold;
# one small object allocated after them pins the top of the heap, so freeing them cannot shrink it
PROGRAM = """
import json, sys
import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from common.heap import heap
from common.metrics import add_process_metrics

registry = CollectorRegistry()
add_process_metrics(registry, "actor")
def page():
    lines = generate_latest(registry).decode().splitlines()
    return {l.split()[0]: float(l.split()[1]) for l in lines if l.startswith("mario_process_heap")}
before = heap()
arrays = [np.ones(1000) for _ in range(20_000)]
pin = np.ones(1000)
held, held_page = heap(), page()
del arrays
freed = heap()
json.dump({"before": before, "held": held, "held_page": held_page, "freed": freed}, sys.stdout)
"""


def test_live_allocations_are_in_use_and_freed_ones_stay_free_in_the_arenas():
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True, timeout=120
    )
    r = json.loads(out.stdout)
    before, held, freed = (dict(zip(("in_use", "free"), r[k], strict=True)) for k in ("before", "held", "freed"))  # fmt: skip
    mb = 2**20
    assert held["in_use"] - before["in_use"] >= 150 * mb
    assert freed["in_use"] - before["in_use"] < 10 * mb  # given back to the allocator ...
    assert freed["free"] - held["free"] >= 150 * mb  # ... which keeps it
    page = r["held_page"]  # a scrape reads the heap at that moment
    assert page["mario_process_heap_in_use_bytes"] - before["in_use"] >= 150 * mb
    assert page["mario_process_heap_free_bytes"] >= 0
