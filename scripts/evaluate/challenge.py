"""`make best RUN=...` (python -m scripts.evaluate.challenge): the run's latest checkpoint
challenges the best policy its eval actor kept (RUN/eval/best-policy.pt), by the eval actor's own
rule (actor/best.py): each plays the same fresh perturbed episodes of every level of the run, with
the same kind of policy, in the same envs, and the higher mean is kept, the file rewritten with its
fresh score (a tie keeps the kept one). With nothing kept, or nothing comparable (another level set
or network), the latest checkpoint is kept on its own score.

The eval actor challenges a policy only after a window of its episodes beats the kept score, and a
challenge takes minutes, so a run stopped mid-way leaves its newest weights unjudged: the README's
two 1-1 runs stopped at 3 M frames with kept policies 400 k frames older than their last
checkpoints (docs/results.md). This is that last challenge, played once the run has stopped (the
eval actor writes the same file).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

from actor.best import BestKeeper, Score, challenge_plan, episodes_score
from actor.config import EvalConfig
from actor.evaluation import EpisodePlayer, model_policy, perturbed
from common.env import EpisodeSummary, build_envs
from common.env_spec import EnvSpec
from common.model import ActorCritic
from common.rundir import RunDir
from scripts.evaluate.checkpoint import (
    EvalError,
    levels_to_play,
    load_checkpoint,
    resolve_checkpoint,
)

POLICY = "sampled"  # the eval actor's judging policy, when it plays sampled episodes (the default)


def run_env(config: dict, level: str) -> EnvSpec:
    """The env the run trained on (a checkpoint's config holds its learner's settings), on
    `level` (a set); a setting the learner resolves itself (None: frontier starts) takes the
    env's default (evaluation plays from the level's start anyway)."""
    fields = {f.name for f in dataclasses.fields(EnvSpec)}
    given = {k: v for k, v in config.items() if k in fields and v is not None}
    return EnvSpec(**given | {"level": level})


def play(
    model: ActorCritic, players: dict[str, EpisodePlayer], plan: dict[str, int], rng
) -> dict[str, list[EpisodeSummary]]:
    """`plan[level]` sampled episodes of each level, `model` playing `players`' envs."""
    policy = model_policy(model, greedy=POLICY == "greedy", rng=rng)
    return {
        level: [players[level].play(policy).summary for _ in range(n)] for level, n in plan.items()
    }


def challenge(run_dir: Path, episodes: int, seed: int = 0) -> str:
    """Play the run's latest checkpoint against its kept best; what happened, in a sentence."""
    if not run_dir.is_dir():
        raise EvalError(f"run dir {run_dir} does not exist; pass RUN=<run dir>")
    run = RunDir(run_dir)
    latest = load_checkpoint(resolve_checkpoint(run_dir, None, latest=True).path)
    keeper = BestKeeper(run.best_policy)
    kept = keeper.best
    if kept is not None and kept.policy_version >= latest.policy_version:
        return (
            f"{run.best_policy} holds v{kept.policy_version}, the latest checkpoint's version "
            f"(v{latest.policy_version}) or newer: nothing to challenge"
        )
    level = levels_to_play(None, run, latest.config).level
    spec = run_env(latest.config, level)
    if problems := spec.problems():
        raise EvalError(f"the run's env cannot be built: {'; '.join(problems)}")
    setting = perturbed(spec)
    plan = challenge_plan(spec.levels, episodes)
    state_size = latest.model.spec.state_size
    players = {
        lv: EpisodePlayer(build_envs(dataclasses.replace(setting, level=lv), 1, seed=seed)[0],
                          state_size, record=False)
        for lv in spec.levels
    }  # fmt: skip
    try:
        rival = keeper.rival(latest.model.spec, spec.levels)
        rng = np.random.default_rng(seed)  # inference runs under torch.inference_mode
        ours = episodes_score(play(latest.model.eval(), players, plan, rng))
        theirs = episodes_score(play(rival, players, plan, rng)) if rival is not None else None
    finally:
        for p in players.values():
            p.env.close()
    judged_by = {"policy": POLICY, "sticky_actions": setting.sticky_actions}
    judged_by["noop_max"] = setting.noop_max
    won = keeper.settle(
        ours, theirs, None, latest.model, spec, latest.policy_version, latest.env_frames, judged_by
    )
    best = keeper.best
    assert best is not None
    return (
        f"v{latest.policy_version} (the latest checkpoint): {_said(ours)}; "
        + (
            "nothing comparable kept"
            if theirs is None
            else f"v{kept.policy_version} (kept): {_said(theirs)}"
        )  # fmt: skip
        + f", {sum(plan.values())} fresh perturbed {POLICY} episodes each. "
        + ("The latest checkpoint is kept" if won else "The kept policy stays")
        + f": {run.best_policy} holds v{best.policy_version}, score {best.score:.3f}"
    )


def unjudged(run_dir: Path) -> str | None:
    """What to do when the run's latest checkpoint is newer than the best policy its eval actor
    kept (the run stopped before the eval actor challenged it); None when it is not, or nothing
    is kept."""
    from learner.checkpoint import latest_path

    run = RunDir(run_dir)
    latest = latest_path(run) if run.checkpoints.is_dir() else None
    kept = BestKeeper(run.best_policy).best if run.best_policy.is_file() else None
    if latest is None or kept is None:
        return None
    try:
        version = load_checkpoint(latest).policy_version
    except EvalError:  # make best would say why
        return None
    if version <= kept.policy_version:
        return None
    return (
        f"the best policy kept, v{kept.policy_version} (what make eval plays), is older than the "
        f"last checkpoint, v{version}, which was never judged against it: make best RUN={run_dir} "
        "plays them off as the eval actor would (a few minutes)"
    )


def _said(s: Score) -> str:
    flags = sum(s.flag_rates.values()) / len(s.flag_rates)
    return f"score {s.value:.3f}, flags {flags:.0%}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.evaluate.challenge", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--run-dir", type=Path, required=True, help="the run (make best RUN=)")
    p.add_argument(
        "--episodes", type=int, default=EvalConfig.eval_challenge_episodes,
        help="fresh episodes each policy plays, spread over the levels (default: the eval "
        "actor's --eval-challenge-episodes, %(default)s)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seeds the envs and the sampling")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    torch.set_num_threads(1)  # batch-of-one inference, as the actors run it
    try:
        print(challenge(args.run_dir, args.episodes, args.seed))
    except EvalError as exc:
        print(f"make best: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
