"""Run a page's command blocks as their markers say (blocks.py), as a reader would type them.

Each page gets machines of its own: `here`, and any a block names with `host`. A machine is a
network namespace (scripts/dev/chaos/netns.py), where the page's ports (5555, 9000, 9100+i, ...)
are free whatever else runs on this one, and a checkout of its own: a copy of this working tree
(tracked and untracked files, not ignored ones) whose `.venv` is a view of the venv running this
(`link_venv`). `here` starts with a short run in runs/default (`seed`), as every page after
getting-started assumes its reader has trained once. Each line runs in its machine's checkout as
`bash -c LINE`, in a process group of its own as a terminal would run it; Ctrl-C is SIGINT to
that group. A page stops at its first failure; what it started is stopped either way, and every
process left in its namespaces is killed when its machines go.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from scripts.checkout import ROOT
from scripts.dev.chaos import netns
from scripts.dev.pages.blocks import Block, Step, blocks

HERE = "here"
STEP_TIMEOUT_S = 900.0  # one line, on a loaded 2-core machine; a hung line fails after it
STOP_TIMEOUT_S = 300.0  # Ctrl-C until it has stopped (a learner's final checkpoint)
POLL_S = 0.5
CTRL_C_STATUSES = (0, -signal.SIGINT, 128 + signal.SIGINT)  # make re-raises SIGINT once done
# the short run every page's `here` starts with: make train until it has made an update and an
# episode has ended (so curves and reports have one), then Ctrl-C
SEED_COMMAND, SEED_UNTIL = "make train", r"updates +[1-9].*[1-9]\d* episodes in"


@dataclass
class Outcome:
    where: str  # page:line
    machine: str
    command: str  # what ran
    result: str  # passed | failed | skipped | not run | not reached
    why: str = ""
    seconds: float = 0.0
    log: str = ""


@dataclass
class Machine:
    name: str
    host: netns.Host
    checkout: Path
    running: list[tuple[Step, subprocess.Popen, Path]]


def environ() -> dict[str, str]:
    """A user's shell: no make of ours around it, no proxy for the machines' private addresses."""
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"no_proxy": "*", "NO_PROXY": "*"}


def venv() -> Path:
    return Path(sys.executable).parent.parent


def stale_venv() -> str | None:
    """Why the venv cannot stand in for the checkouts' (make would reinstall it), or None."""
    stamp = venv() / ".installed"
    if not stamp.exists() or stamp.stat().st_mtime < (ROOT / "pyproject.toml").stat().st_mtime:
        return f"{venv()} is older than pyproject.toml: run make install first"
    return None


def copy_checkout(to: Path) -> Path:
    """This working tree's files (tracked, and untracked but not ignored) in `to`, with `.venv`
    a view of the venv running this (`link_venv`)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout  # fmt: skip
    to.mkdir(parents=True)
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, to / name, follow_symlinks=False)
    link_venv(to / ".venv")
    return to


def link_venv(view: Path) -> None:
    """`view` as the venv running this: a link to each of its entries but make's stamp, which is
    the view's own and newer than the checkout's pyproject.toml, so a `make` line there never
    installs into the venv that the rehearsal and the other checkouts share."""
    view.mkdir()
    for entry in venv().iterdir():
        if entry.name != ".installed":
            (view / entry.name).symlink_to(entry)
    (view / ".installed").touch()


def tail(path: Path, chars: int = 4000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:]


def wait_for(proc: subprocess.Popen, log: Path, pattern: str) -> str | None:
    """None once `pattern` shows in the log; else why not (the command ended, or time ran out)."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    regex = re.compile(pattern, re.M)
    while time.monotonic() < deadline:
        if regex.search(log.read_text(errors="replace")):
            return None
        if proc.poll() is not None:
            return f"exited {proc.returncode} before its output showed /{pattern}/"
        time.sleep(POLL_S)
    return f"its output did not show /{pattern}/ within {STEP_TIMEOUT_S:.0f} s"


def ctrl_c_reaches_children() -> None:
    """Let the commands this process starts take Ctrl-C as under a terminal. A shell that starts a
    job in the background without job control has it ignore SIGINT, every child inherits that,
    and Python keeps it ignored: a command would then outlive its Ctrl-C. A handler of our own
    is not inherited: children start with SIGINT's default action."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def stop(proc: subprocess.Popen) -> tuple[bool, int | None]:
    """Ctrl-C to the process group; (whether it stopped cleanly, its exit status)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False, None
    return code in CTRL_C_STATUSES, code


class PageRehearsal:
    """One page's blocks, in order, on machines of its own on `net`."""

    def __init__(self, page: str, out: Path, net: netns.Network, seed: Path | None,
                 report: Callable[[Outcome], None] = lambda o: None):  # fmt: skip
        self.page, self.out, self.net, self.seed, self.report = page, out, net, seed, report
        self.machines: dict[str, Machine] = {}
        self.outcomes: list[Outcome] = []
        self.logs = 0

    def record(self, *outcomes: Outcome) -> None:
        for o in outcomes:
            self.outcomes.append(o)
            self.report(o)

    # -- machines ------------------------------------------------------------------------------

    def machine(self, name: str) -> Machine:
        if name not in self.machines:
            host = self.net.add_host(name)
            checkout = copy_checkout(self.out / name)
            if name == HERE and self.seed is not None:
                shutil.copytree(self.seed, checkout / "runs" / "default", symlinks=True)
            self.machines[name] = Machine(name, host, checkout, [])
        return self.machines[name]

    def addresses(self) -> dict[str, str]:
        return {name: m.host.address for name, m in self.machines.items()}

    def checkouts(self) -> dict[str, Path]:
        return {name: m.checkout for name, m in self.machines.items()}

    # -- running -------------------------------------------------------------------------------

    def start(self, machine: Machine, command: str, label: str) -> tuple[subprocess.Popen, Path]:
        self.logs += 1
        log = self.out / "logs" / f"{self.logs:02d}-{label}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as f:
            proc = subprocess.Popen(machine.host.exec(["bash", "-c", command]),
                                    cwd=machine.checkout, stdout=f, stderr=subprocess.STDOUT,
                                    env=environ(), start_new_session=True)  # fmt: skip
        return proc, log

    def run_step(self, step: Step) -> Outcome:
        d = step.directives
        machine = self.machine(d.on or HERE)
        for name, _ in d.hosts:
            self.machine(name)
        command = step.command(self.addresses(), self.checkouts())
        outcome = Outcome(step.where, machine.name, command, "passed")
        if d.skip:
            outcome.result, outcome.why = "skipped", d.skip
            return outcome
        if d.needs and shutil.which(d.needs) is None:
            outcome.result, outcome.why = "not run", f"{d.needs} is not installed here"
            return outcome
        t0 = time.monotonic()
        label = re.sub(r"[^\w.-]+", "-", command)[:40].strip("-")
        proc, log = self.start(machine, command, label)
        outcome.log = str(log)
        why = None
        if d.until or d.started:
            why = wait_for(proc, log, d.until or d.started)
            if why is None and d.until:
                clean, code = stop(proc)
                why = None if clean else f"Ctrl-C: it did not stop cleanly (exit status {code})"
            elif why is None:
                machine.running.append((step, proc, log))
            else:
                stop(proc)
        elif d.repeat:
            why = self.repeat(machine, command, proc, log, d.repeat, d.exits)
        else:
            try:
                code = proc.wait(STEP_TIMEOUT_S)
                why = None if code in d.exits else f"exit status {code}"
            except subprocess.TimeoutExpired:
                stop(proc)
                why = f"still running after {STEP_TIMEOUT_S:.0f} s"
        outcome.seconds = round(time.monotonic() - t0, 1)
        if why:
            outcome.result, outcome.why = "failed", f"{why}; its output ends:\n{tail(log)}"
        return outcome

    def repeat(self, machine: Machine, command: str, proc: subprocess.Popen, log: Path,
               pattern: str, exits: tuple[int, ...]) -> str | None:  # fmt: skip
        """Run it again, once a second, until its output shows `pattern` in a run that exits
        with a status of `exits` (before, a check fails as a reader's would: not yet)."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        regex = re.compile(pattern, re.M)
        start = 0  # where this run's output begins in the log
        while True:
            try:
                code = proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop(proc)
                return f"still running after {STEP_TIMEOUT_S:.0f} s"
            with open(log, "rb") as f:
                f.seek(start)
                output = f.read().decode(errors="replace")
            if code in exits and regex.search(output):
                return None
            if time.monotonic() > deadline:
                return (f"its output did not show /{pattern}/ within {STEP_TIMEOUT_S:.0f} s "
                        f"(the last run's exit status {code})")  # fmt: skip
            time.sleep(1.0)
            start = log.stat().st_size
            with open(log, "ab") as f:
                proc = subprocess.Popen(machine.host.exec(["bash", "-c", command]),
                                        cwd=machine.checkout, stdout=f, stderr=subprocess.STDOUT,
                                        env=environ(), start_new_session=True)  # fmt: skip

    def plain(self, machine: Machine, command: str, label: str) -> str | None:
        """A command of the rehearsal's own (a block's `before`, `make down`): why it failed."""
        proc, log = self.start(machine, command, label)
        try:
            code = proc.wait(STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop(proc)
            code = None
        return None if code == 0 else f"`{command}` exited {code}:\n{tail(log)}"

    # -- blocks --------------------------------------------------------------------------------

    def block(self, block: Block) -> bool:
        """The block's lines in order, then what they left running stopped; False on a failure."""
        here = self.machine(HERE)
        if block.own.write:
            path = here.checkout / block.own.write
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)
            self.record(Outcome(block.where, HERE, f"(its text in {block.own.write})", "passed"))
            return True
        for command in block.own.before:
            if why := self.plain(here, command, "before"):
                self.record(Outcome(block.where, HERE, command, "failed", why))
                return False
        steps = block.steps()
        passed = True
        for i, step in enumerate(steps):
            outcome = self.run_step(step)
            self.record(outcome)
            if outcome.result == "failed":
                passed = False
                self.record(*(Outcome(s.where, s.directives.on or HERE, s.line.text, "not reached",
                                      "an earlier line failed") for s in steps[i + 1 :]))  # fmt: skip
                break
        return self.tidy(block) and passed

    def tidy(self, block: Block) -> bool:
        """Stop what the block left running: its `started` commands (Ctrl-C, the newest first),
        then every supervisord of a run directory in the machines' checkouts (`make down`)."""
        clean = True
        for machine in self.machines.values():
            for step, proc, log in reversed(machine.running):
                stopped, code = stop(proc)
                if not stopped:
                    clean = False
                    why = f"Ctrl-C at the block's end: exit status {code}:\n{tail(log)}"
                    self.record(Outcome(step.where, machine.name, "Ctrl-C", "failed", why))
            machine.running.clear()
        for machine in self.machines.values():
            for pid in sorted((machine.checkout / "runs").glob("**/supervisord.pid")):
                run = pid.parent.relative_to(machine.checkout)
                command = f"make --no-print-directory down RUN={run}"
                if why := self.plain(machine, command, "down"):
                    clean = False
                    self.record(Outcome(block.where, machine.name, command, "failed", why))
        return clean

    def run(self) -> list[Outcome]:
        try:
            for block in blocks(self.page):
                if block.marker is None:
                    continue
                if not self.block(block):
                    break
        finally:
            for machine in self.machines.values():
                for _, proc, _ in machine.running:
                    stop(proc)
                self.net.remove_host(machine.host)  # anything still running there is killed
        return self.outcomes


def seed(out: Path) -> Path:
    """runs/default of a short `make train` (to its first update and episode, then Ctrl-C) in a
    checkout of its own: what each page's `here` starts with."""
    ctrl_c_reaches_children()
    with netns.Network() as net:
        host = net.add_host("seed")
        checkout = copy_checkout(out / "seed")
        try:
            log = out / "seed.log"
            with open(log, "wb") as f:
                proc = subprocess.Popen(host.exec(["bash", "-c", SEED_COMMAND]), cwd=checkout,
                                        stdout=f, stderr=subprocess.STDOUT, env=environ(),
                                        start_new_session=True)  # fmt: skip
            why = wait_for(proc, log, SEED_UNTIL)
            clean, code = stop(proc)
            if why or not clean:
                raise RuntimeError(f"the seed run ({SEED_COMMAND}): {why or code}:\n{tail(log)}")
        finally:
            net.remove_host(host)
    run = checkout / "runs" / "default"
    for leftover in ("supervisord.pid", "supervisor.sock"):
        (run / leftover).unlink(missing_ok=True)
    return run


def rehearse(page: str, out: Path, seed_run: Path,
             report: Callable[[Outcome], None] = lambda o: None) -> list[Outcome]:  # fmt: skip
    """`page`'s blocks in `out` (its checkouts, logs and steps.json); `report` hears of each
    line's outcome as it comes."""
    out.mkdir(parents=True, exist_ok=True)
    ctrl_c_reaches_children()
    with netns.Network() as net:
        outcomes = PageRehearsal(page, out, net, seed_run, report).run()
    (out / "steps.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    return outcomes


def failures(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.result == "failed"]
