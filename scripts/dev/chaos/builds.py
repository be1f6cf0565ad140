"""Build N Mario envs one after another through the actors' build path, PASS if none fails.

    python -m scripts.dev.chaos.builds --count 1000 [--out FILE.json]

Each env is built and reset by `common.env.build_envs` with the actors' timeout and retries, in a
worker process that is started again if the build watchdog ends it (each such end is a failure).
Prints failures and build-time percentiles; the exit status is 1 if any build failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from actor.config import ActorConfig
from common.env import EnvBuildError, build_envs
from common.env_spec import EnvSpec
from scripts.checkout import ROOT
from scripts.dev.chaos.soak.judge import percentile

WORKER = [sys.executable, "-m", "scripts.dev.chaos.builds", "--worker"]  # builds N envs, then exits


def worker(count: int, level: str) -> int:
    """Build `count` envs as the actors do; one JSON line per build on stdout."""
    cfg, spec = ActorConfig(), EnvSpec(level=level)
    for _ in range(count):
        start = time.perf_counter()
        try:
            env = build_envs(spec, 1, timeout_s=cfg.build_timeout_s,
                             retries=cfg.build_retries)[0]  # fmt: skip
        except EnvBuildError as exc:
            print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
            continue
        env.close()
        print(json.dumps({"ok": True, "s": time.perf_counter() - start}), flush=True)
    return 0


def builds(count: int, level: str) -> dict:
    times: list[float] = []
    failures: list[str] = []
    restarts = 0
    start = time.perf_counter()
    while (left := count - len(times) - len(failures)) > 0:
        argv = [*WORKER, str(left), "--level", level]
        with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True) as proc:
            for line in proc.stdout or ():
                row = json.loads(line)
                if row["ok"]:
                    times.append(row["s"])
                else:
                    failures.append(row["error"])
                if (done := len(times) + len(failures)) % 100 == 0:
                    print(f"{done}/{count} builds, {len(failures)} failed", flush=True)
        if proc.returncode:
            restarts += 1
            failures.append(f"build worker exited {proc.returncode} (watchdog)")
    cfg = ActorConfig()
    return {
        "builds": count,
        "failures": len(failures),
        "failure_messages": failures[:20],
        "worker_restarts": restarts,
        **{f"p{p}_s": percentile(times, p) for p in (50, 90, 99)},
        "max_s": max(times, default=None),
        "wall_s": round(time.perf_counter() - start, 1),
        "timeout_s": cfg.build_timeout_s,
        "retries": cfg.build_retries,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m scripts.dev.chaos.builds", description=__doc__.split("\n")[0]
    )
    p.add_argument("--count", type=int, default=1000, help="envs to build (default 1000)")
    p.add_argument("--level", default="1-1")
    p.add_argument("--out", default="", help="also write the result here (JSON)")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.count < 1:
        p.error("--count must be >= 1")
    if args.worker:
        return worker(args.worker, args.level)
    result = builds(args.count, args.level)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    verdict = "FAIL" if result["failures"] else "PASS"
    print(verdict, f"{args.count} env builds, {result['failures']} failures")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
