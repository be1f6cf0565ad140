"""Multi-host rehearsal: docs/DEPLOY.md's "Actors on other hosts" (a learner host with its actors
and the eval actor, and the page's actor hosts), each a network namespace with its own address,
under network faults, judged PASS or FAIL.

    make hosts MINUTES=20     # or: python -m scripts.dev.chaos.hosts --minutes 20 --run-dir runs/hosts

The hosts are started with the page's own `make keys` and `make up` lines (layout.py, cluster.py),
so CURVE is on, and Prometheus on the learner host scrapes them all. On a seeded schedule
(schedule.py): an actor host's link goes down (a partition: no FIN, no RST), an actor host dies and
a new machine takes its place, the learner host's link goes down, the broadcast port alone is
blocked (nftables), the learner is killed (supervisord starts it again). Measured from each host's
own /metrics (watch.py, rehearsal.py), judged against docs/RELIABILITY.md's targets (judge.py);
the summary is printed and written to RUN/hosts.json; exit status 1 on FAIL. Needs root, iproute2,
nftables and Prometheus; without them it says what is missing and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from scripts.dev.chaos import netns
from scripts.dev.chaos.hosts.judge import judge
from scripts.dev.chaos.hosts.rehearsal import Rehearsal
from scripts.dev.chaos.hosts.schedule import KINDS, death_s, planned
from scripts.dev.chaos.soak.judge import print_checks, verdict
from scripts.dev.chaos.soak.schedule import SETTLE_S, shortest_minutes


def unavailable() -> str | None:
    """Why the rehearsal cannot run here, or None."""
    if why := netns.unavailable(nft=True):
        return why
    if shutil.which("prometheus") is None:
        return "Prometheus is not installed (apt-get install prometheus)"
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scripts.dev.chaos.hosts", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--minutes", type=float, default=20.0, help="length after warm-up (default 20)")
    p.add_argument("--run-dir", default="runs/hosts", help="emptied first (default runs/hosts)")
    p.add_argument("--seed", type=int, default=0, help="seeds the fault schedule")
    p.add_argument("--levels", default="1-1", help="the run's levels: 1-1 | world:1 | all")
    p.add_argument("--device", default="cpu", help="learner device (default cpu)")
    p.add_argument("--partition-s", type=float, default=30.0, help="an actor host's link down")
    p.add_argument("--learner-link-s", type=float, default=20.0, help="the learner's link down")
    p.add_argument("--block-s", type=float, default=30.0, help="the broadcast port blocked")
    p.add_argument("--gap-s", type=float, default=45.0, help="calm between faults")
    p.add_argument(
        "--death-s",
        type=float,
        default=0.0,
        help="a dead host's time before its replacement (default: actor timeout + 15)",
    )
    p.add_argument("--actor-timeout-s", type=float, default=15.0, help="the learner's")
    p.add_argument("--checkpoint-interval-s", type=float, default=30.0)
    p.add_argument("--unroll-length", type=int, default=32, help="the learner's T")
    p.add_argument("--max-policy-lag", type=int, default=50, help="the learner's")
    p.add_argument("--num-envs", type=int, default=4, help="envs per actor")
    p.add_argument("--learner-args", default="", help="more learner flags")
    p.add_argument("--actor-args", default="", help="more actor flags")
    args = p.parse_args(argv)
    problems = [f"--{k.replace('_', '-')} must be > 0" for k in
                ("minutes", "partition_s", "learner_link_s", "block_s", "gap_s",
                 "actor_timeout_s", "checkpoint_interval_s", "unroll_length", "num_envs")
                if getattr(args, k) <= 0]  # fmt: skip
    if args.death_s and args.death_s <= args.actor_timeout_s + 1:
        problems.append(
            "--death-s must exceed --actor-timeout-s + 1 (the learner forgets the "
            "dead host's actors first)"
        )
    if not problems and (short := too_short(args)):
        problems.append(short)
    run_dir = Path(args.run_dir)
    if run_dir.exists() and any(run_dir.iterdir()) and not (run_dir / ".hosts").exists():
        problems.append(f"{run_dir} holds something other than a rehearsal; pass another --run-dir")
    if problems:
        p.error("; ".join(problems))
    return args


def too_short(args: argparse.Namespace) -> str | None:
    """Why a rehearsal of --minutes cannot strike every kind of fault, naming the shortest that
    can; None when it can."""
    kinds_in = lambda duration_s: {f.kind for f in planned(args, duration_s)}  # noqa: E731
    if set(KINDS) <= kinds_in(args.minutes * 60):
        return None
    shortest = shortest_minutes(kinds_in, KINDS)
    lengths = (f"partition {args.partition_s:g} s, host death {death_s(args):g} s, learner link "
               f"{args.learner_link_s:g} s, broadcast block {args.block_s:g} s, learner kill")  # fmt: skip
    return (
        f"--minutes {args.minutes:g} (make hosts MINUTES={args.minutes:g}) is too short for one "
        f"round of every kind of fault ({lengths}), each after {args.gap_s:g} s of calm "
        f"(--gap-s), and the closing calm (the last {SETTLE_S:g} s, a sixth of a shorter run): "
        f"pass MINUTES={shortest:g} or more, or shorten the faults and the calm (HOSTS_ARGS: "
        "--gap-s, --partition-s, ...)"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if why := unavailable():
        print(f"make hosts cannot run here: {why}", file=sys.stderr)
        return 2
    os.environ["no_proxy"] = "*"  # the hosts' addresses are private: never through a proxy
    run_dir = Path(args.run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    (run_dir / ".hosts").touch()
    summary = Rehearsal(args).run()
    summary["checks"] = judge(summary)
    summary["verdict"], passed = verdict(summary["checks"])
    (run_dir / "hosts.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    kinds = ", ".join(f"{f['kind']} of {f['host']}" for f in summary["faults"])
    print(f"\n==== hosts rehearsal, {args.minutes:g} min, seed {args.seed}: {kinds}")
    print_checks(summary["checks"])
    print(summary["verdict"], f"(all figures in {run_dir / 'hosts.json'})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
