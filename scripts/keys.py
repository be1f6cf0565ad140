"""Make ZeroMQ CURVE key pairs for the learner and N actors: `make keys N=16 [KEYS=runs/keys]`.

Writes the layout described in common/curve.py: the learner's pair and allow-list under
KEYS/learner/ (its --curve-dir), each actor's pair plus the learner's public key under
KEYS/actor-<id>/ (that actor's --curve-dir). Secret files are mode 0600.

Existing key pairs are kept, so running it again is safe and adds only the missing actors
(e.g. --n 32 after --n 16); --force replaces every pair in the range, the learner's too, after
which every actor directory, also those outside the range, needs the new learner.key.
"""

from __future__ import annotations

import argparse
import sys

from common.curve import make_keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="runs/keys", help="keys directory (default: runs/keys)")
    parser.add_argument("--n", type=int, required=True, help="number of actors")
    parser.add_argument("--first", type=int, default=0, help="first actor id (default: 0)")
    parser.add_argument("--force", action="store_true", help="replace existing key pairs")
    args = parser.parse_args(argv)
    if args.n < 0 or args.first < 0:
        parser.error("--n and --first must be >= 0")
    ids = range(args.first, args.first + args.n)
    created = make_keys(args.dir, ids, force=args.force)
    for path in created:
        print(f"created {path}")
    print(
        f"{args.dir}: learner and actors {args.first}..{args.first + args.n - 1} "
        f"({len(created)} new key pairs); learner --curve-dir {args.dir}/learner, "
        f"actor i --curve-dir {args.dir}/actor-i"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
