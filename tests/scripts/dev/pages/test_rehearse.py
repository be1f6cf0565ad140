"""The rehearsal's children take Ctrl-C as under a terminal, however the rehearsal was started."""

from __future__ import annotations

import signal
import subprocess
import sys

from scripts.dev.pages.rehearse import ctrl_c_reaches_children

CHILD = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"


def child_ignores_ctrl_c() -> bool:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_a_rehearsal_started_with_ctrl_c_ignored_starts_children_that_take_it():
    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a script
        assert child_ignores_ctrl_c()  # what the children inherit without the handler
        ctrl_c_reaches_children()
        assert not child_ignores_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ctrl_c_reaches_children()  # a handler already there stays
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
