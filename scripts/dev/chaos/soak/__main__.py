"""Chaos soak: the deployment under repeated crashes and a rogue peer, judged PASS or FAIL.

    make soak MINUTES=30      # or: python -m scripts.dev.chaos.soak --minutes 30 --run-dir runs/soak

What `make up` starts (deployment.py), crashed on a seeded schedule (schedule.py) by kill -9 of
actors and of the learner, also mid-checkpoint-write (faults.py), with a rogue peer sending mutated
copies of real traffic (scripts/dev/chaos/rogue.py); measured from the processes' own /metrics,
supervisord and the run directory (measure.py, loop.py); judged against docs/RELIABILITY.md's
targets (judge.py). The summary is printed and written to RUN/soak.json; exit status 1 on FAIL.
"""

from __future__ import annotations

import argparse
import itertools
import json
import operator
import shutil
import sys
import textwrap
from pathlib import Path

from common.rundir import RunDir
from scripts.dev.chaos.soak.judge import judge, print_checks, verdict
from scripts.dev.chaos.soak.loop import Soak
from scripts.dev.chaos.soak.schedule import (
    KINDS,
    LEARNER_SHARE,
    SETTLE_S,
    planned,
    shortest_minutes,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scripts.dev.chaos.soak", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--minutes", type=float, default=30.0, help="soak length (default 30)")
    p.add_argument("--run-dir", default="runs/soak", help="emptied first (default runs/soak)")
    p.add_argument("--actors", type=int, default=2, help="training actors (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seeds the fault schedule and the rogue")
    p.add_argument(
        "--levels", "--level", default="1-1", help="the run's levels: 1-1 | world:1 | all"
    )
    p.add_argument("--device", default="cpu", help="learner device (default cpu)")
    p.add_argument("--checkpoint-interval-s", type=float, default=5.0)
    p.add_argument("--actor-kill-every-s", type=float, default=30.0)
    p.add_argument("--learner-kill-every-s", type=float, default=300.0)
    p.add_argument("--midwrite-kill-every-s", type=float, default=75.0)
    p.add_argument(
        "--learner-faults-share",
        type=float,
        default=LEARNER_SHARE,
        help="the share of the soak, from its start, in which the learner is killed; one learner "
        "life runs the rest, its memory judged from 2 minutes in (default 2/3)",
    )
    p.add_argument("--rogue-every-s", type=float, default=3.0, help="seconds between rogue bursts")
    p.add_argument("--learner-args", default="", help="more learner flags")
    p.add_argument("--actor-args", default="", help="more actor flags")
    args = p.parse_args(argv)
    problems = []
    if args.minutes <= 0:
        problems.append("--minutes must be > 0")
    if args.actors < 1:
        problems.append("--actors must be >= 1")
    if args.checkpoint_interval_s <= 0:
        problems.append("--checkpoint-interval-s must be > 0")
    if not 0 < args.learner_faults_share <= 1:
        problems.append("--learner-faults-share must be in (0, 1], a share of the soak")
    periods = ("actor_kill_every_s", "learner_kill_every_s", "midwrite_kill_every_s")
    problems += [f"--{k.replace('_', '-')} must be > 0" for k in periods if getattr(args, k) <= 0]
    if not problems and (short := too_short(args)):
        problems.append(short)
    run_dir = Path(args.run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        if not (run_dir / "soak.json").exists() and not (run_dir / ".soak").exists():
            problems.append(f"{run_dir} holds something other than a soak; pass another --run-dir")
        if RunDir(run_dir).supervisord_pid.exists():
            problems.append(f"{run_dir} has a running supervisord; make down RUN={run_dir} first")
    if problems:
        p.error("; ".join(problems))
    return args


def too_short(args: argparse.Namespace) -> str | None:
    """Why a soak of --minutes cannot strike every kind of fault, naming the shortest that can;
    None when it can."""
    kinds_in = lambda duration_s: {f.kind for f in planned(args, duration_s)}  # noqa: E731
    if set(KINDS) <= kinds_in(args.minutes * 60):
        return None
    shortest = shortest_minutes(kinds_in, KINDS)
    return (
        f"--minutes {args.minutes:g} (make soak MINUTES={args.minutes:g}) is too short for every "
        f"kind of fault ({', '.join(KINDS)}) before its closing calm (the last {SETTLE_S:g} s, a "
        f"sixth of a shorter soak): the first actor kill comes at {args.actor_kill_every_s:g} s "
        f"(--actor-kill-every-s); pass MINUTES={shortest:g} or more"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = Path(args.run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    (run_dir / ".soak").touch()
    summary = Soak(args).run()
    summary["checks"] = judge(summary)
    summary["verdict"], passed = verdict(summary["checks"])
    (run_dir / "soak.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"\n==== soak summary, {args.minutes:g} min, seed {args.seed}: {summary['faults']}")
    print_checks(summary["checks"])
    by_name = operator.itemgetter("name")
    for name, crashes in itertools.groupby(sorted(summary["crashed"], key=by_name), key=by_name):
        crashes = list(crashes)
        hows = ", ".join(sorted({c["how"] for c in crashes}))
        print(f"\n{name} crashed {len(crashes)} times ({hows}); the end of its log:")
        print(textwrap.indent(crashes[-1]["log"] or "(empty)", "  | "))
    print(summary["verdict"], f"(all figures in {run_dir / 'soak.json'})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
