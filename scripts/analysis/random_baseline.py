"""What a uniformly random policy reaches on a level, with the env factory's settings.

    python -m scripts.analysis.random_baseline --level 1-1 --episodes 200

The yardstick for a training curve: a run has learned something once its mean max x_pos is
clearly above this one, measured with the same frame skip, action set and no-progress cutoff.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from actor.evaluation import play_episodes, summarise
from common.env import EnvSpec, FrameEnv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = EnvSpec()
    parser.add_argument("--level", default=defaults.level, help="stage W-S or a Gymnasium id")
    parser.add_argument(
        "--action-set", default=defaults.action_set, help="right_only | simple | complex"
    )
    parser.add_argument(
        "--frame-skip", type=int, default=defaults.frame_skip, help="NES frames per agent step"
    )
    parser.add_argument(
        "--no-progress-steps",
        type=int,
        default=defaults.no_progress_steps,
        help="no-progress cutoff (agent steps)",
    )
    parser.add_argument("--episodes", type=int, default=200, help="episodes to play")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)
    spec = EnvSpec(
        level=args.level,
        action_set=args.action_set,
        frame_skip=args.frame_skip,
        no_progress_steps=args.no_progress_steps,
    )
    env = FrameEnv(spec)
    rng = np.random.default_rng(args.seed)
    episodes, _ = play_episodes(
        env, lambda _obs, _last: int(rng.integers(env.num_actions)), args.episodes, record=False
    )
    overall = summarise(episodes)
    summary = {
        "level": spec.level,
        "action_set": spec.action_set,
        "frame_skip": spec.frame_skip,
        "no_progress_steps": spec.no_progress_steps,
        "episodes": overall.episodes,
        "mean_max_x": overall.mean_max_x,
        "median_max_x": float(np.median([e.max_x for e in episodes])),
        "mean_return": overall.mean_return,
        "flag_rate": overall.flag_rate,
        "outcomes": {
            o: sum(e.outcome == o for e in episodes)
            for o in ("flag", "death", "no_progress", "other")
        },
    }
    print(
        f"random policy on {spec.level} ({spec.action_set}, skip {spec.frame_skip}): mean max x "
        f"{summary['mean_max_x']:.0f} (median {summary['median_max_x']:.0f}), mean return "
        f"{summary['mean_return']:.0f}, flag rate {summary['flag_rate']:.2f} over {len(episodes)} episodes"
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
