"""What a uniformly random policy reaches on each level of a set, with the env factory's settings.

    python -m scripts.analysis.random_baseline --levels world:1 --episodes 20 [--perturbed]
    python -m scripts.analysis.random_baseline --level 1-1 --episodes 200
    python -m scripts.analysis.random_baseline --levels all --episodes 50 --settings perturbed \
        --floors scripts/random_floors.json

The floor of each level's training curve: a run has learned something on a level once its
progress is clearly above this one, measured with the same frame skip, action set and no-progress
cutoff. The figures come as `make eval`'s matrix (scripts/evaluate/matrix.py), one row per level
under the policy `random`, with a mean row over the set: summary.md and summary.json in --out (no
videos unless --video). Each level's actions are drawn from a generator seeded by --seed and the
level.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

from actor.evaluation import NES_FPS, Policy, random_policy
from common.env import FrameEnv
from common.env_spec import EnvSpec
from scripts import reference
from scripts.evaluate import matrix as em
from scripts.evaluate import tables

SETTINGS = {"plain": em.Setting("plain", 0.0, 0), "perturbed": em.PERTURBED}
FLOOR_SETTING = {"plain": reference.UNPERTURBED, "perturbed": reference.PERTURBED}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = EnvSpec()
    p.add_argument(
        "--levels",
        "--level",
        dest="level",
        default=defaults.level,
        help="levels: 1-1 | 1-1,1-2 | world:1 | all, or a Gymnasium id",
    )
    p.add_argument(
        "--action-set", default=defaults.action_set, help="right_only | simple | complex"
    )
    p.add_argument(
        "--frame-skip", type=int, default=defaults.frame_skip, help="NES frames per agent step"
    )
    p.add_argument(
        "--no-progress-steps",
        type=int,
        default=defaults.no_progress_steps,
        help="no-progress cutoff (agent steps; 0 = never)",
    )
    p.add_argument("--episodes", type=int, default=200, help="episodes to play on each level")
    p.add_argument(
        "--settings",
        default="plain",
        help="plain | perturbed (sticky actions 0.25, no-op starts 0..30) | plain,perturbed",
    )
    p.add_argument(
        "--perturbed",
        action="store_true",
        help="play every level plain and with sticky actions 0.25 and no-op starts 0..30 too",
    )
    p.add_argument(
        "--floors",
        type=Path,
        default=None,
        help="merge each level's floor into this file (scripts/random_floors.json: the curves')",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--video", action="store_true", help="keep each level's best video and still")
    p.add_argument(
        "--out", type=Path, default=Path("runs/random_baseline"), help="output directory"
    )
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    names = [n.strip() for n in args.settings.split(",")]
    if args.perturbed:
        names = ["plain", "perturbed"]
    if not names or any(n not in SETTINGS for n in names) or len(set(names)) < len(names):
        p.error(f"--settings must be plain, perturbed or plain,perturbed, got {args.settings!r}")
    args.settings = [SETTINGS[n] for n in names]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    spec = EnvSpec(
        level=args.level,
        action_set=args.action_set,
        frame_skip=args.frame_skip,
        no_progress_steps=args.no_progress_steps,
    )
    if problems := spec.problems():
        print("error: invalid env: " + "; ".join(problems), file=sys.stderr)
        return 2
    settings = args.settings
    first = FrameEnv(dataclasses.replace(spec, level=spec.levels[0]))  # its action count
    num_actions = first.num_actions
    first.close()

    def policies_for(level: str, setting: em.Setting) -> list[tuple[str, Policy, int]]:
        rng = np.random.default_rng([args.seed, em.level_seed(level), settings.index(setting)])
        return [("random", random_policy(num_actions, rng), args.episodes)]

    args.out.mkdir(parents=True, exist_ok=True)
    results, bests = [], []
    fps = Fraction(NES_FPS, spec.frame_skip)
    command = "python -m scripts.analysis.random_baseline " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    for r in em.play_levels(spec, settings, policies_for, seed=args.seed, record=args.video):
        if (best := em.write_best(args.out, r, fps)) is not None:
            bests.append(best)
        if args.floors is not None:
            reference.save_floor(args.floors, _floor(r, command))
        results.append(r._replace(played=r.played._replace(best_frames=[])))
    matrix = em.tabulate(results)
    notes = {em.PERTURBED.name: "sticky actions 0.25, no-op starts 0..30"}
    table = f"## Random policy on {spec.level}\n\n" + tables.markdown(matrix, notes)
    if bests:
        table += "\n### Best episodes\n\n" + tables.best_table(bests) + "\n"
    summary = {
        "overall": {"policies": ["random"], "episodes_per_policy": args.episodes}
        | {"level": spec.level, "levels": list(spec.levels), "seed": args.seed}
        | {"settings": {s.name: s._asdict() for s in settings}},
        "matrix": tables.matrix_json(matrix),
        "best": bests,
        "env": spec.to_wire(),
        "episodes": tables.episodes_json(matrix),
    }
    tables.write_summary(args.out, summary, table)
    print(table)
    print(f"tables: {args.out / 'summary.md'}, {args.out / 'summary.json'}")
    return 0


def _floor(r: em.LevelResult, command: str) -> reference.Floor:
    """One played level's floor, as the curves read it."""
    c = em.cell(r.setting.name, r.level, "random", r.played.episodes["random"])
    return reference.Floor(
        r.level, FLOOR_SETTING[r.setting.name], c.episodes, round(c.mean_max_x, 1),
        None if c.mean_progress is None else round(c.mean_progress, 4), round(c.flag_rate, 4),
        command,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
