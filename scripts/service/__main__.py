"""python -m scripts.service COMMAND: start, watch and stop this host's processes.

The host's settings come from the MARIO_* environment variables (scripts/service/host.py; `make`
sets them from its variables of the same names, systemd from /etc/mario-impala/env).

    exec learner | actor ID | eval    become that process (supervisord's programs, the systemd
                                      units, `make learner`; the learner writes its Prometheus
                                      targets file first); --print shows its command instead
    commands                          every process this host runs, with its command line
    up                                supervisord in the background (`make up`)
    train                             supervisord in the foreground with the status line (`make train`)
    actors                            the same without the learner and the eval actor (`make actors`)
    down                              stop everything, the learner last, and wait (`make down`)
    status                            supervisorctl status (`make status`)
    keys                              CURVE key pairs for them, in KEYS or runs/keys (`make keys`)
    targets                           their Prometheus file_sd lists, one file per kind in the
                                      TARGETS directory, named after the run (what make up writes;
                                      the systemd actor unit's ExecStartPre); train and down
                                      remove them when the processes stop

up, train and actors first check every port the host's processes will bind (PORT, PORT+1, the
learner's and the actors' metrics ports; scripts/service/ports.py): when one is in use, say by
another run on this machine, they start nothing and exit 2, naming the port, its holder and free
ports to pass instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from common.curve import make_keys
from common.rundir import RunDirError, make_writable
from scripts.checkout import ROOT
from scripts.service import host as hosts
from scripts.service import ports
from scripts.service.supervisor import CONF, Supervisor, SupervisorError
from scripts.service.targets import remove_targets, write_targets
from scripts.service.watch import Watcher


def _exec(h: hosts.Host, args: argparse.Namespace) -> int:
    argv = hosts.argv_for(h, args.role, args.id)
    if args.print:
        print(shlex.join(argv))
        return 0
    if args.role == "learner":  # `make learner` too: Prometheus finds the learner of any run
        try:
            write_targets(h, roles=("learner",))
        except OSError as exc:  # a learner that cannot list itself still trains
            print(f"warning: no Prometheus targets file for the learner: {exc}", file=sys.stderr)
    os.execv(argv[0], argv)  # the pid supervisord or systemd watches becomes the process itself


def _start(h: hosts.Host, args: argparse.Namespace) -> int:
    try:  # supervisord's socket and logs, the learner's checkpoints: all in RUN
        make_writable(Path(h.run))
    except RunDirError as exc:
        print(f"error: RUN={h.run}: {exc}; pass a RUN that can be made and written "
              "(e.g. RUN=runs/NAME); nothing was started", file=sys.stderr)  # fmt: skip
        return 2
    supervisor = Supervisor(h)
    # a supervisord of this run holds its ports itself: start() names it
    if supervisor.running_pid() is None and (why := ports.refusal(h, args.command)):
        print(f"error: {why}", file=sys.stderr)
        return 2
    foreground = args.command != "up"
    supervisor.start(foreground=foreground)
    for path in write_targets(h):
        print(f"Prometheus targets: {path}", file=sys.stderr)
    names, logs = ", ".join(hosts.commands(h)), supervisor.run.logs
    if not foreground:
        print(f"supervisord runs {names} for {h.run}; logs in {logs}/; make status, make down")
        return 0
    print(f"{args.command}: {names}; logs in {logs}/; Ctrl-C stops", file=sys.stderr)
    try:
        code = Watcher(h, supervisor).run(args.grace_s)
    finally:
        remove_targets(h)  # Prometheus stops scraping a run that has stopped
    if args.command == "train":
        from scripts.evaluate.challenge import unjudged

        if hint := unjudged(Path(h.run)):
            print(hint, file=sys.stderr)
    return code


def _down(h: hosts.Host, args: argparse.Namespace) -> int:
    supervisor = Supervisor(h)
    pid = supervisor.running_pid()
    if pid is None:
        supervisor.run.supervisord_pid.unlink(missing_ok=True)
        print(f"supervisord is not running for {h.run}")
        return 0
    if supervisor.shutdown(args.timeout_s):
        remove_targets(h)
        print("stopped: every process has exited")
        return 0
    print(
        f"error: supervisord (pid {pid}) still running after {args.timeout_s:.0f} s; see "
        f"{supervisor.run.logs / 'supervisord.log'}",
        file=sys.stderr,
    )
    return 1


def _status(h: hosts.Host, args: argparse.Namespace) -> int:
    env = Supervisor(h).env
    argv = [sys.executable, "-m", "supervisor.supervisorctl", "-c", str(CONF), "status"]
    return subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode


def _keys(h: hosts.Host, args: argparse.Namespace) -> int:
    """CURVE key pairs (common/curve.py's layout) for the learner and this host's actors and
    eval actor; existing pairs are kept, so running it again with more actors only adds theirs;
    --force replaces them all, after which every actor directory needs the new learner.key."""
    keys = h.keys or "runs/keys"
    ids = [*h.actor_ids, *([h.eval_id] if h.eval else [])]
    for path in make_keys(keys, ids, force=args.force):
        print(f"created {path}")
    evaluator = f" and the eval actor ({h.eval_id})" if h.eval else ""
    print(
        f"{keys}: learner, actors {h.first_actor}..{h.first_actor + h.n - 1}{evaluator}; learner "
        f"--curve-dir {keys}/learner, actor i --curve-dir {keys}/actor-i"
    )
    return 0


def _targets(h: hosts.Host, args: argparse.Namespace) -> int:
    for path in write_targets(h):
        print(f"Prometheus targets: {path}")
    return 0


def _commands(h: hosts.Host, args: argparse.Namespace) -> int:
    for name, argv in hosts.commands(h).items():
        print(f"{name}: {shlex.join(argv)}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.service",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    exec_ = sub.add_parser("exec", help="become the learner, an actor or the eval actor")
    exec_.add_argument("role", choices=["learner", "relay", "actor", "eval"])
    exec_.add_argument("id", nargs="?", type=int, help="the actor's id (actor only)")
    exec_.add_argument("--print", action="store_true", help="print the command, run nothing")
    sub.add_parser("commands", help="print every process's command line")
    for name in ("up", "train", "actors"):
        start = sub.add_parser(name, help=f"`make {name}`")
        start.add_argument(
            "--grace-s", type=float, default=180.0, help="wait this long for a clean stop"
        )
    down = sub.add_parser("down", help="`make down`")
    down.add_argument("--timeout-s", type=float, default=180.0, help="wait this long to stop")
    sub.add_parser("status", help="`make status`")
    sub.add_parser("targets", help="write this host's Prometheus targets files")
    keys_ = sub.add_parser("keys", help="`make keys`")
    keys_.add_argument("--force", action="store_true", help="replace the existing key pairs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "exec" and (args.role == "actor") != (args.id is not None):
        _parser().error("exec takes an id for an actor, and only for an actor")
    try:
        h = hosts.host_for(args.command)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if problems := h.problems():
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 2
    run = {"exec": _exec, "commands": _commands, "down": _down, "status": _status, "keys": _keys}
    run["targets"] = _targets
    try:
        return run.get(args.command, _start)(h, args)
    except SupervisorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
