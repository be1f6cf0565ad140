"""Evaluate a checkpoint: every level of a set with each policy, a table per level and policy,
the best episode of each level as a video and a still.

    make eval RUN=runs/x [LEVELS=world:1 EPISODES=20 POLICY=both PERTURB=1 DEVICE=auto]
    make eval CKPT=runs/x/checkpoints/ckpt-0000001234.pt

With a run directory and no checkpoint named, the best policy the eval actor kept is played
(RUN/eval/best-policy.pt, actor/best.py), or the latest checkpoint when there is none yet (or
with --latest); the output says which file, why, and its policy version. It plays the levels
named (--levels, make's LEVELS), else the run's own: its config.json, the run dir's or that of the
run whose checkpoints/ or eval/ holds the checkpoint, else the levels the checkpoint records.

Both policies are played by default, EPISODES each on every level: `greedy` (argmax actions)
first, then `sampled` (actions drawn from the policy, as the actors play, from a generator seeded
by --seed and the level). Each (level, policy) is one row of the matrix (scripts/evaluate/matrix.py):
mean and median progress and max x, the flag, death and cutoff rates, and where the episodes that
missed the flag ended; a set of several levels gets a mean row per policy.

Perturbations: `--sticky-actions P` and `--noop-max N` play every episode with them; `--perturbed`
(`make eval`'s default) plays the matrix twice, perturbed first (the headline) and then plain,
and sets the figures side by side. Perturbed is the eval actor's definition
(`actor.evaluation.perturbed`: sticky actions 0.25 and no-op starts 0..30 after Machado et al.
2018, or the run's own where larger), unless those two flags say otherwise.

The policy sees exactly what it saw in training: its episodes step through the training actor's
own path (actor/evaluation.py: the frame ring, the previous action, the core's state and its reset
at an episode's start). The env spec comes from the checkpoint, whose run config the learner wrote
(action set, frame size, frame skip, no-progress cutoff; a flag overrides each); a checkpoint
without one takes the EnvSpec defaults.

Video: one full-colour NES screen (240x256, native) per agent step, upscaled by an integer factor
with nearest neighbour, at 60/frame_skip fps (15 fps for frame skip 4), H.264 yuv420p in MP4.
An episode of `length` agent steps gives `length + 1` frames: the reset screen, then the screen
after each step (the last NES frame of that step), the final (death / flag / cutoff) one included.
A level's best episode is the one with the largest max x, then the largest return, then the
earliest; its still is the screen on which it first reached that max x.

`--jobs N` plays N levels (each in one setting) at a time in spawned processes; each level's
episodes depend only on the seeds, so the figures are the same for every N.

The episode logic lives in actor/evaluation.py, shared with the eval actor; the matrix in
scripts/evaluate/matrix.py and its tables in scripts/evaluate/tables.py, shared with the random
baseline.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import shutil
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from actor.evaluation import NES_FPS, PERTURBATION, POLICIES, model_policy, perturbed
from common.env import FrameEnv
from common.env_spec import EnvSpec
from common.levels import progress
from common.model import DeviceUnavailable, device_problem, resolve_device
from common.rundir import RunDirError, make_writable
from scripts.evaluate import matrix as em
from scripts.evaluate import tables
from scripts.evaluate.checkpoint import (
    Checkpoint,
    EvalError,
    check_compatible,
    default_out,
    levels_to_play,
    load_checkpoint,
    resolve_checkpoint,
    run_played,
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="evaluate", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--run-dir",
        type=Path,
        help="run directory: the best policy the eval actor kept (eval/best-policy.pt) is played, "
        "else its latest checkpoint",
    )
    src.add_argument("--checkpoint", type=Path, help="a checkpoint file to play")
    p.add_argument(
        "--levels",
        "--level",
        dest="level",
        help="levels: 1-1 | 1-1,1-2 | world:1 | all (a set; one stage is a set of one), or a "
        "Gymnasium id (default: the run's own, from RUN/config.json, else those the checkpoint "
        "records)",
    )
    p.add_argument(
        "--episodes", type=int, default=5, help="episodes to play with each policy on each level"
    )
    p.add_argument(
        "--policy",
        choices=["both", *POLICIES],
        default="both",
        help="greedy: argmax actions; sampled: actions drawn from the policy; both (default): "
        "greedy episodes, then sampled ones, each summarised",
    )
    p.add_argument(
        "--greedy", dest="policy", action="store_const", const="greedy", help="--policy greedy"
    )
    p.add_argument(
        "--no-greedy", dest="policy", action="store_const", const="sampled", help="--policy sampled"
    )
    p.add_argument(
        "--device",
        default="auto",
        help="auto (the GPU if torch sees one), cpu, cuda or cuda:N (default: auto)",
    )
    p.add_argument("--action-set", help="action set (default: the checkpoint's)")
    p.add_argument("--frame-size", type=int, help="frame size (default: the checkpoint's)")
    p.add_argument("--frame-skip", type=int, help="NES frames/step (default: the checkpoint's)")
    p.add_argument(
        "--no-progress-steps",
        type=int,
        help="end an episode after this many steps without a new max x (0 = never; default: the "
        "checkpoint's)",
    )
    p.add_argument(
        "--sticky-actions",
        type=float,
        help="each NES frame repeats the previous frame's buttons with this p (default 0; with "
        f"--perturbed, the perturbed setting's p, default {PERTURBATION.sticky_actions})",
    )
    p.add_argument(
        "--noop-max",
        type=int,
        help="episodes start after 0..N no-op agent steps (default 0; with --perturbed, the "
        f"perturbed setting's N, default {PERTURBATION.noop_max})",
    )
    p.add_argument(
        "--perturbed",
        action="store_true",
        help="play every level perturbed (sticky actions and no-op starts: the headline), then "
        "plain, and set the figures side by side",
    )
    p.add_argument(
        "--latest",
        action="store_true",
        help="with --run-dir: play its latest checkpoint, not the best policy the eval actor kept",
    )
    p.add_argument("--scale", type=int, default=1, help="integer video upscaling (nearest)")
    p.add_argument("--no-video", action="store_true", help="skip the videos and stills")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled policy's actions")
    p.add_argument(
        "--torch-threads", type=int, default=1, help="CPU threads for inference (as the actors)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="processes playing levels side by side (one level and setting each at a time; the "
        "figures are the same for any number); up to one per free core",
    )
    p.add_argument("--out", type=Path, help="output directory (default: RUN/eval)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    if not 1 <= args.scale <= 8:
        p.error(f"--scale must be in [1, 8], got {args.scale}")
    if problem := device_problem(args.device):
        p.error(f"--{problem}")
    return args


def settings_of(args: argparse.Namespace, trained: dict[str, Any]) -> list[em.Setting]:
    """The settings to play: the flags' own, or with --perturbed perturbed (the headline: the
    flags', else `actor.evaluation.perturbed` of the run's own, `trained`) and then plain."""
    sticky, noop = args.sticky_actions, args.noop_max
    if args.perturbed:
        run = EnvSpec(
            sticky_actions=float(trained.get("sticky_actions") or 0.0),
            noop_max=int(trained.get("noop_max") or 0),
        )
        headline = perturbed(run)
        return [
            em.Setting(
                "perturbed",
                headline.sticky_actions if sticky is None else sticky,
                headline.noop_max if noop is None else noop,
            ),
            em.Setting("plain", 0.0, 0),
        ]
    sticky, noop = sticky or 0.0, noop or 0
    return [em.Setting("plain" if sticky == noop == 0 else "perturbed", sticky, noop)]


def _setup(
    args: argparse.Namespace, checked: bool = False
) -> tuple[Checkpoint, EnvSpec, torch.device]:
    """The checkpoint, the env it will play and the device; EvalError for any mismatch."""
    chosen = resolve_checkpoint(args.run_dir, args.checkpoint, args.latest)
    ckpt = load_checkpoint(chosen.path)
    if checked and ckpt.policy_version != args.policy_version:
        raise EvalError(  # the eval actor kept a new best meanwhile: the same file, new weights
            f"{chosen.path} changed while it was played (v{args.policy_version}, now "
            f"v{ckpt.policy_version}); run again"
        )
    # said with the results; each --jobs worker plays the same file, and checks it is unchanged
    args.chosen, args.policy_version, args.checkpoint = chosen.why, ckpt.policy_version, chosen.path
    if not checked:  # the levels, once: a --jobs worker is given them
        levels = levels_to_play(args.level, run_played(chosen.path, args.run_dir), ckpt.config)
        args.level, args.levels_from = levels

    def trained(name: str) -> object:  # the flag, else the run's setting, else the default
        given = getattr(args, name)
        return given if given is not None else ckpt.config.get(name, getattr(EnvSpec, name))

    spec = EnvSpec(
        level=args.level,
        action_set=args.action_set or ckpt.trained_action_set or EnvSpec.action_set,
        frame_skip=trained("frame_skip"),
        frame_size=args.frame_size or ckpt.model.spec.frame_size,
        no_progress_steps=trained("no_progress_steps"),
    )
    problems = spec.problems()
    for s in settings_of(args, ckpt.config):  # the perturbations' ranges, in the flags' own words
        bad = EnvSpec(sticky_actions=s.sticky_actions, noop_max=s.noop_max).problems()
        problems += [p.replace("sticky_actions", "--sticky-actions") for p in bad]
    if problems:
        raise EvalError(
            "invalid env: " + "; ".join(p.replace("noop_max", "--noop-max") for p in problems)
        )
    device = resolve_device(args.device)
    if checked:  # a --jobs worker: the parent checked the env against the network already
        return ckpt, spec, device
    try:  # the first level's env, to check the network fits the action set and frame size
        env = FrameEnv(dataclasses.replace(spec, level=spec.levels[0]))
    except Exception as exc:
        raise EvalError(
            f"cannot build env {spec.levels[0]!r} ({type(exc).__name__}: {exc}); "
            "--levels takes stages 1-1 .. 8-4 (1-1,1-2 | world:1 | all) or a Gymnasium id"
        ) from exc
    num_actions = env.num_actions
    env.close()
    if problems := check_compatible(ckpt.model.spec, ckpt.trained_action_set, spec, num_actions):
        raise EvalError("; ".join(problems))
    return ckpt, spec, device


class Plan(NamedTuple):
    """What every process that plays levels needs: built once per process from the flags."""

    args: argparse.Namespace
    ckpt: Checkpoint
    spec: EnvSpec
    device: torch.device
    settings: list[em.Setting]
    names: tuple[str, ...]  # the policies, in play order
    out: Path
    fps: Fraction


def plan_of(args: argparse.Namespace, checked: bool = False) -> Plan:
    ckpt, spec, device = _setup(args, checked)
    names = POLICIES if args.policy == "both" else (args.policy,)
    out = args.out or default_out(ckpt.path, args.run_dir)
    fps = Fraction(NES_FPS, spec.frame_skip)
    return Plan(args, ckpt, spec, device, settings_of(args, ckpt.config), names, out, fps)


def play_unit(plan: Plan, setting_index: int, level: str) -> tuple[em.LevelResult, dict | None]:
    """One level in one setting, every policy: its video and still written to the plan's out,
    the result returned without its screens, with what `write_best` wrote (None without video)."""
    args, model = plan.args, plan.ckpt.model
    rng = np.random.default_rng([args.seed, em.level_seed(level), setting_index])
    policies = [
        (name, model_policy(model, greedy=name == "greedy", rng=rng, device=plan.device),
         args.episodes)
        for name in plan.names
    ]  # fmt: skip
    r = em.play_level(
        plan.spec, plan.settings[setting_index], setting_index, level, policies,
        seed=args.seed, state_size=model.spec.state_size, record=not args.no_video,
    )  # fmt: skip
    best = em.write_best(plan.out, r, plan.fps, args.scale)
    return r._replace(played=r.played._replace(best_frames=[])), best


# ---- --jobs: worker processes, each with its own plan ------------------------------------------
_worker_plan: Plan | None = None


def _worker_init(args: argparse.Namespace) -> None:
    global _worker_plan
    torch.set_num_threads(max(1, args.torch_threads))
    _worker_plan = plan_of(args, checked=True)


def _worker_play(unit: tuple[int, str]) -> tuple[em.LevelResult, dict | None]:
    assert _worker_plan is not None, "a worker plays only after _worker_init"
    return play_unit(_worker_plan, *unit)


def play_all(
    plan: Plan, units: list[tuple[int, str]]
) -> Iterator[tuple[em.LevelResult, dict | None]]:
    """Every (setting index, level) unit, in the order given: in this process, or with --jobs N
    in N spawned processes (fresh interpreters: no emulator or thread state is forked), each
    playing one unit at a time. A unit's episodes depend on its seeds alone, so the matrix is the
    same for every N."""
    jobs = min(plan.args.jobs, len(units))
    if jobs <= 1:
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, plan.args.torch_threads))  # batch-1 convs lose from more
        try:
            for unit in units:
                yield play_unit(plan, *unit)
        finally:
            torch.set_num_threads(threads)
        return
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, ctx, initializer=_worker_init, initargs=(plan.args,)) as pool:
        try:
            yield from pool.map(_worker_play, units)
        except BrokenProcessPool as exc:
            raise EvalError(
                f"a process playing levels died ({exc}); --jobs 1 plays them in this process, "
                "where the cause shows"
            ) from exc


def evaluate(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """Play the matrix, write each level's video and still, best.mp4 (the best of the first
    setting, the headline, for `make report`), summary.json and summary.md; returns the summary
    and the Markdown."""
    plan = plan_of(args)
    ckpt, spec, settings, names, out = plan.ckpt, plan.spec, plan.settings, plan.names, plan.out
    try:
        make_writable(out)
    except RunDirError as exc:
        raise EvalError(
            f"{exc}; pass --out DIR (make's EVAL_ARGS=--out DIR) to write elsewhere"
        ) from exc
    units = [(i, level) for i in range(len(settings)) for level in spec.levels]
    results, bests, video = [], [], None
    for r, best in play_all(plan, units):
        if best is not None:
            bests.append(best)
            if r.setting == settings[0] and (video is None or _better(best, video)):
                shutil.copyfile(best["path"], out / "best.mp4")
                video = best | {"path": str(out / "best.mp4")}
        results.append(r)
    matrix = em.tabulate(results)
    overall = {"policies": list(names), "episodes_per_policy": args.episodes}
    overall |= {"policy_version": ckpt.policy_version, "env_frames": ckpt.env_frames}
    overall |= {"level": spec.level, "levels": list(spec.levels), "levels_from": args.levels_from}
    overall["checkpoint"] = str(ckpt.path)
    overall |= {"chosen": args.chosen, "best": ckpt.best}
    overall |= {"seed": args.seed, "device": str(plan.device), "out": str(out)}
    overall["settings"] = {s.name: s._asdict() for s in settings}
    overall["jobs"] = min(args.jobs, len(units))
    pooled = {  # each setting's episodes over its levels, the headline first: `make report`'s
        s.name: {
            name: em.summarise(
                [e for r in results if r.setting == s for e in r.played.episodes[name]]
            )._asdict()
            for name in names
        }
        for s in settings
    }
    result = {
        "overall": overall,
        "policies": pooled[settings[0].name],  # the headline, as before settings were pooled
        "pooled": pooled,
        "matrix": tables.matrix_json(matrix),
        "best": bests,
        "video": video,
        "env": spec.to_wire(),
        "model_spec": ckpt.model.spec.to_wire(),
        "episodes": tables.episodes_json(matrix),
    }
    notes = {s.name: _describe(s) for s in settings if s.sticky_actions or s.noop_max}
    head = f"## Policy v{ckpt.policy_version} on {spec.level}\n\n{describe_checkpoint(overall)}\n\n"
    table = head + tables.markdown(matrix, notes)
    if bests:
        table += "\n### Best episodes\n\n" + tables.best_table(bests) + "\n"
    tables.write_summary(out, result, table)
    return result, table


def _better(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether level best `a` went further than `b`: by progress where both are known."""
    pa, pb = progress(a["level"], a["max_x"]), progress(b["level"], b["max_x"])
    if pa is not None and pb is not None:
        return pa > pb
    return a["max_x"] > b["max_x"]


def describe_checkpoint(overall: dict[str, Any]) -> str:
    """Which file was played, why, and its policy version (and a kept best's score)."""
    o = overall
    line = f"Played `{o['checkpoint']}`, {o['chosen']}: policy v{o['policy_version']}"
    if o["env_frames"] >= 0:
        line += f", {o['env_frames']:,} env frames"
    if (best := o.get("best")) is not None:
        line += f", its score {best['score']:.3f} ({best.get('policy', 'sampled')} perturbed)"
    return line + "."


def _describe(s: em.Setting) -> str:
    return f"sticky actions {s.sticky_actions:g}, no-op starts 0..{s.noop_max}"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        result, table = evaluate(args)
    except (EvalError, DeviceUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    o = result["overall"]
    print(f"{describe_checkpoint(o)} Levels {o['level']} ({o['levels_from']}).\n")
    print(table)
    for b in result["best"]:
        print(f"best {b['setting']} episode on {b['level']}: {b['policy']} {b['episode']}: {b['path']} "
              f"({b['frames']} frames, {b['fps']:g} fps), still {b['still']}")  # fmt: skip
    print(f"tables: {Path(o['out']) / 'summary.md'}, {Path(o['out']) / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
