"""The pages' rehearsal: the command blocks of README.md, docs/getting-started.md and
docs/howto/*.md run as a reader would type them, at the shortened lengths their markers give
(blocks.py), each page on machines of its own (rehearse.py). PASS or FAIL.

    make pages                                        # every page
    python -m scripts.dev.pages docs/howto/evaluation.md --out /tmp/pages
    python -m scripts.dev.pages --check               # the markers alone: no run, no root

Each line's outcome is printed; each page's logs and steps.json go to OUT/<page>/. Needs root
and iproute2 (network namespaces); without them it says so and exits 2. A page's blocks whose
marker says what they need (prometheus) are reported as not run where it is missing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path

from scripts.dev.chaos import netns
from scripts.dev.pages.blocks import PAGES, UNMARKED, problems
from scripts.dev.pages.rehearse import Outcome, failures, rehearse, seed, stale_venv


def report(o: Outcome) -> None:
    why = f": {o.why.splitlines()[0]}" if o.why else ""
    print(
        f"  {o.result:11} {o.seconds:6.1f} s  {o.where} ({o.machine}) {o.command}{why}", flush=True
    )


def rehearsed() -> list[str]:
    return [p for p in PAGES if p not in UNMARKED]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scripts.dev.pages", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "pages", nargs="*", help=f"pages to rehearse (default: {', '.join(rehearsed())})"
    )
    p.add_argument("--out", default="runs/pages", help="emptied first (default runs/pages)")
    p.add_argument("--check", action="store_true", help="read the markers only; run nothing")
    args = p.parse_args(argv)
    unknown = [page for page in args.pages if page not in PAGES]
    if unknown:
        p.error(f"not a rehearsed page: {', '.join(unknown)} (they are {', '.join(PAGES)})")
    args.pages = args.pages or rehearsed()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bad = [problem for page in args.pages for problem in problems(page)]
    if bad:
        print("the markers cannot be rehearsed as they stand:\n  " + "\n  ".join(bad))
        return 1
    if args.check:
        print(f"every block of {len(args.pages)} pages has a marker that reads")
        return 0
    if why := netns.unavailable() or stale_venv():
        print(f"the pages' rehearsal cannot run here: {why}", file=sys.stderr)
        return 2
    out = Path(args.out).absolute()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.monotonic()
    print(f"a short run for every page to start from (logs in {out}/seed.log)", flush=True)
    trained = seed(out)
    failed = []
    for page in args.pages:
        print(f"\n==== {page}", flush=True)
        outcomes = rehearse(page, out / re.sub(r"[^\w.-]+", "-", page), trained, report)
        for o in failures(outcomes):
            print(f"\n{o.where} failed: {o.why}\n(log: {o.log})")
        failed += failures(outcomes)
    minutes = (time.monotonic() - t0) / 60
    print(f"\n{'FAIL' if failed else 'PASS'}: {len(args.pages)} pages in {minutes:.1f} min")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
