"""Start local processes: `actors` (N actor processes) or `train` (a learner plus N actors).
`lanes` prints the lane flag the actors get (`one_lane`; `make up` uses it).

Used by `make actors N=16` and `make train`. Actor i gets --actor-id i and metrics port
BASE+i; a Prometheus file_sd targets file lists them. Actors that die are restarted with backoff.
Ctrl-C (or SIGTERM) stops every process: SIGTERM first, SIGKILL after --grace-s.

`train` also prints a one-line status, read from the learner's /metrics endpoint (and each
actor's credit wait from its own, for the bottleneck verdict), so it shows the same numbers as
Prometheus and Grafana do.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.status import StatusWindow, actor_samples, scrape  # noqa: E402

PY = sys.executable


class Proc:
    def __init__(self, name: str, argv: list[str], log_path: Path | None):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.popen: subprocess.Popen | None = None
        self.restarts = 0
        self.next_start = 0.0

    def start(self) -> None:
        out = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 (child owns it)
        self.popen = subprocess.Popen(
            self.argv, stdout=out, stderr=subprocess.STDOUT if out else None
        )
        if out:
            out.close()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


def tail(path: Path | None, lines: int = 8) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def learner_argv(args: argparse.Namespace, run_dir: Path, host: str, port: str) -> list[str]:
    return [
        *(PY, "-m", "learner", "--run-dir", str(run_dir), "--host", host, "--port", port),
        *("--metrics-port", str(args.learner_metrics_port)),
        # The learner shares the box with an actor on every other core: a second OpenMP thread
        # mostly waits at barriers for a descheduled peer (an update took 1.5x longer with 2
        # threads than with 1 beside running emulators; docs/PERFORMANCE.md). LEARNER_ARGS
        # come after, so --torch-threads there overrides.
        *("--torch-threads", "1"),
        *args.learner_args.split(),
    ]


def one_lane(actors: int, processes: int, cores: int) -> bool:
    """Whether actors should step one lane rather than two, given every process the launcher
    starts on this box (`processes`: the actors, plus the learner and the eval actor when it
    starts them).

    Two lanes pay off only where a core is spare: the second lane's thread overlaps inference
    with emulation on a core nothing else wants. Once the processes fill every core, threads add
    no CPU and one lane batches inference twice as wide. Measured on a 16-core box with 15
    actors: one lane streamed 0.97 of raw emulator speed, two lanes 0.89 (docs/PERFORMANCE.md).

    A lone actor keeps two lanes: it is then the run's only producer, and the learner beside it
    waits for its chunks, leaving CPU that the second lane uses. Measured with `make train` on
    the 2-core machine (1 actor, learner, eval actor): two lanes 1.22x the env frames/s of one.
    """
    return actors > 1 and processes >= cores


def local_processes(n: int, *, learner: bool, eval_actor: bool) -> int:
    """Processes the launcher starts: `n` actors, the learner and the eval actor if asked."""
    return n + int(learner) + int(eval_actor)


def lanes_flag(actors: int, processes: int, cores: int | None = None) -> list[str]:
    """`--lanes 1` when `one_lane` says so, else nothing (the actor's default of 2 lanes)."""
    if cores is None:
        cores = os.process_cpu_count() or 1
    return ["--lanes", "1"] if one_lane(actors, processes, cores) else []


def actor_argv(i: int, args: argparse.Namespace, extra: list[str]) -> list[str]:
    argv = [PY, "-m", "actor", "--actor-id", str(i), "--learner", args.learner]
    if args.metrics_base_port:
        argv += ["--metrics-port", str(args.metrics_base_port + i)]
    train = args.mode == "train"
    processes = local_processes(args.n, learner=train, eval_actor=train and args.eval)
    return argv + lanes_flag(args.n, processes) + extra  # flags after -- come last: they override


def write_targets(
    path: Path, host: str, base: int, n: int, job: str = "mario-actor", first_id: int = 0
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    targets = [
        {"targets": [f"{host}:{base + i}"], "labels": {"job": job, "actor_id": str(first_id + i)}}
        for i in range(n)
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(targets, indent=2) + "\n")
    os.replace(tmp, path)


def supervise(procs: list[Proc], args: argparse.Namespace, learner: Proc | None) -> int:
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for p in procs:
        p.start()
    url = f"http://127.0.0.1:{args.learner_metrics_port}/metrics" if learner else None
    base = args.metrics_base_port if learner else 0
    actor_urls = [f"http://127.0.0.1:{base + i}/metrics" for i in range(args.n)] if base else []
    window = StatusWindow()
    last_status = time.monotonic()
    code = 0
    while not stopping:
        time.sleep(0.2)
        if learner and not learner.alive():
            print(
                f"\nlearner exited with status {learner.popen.returncode}:\n{tail(learner.log_path)}",
                file=sys.stderr,
            )
            code = learner.popen.returncode or 1
            break
        for p in procs:
            if p is learner or p.alive():
                continue
            if p.popen.returncode == 2 and p.next_start == 0.0:  # refused its config: no retry
                print(f"\n{p.name} refused to start:\n{tail(p.log_path)}", file=sys.stderr)
                p.next_start = float("inf")
                if all(q.next_start == float("inf") for q in procs if q is not learner):
                    code = 2
                    stopping = True
                continue
            if p.next_start == 0.0:  # just died: schedule a restart with backoff
                wait = min(30.0, 2.0**p.restarts)
                where = f" (log: {p.log_path})" if p.log_path else ""
                print(
                    f"\n{p.name} exited with status {p.popen.returncode}; restarting in {wait:.0f} s{where}",
                    file=sys.stderr,
                )
                p.next_start = time.monotonic() + wait
                p.restarts += 1
            elif time.monotonic() >= p.next_start:
                p.next_start = 0.0
                p.start()
        if url and time.monotonic() - last_status >= args.status_interval_s:
            now = scrape(url)
            if now:  # the learner answered; add the actors that do
                for i, actor_url in enumerate(actor_urls):
                    now |= actor_samples(scrape(actor_url, timeout_s=0.5), i)
                sys.stderr.write("\r" + window.line(now) + "  ")
                sys.stderr.flush()
            last_status = time.monotonic()
    print("\nstopping...", file=sys.stderr)
    for p in procs:
        if p.alive():
            p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + args.grace_s
    for p in procs:
        if p.popen is None:
            continue
        try:
            p.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"{p.name} did not stop within {args.grace_s:.0f} s; killing it", file=sys.stderr)
            p.popen.kill()
            p.popen.wait()
    return code


def print_lanes(argv: list[str]) -> int:
    """`lanes`: print the actors' lane flag for a box running these processes (`make up`)."""
    parser = argparse.ArgumentParser(prog="launch.py lanes", description=print_lanes.__doc__)
    parser.add_argument("--n", type=int, required=True, help="actor processes on this box")
    parser.add_argument("--with-learner", action="store_true", help="a learner runs here too")
    parser.add_argument("--with-eval", action="store_true", help="an eval actor runs here too")
    args = parser.parse_args(argv)
    processes = local_processes(args.n, learner=args.with_learner, eval_actor=args.with_eval)
    print(" ".join(lanes_flag(args.n, processes)))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lanes"]:
        return print_lanes(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["actors", "train"])
    parser.add_argument(
        "--eval",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train: also run one greedy eval actor (videos in RUN/eval)",
    )
    parser.add_argument(
        "--n", type=int, default=max(1, (os.process_cpu_count() or 2) - 1), help="actor processes"
    )
    parser.add_argument(
        "--learner", default="127.0.0.1:5555", help="learner HOST:PORT for the actors"
    )
    parser.add_argument(
        "--run-dir", default="runs/default", help="learner run directory (train); logs go under it"
    )
    parser.add_argument(
        "--metrics-base-port",
        type=int,
        default=9100,
        help="actor i serves /metrics on BASE+i (0 = off)",
    )
    parser.add_argument(
        "--learner-metrics-port", type=int, default=9000, help="learner /metrics port (train)"
    )
    parser.add_argument(
        "--targets-file", default="runs/targets/actors.json", help="Prometheus file_sd targets file"
    )
    parser.add_argument(
        "--status-interval-s", type=float, default=2.0, help="status line refresh (train)"
    )
    parser.add_argument(
        "--grace-s", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL on stop"
    )
    parser.add_argument(
        "--learner-args", default="", help="extra learner flags, one string (train)"
    )
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser.epilog = (
        "Flags after -- go to every actor (see python -m actor --help). "
        "`launch.py lanes --n N [--with-learner] [--with-eval]` prints the lane flag alone."
    )
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be >= 1")
    run_dir = Path(args.run_dir)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    host, _, port = args.learner.rpartition(":")
    procs: list[Proc] = []
    learner = None
    if args.mode == "train":
        learner = Proc(
            "learner",
            learner_argv(args, run_dir, host, port),
            logs / "learner.log",
        )
        procs.append(learner)
    for i in range(args.n):
        procs.append(Proc(f"actor {i}", actor_argv(i, args, extra), logs / f"actor-{i}.log"))
    if args.metrics_base_port:
        write_targets(Path(args.targets_file), "127.0.0.1", args.metrics_base_port, args.n)
    if args.mode == "train" and args.eval:  # one greedy eval actor, id N, metrics port BASE+N
        eval_argv = actor_argv(
            args.n, args, [*extra, "--eval", "--eval-dir", str(run_dir / "eval")]
        )
        procs.append(Proc("eval actor", eval_argv, logs / "eval.log"))
        if args.metrics_base_port:
            eval_targets = Path(args.targets_file).with_name("eval.json")
            write_targets(
                eval_targets, "127.0.0.1", args.metrics_base_port + args.n, 1, "mario-eval", args.n
            )
    print(
        f"{args.mode}: {'learner + ' if learner else ''}{args.n} actors; logs in {logs}/; Ctrl-C stops",
        file=sys.stderr,
    )
    return supervise(procs, args, learner)


if __name__ == "__main__":
    sys.exit(main())
