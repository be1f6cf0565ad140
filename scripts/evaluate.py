"""Evaluate a checkpoint: play episodes on a level, keep the best one as a video, summarise.

    make eval RUN=runs/x [LEVEL=1-1 EPISODES=5 POLICY=both DEVICE=auto]   # the run's latest checkpoint
    make eval CKPT=runs/x/checkpoints/ckpt-0000001234.pt

Both policies are played by default, EPISODES each: `greedy` (argmax actions) first, then `sampled`
(actions drawn from the policy, as the actors play, from a generator seeded by --seed). Each is
summarised on its own: mean and median max x, flag rate, mean return.

The policy sees exactly what it saw in training: the env factory's 84x84 grayscale frames, stacked
by `common.stacking.stack_frames` from a 4-frame ring whose `first` flags mask the frames of an
earlier episode. The env spec comes from the checkpoint (action set, frame size); the actor-side
fields (frame skip, no-progress cutoff) take the EnvSpec defaults unless given as flags.

Video: one full-colour NES screen (240x256, native) per agent step, upscaled by an integer factor
with nearest neighbour, at 60/frame_skip fps (15 fps for frame skip 4), H.264 yuv420p in MP4.
An episode of `length` agent steps gives `length + 1` frames: the reset screen, then the screen
after each step (the last NES frame of that step), the final (death / flag / cutoff) one included.
The best episode is the one with the largest max x, then the largest return, then the earliest.

The episode logic lives in actor/evaluation.py, shared with the eval-mode actor.
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import torch

from actor.evaluation import (
    NES_FPS,
    POLICIES,
    EvalSummary,
    action_set_for,
    check_compatible,
    episode_rows,
    make_policy,
    markdown_table,
    play_policies,
    seeded_generator,
    summarise,
    summary_line,
    write_video,
)
from common.env import EnvSpec, FrameEnv
from common.model import ActorCritic, DeviceUnavailable, ModelSpec, resolve_device
from common.rundir import RunDir


class EvalError(Exception):
    """Bad input: a missing or foreign file, or a checkpoint that cannot play the chosen env."""


class Checkpoint(NamedTuple):
    path: Path
    model: ActorCritic
    trained_action_set: str | None
    config: dict[str, Any]
    policy_version: int
    env_frames: int


def resolve_checkpoint(run_dir: Path | None, checkpoint: Path | None) -> Path:
    from learner.checkpoint import latest_path

    if checkpoint is not None:
        if not checkpoint.is_file():
            raise EvalError(f"checkpoint {checkpoint} does not exist")
        return checkpoint
    assert run_dir is not None
    if not run_dir.is_dir():
        raise EvalError(f"run dir {run_dir} does not exist; pass RUN=<run dir> or CKPT=<file>")
    run = RunDir(run_dir)
    path = latest_path(run)
    if path is None:
        raise EvalError(
            f"{run_dir} has no checkpoints in {run.checkpoints}; train first or pass CKPT="
        )
    return path


def load_checkpoint(path: Path) -> Checkpoint:
    from learner.checkpoint import load

    try:
        state = load(path)
    except Exception as exc:
        raise EvalError(
            f"{path} is not a checkpoint: torch.load cannot read it ({type(exc).__name__}); "
            "expected a file written by the learner (RUN/checkpoints/ckpt-*.pt)"
        ) from exc
    if not isinstance(state, dict):
        state = {"": state}  # reported below as missing both keys
    missing = [k for k in ("model", "model_spec") if not isinstance(state.get(k), dict)]
    if missing:
        raise EvalError(f"{path} is not a checkpoint: no {' or '.join(missing)} in it")
    try:
        model = ActorCritic(ModelSpec.from_dict(state["model_spec"]))
        model.load_state_dict(state["model"])
    except (TypeError, ValueError, RuntimeError) as exc:
        raise EvalError(f"{path}: its model_spec and weights do not make a network: {exc}") from exc
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    trained = config.get("action_set") or action_set_for(model.spec.num_actions)
    version, frames = int(state.get("policy_version", -1)), int(state.get("env_frames", -1))
    return Checkpoint(path, model, trained, config, version, frames)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="evaluate", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run-dir", type=Path, help="run directory: its latest checkpoint is played")
    src.add_argument("--checkpoint", type=Path, help="a checkpoint file to play")
    p.add_argument("--level", default="1-1", help="stage W-S, or a Gymnasium id")
    p.add_argument("--episodes", type=int, default=5, help="episodes to play with each policy")
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
    p.add_argument("--device", default="auto", choices=["cpu", "cuda", "auto"])
    p.add_argument("--action-set", help="action set (default: the checkpoint's)")
    p.add_argument("--frame-size", type=int, help="frame size (default: the checkpoint's)")
    p.add_argument("--frame-skip", type=int, default=EnvSpec.frame_skip, help="NES frames/step")
    p.add_argument(
        "--no-progress-steps",
        type=int,
        default=EnvSpec.no_progress_steps,
        help="end an episode after this many steps without a new max x (0 = never)",
    )
    p.add_argument("--scale", type=int, default=1, help="integer video upscaling (nearest)")
    p.add_argument("--no-video", action="store_true", help="skip best.mp4")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled policy's actions")
    p.add_argument(
        "--torch-threads", type=int, default=1, help="CPU threads for inference (as the actors)"
    )
    p.add_argument("--out", type=Path, help="output directory (default: RUN/eval)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    if not 1 <= args.scale <= 8:
        p.error(f"--scale must be in [1, 8], got {args.scale}")
    return args


def _default_out(ckpt: Path, run_dir: Path | None) -> Path:
    if run_dir is not None:
        return RunDir(run_dir).eval
    parent = ckpt.resolve().parent
    run = RunDir(parent.parent)  # the checkpoint's run, if it is in one's checkpoints/
    return run.eval if run.checkpoints == parent else RunDir(parent).eval


def _setup(args: argparse.Namespace) -> tuple[Checkpoint, EnvSpec, FrameEnv, torch.device]:
    """The checkpoint, the env it will play and the device; EvalError for any mismatch."""
    ckpt = load_checkpoint(resolve_checkpoint(args.run_dir, args.checkpoint))
    spec = EnvSpec(
        level=args.level,
        action_set=args.action_set or ckpt.trained_action_set or EnvSpec.action_set,
        frame_skip=args.frame_skip,
        frame_size=args.frame_size or ckpt.model.spec.frame_size,
        no_progress_steps=args.no_progress_steps,
    )
    if problems := spec.problems():
        raise EvalError("invalid env: " + "; ".join(problems))
    device = resolve_device(args.device)
    try:
        env = FrameEnv(spec)
    except Exception as exc:
        raise EvalError(
            f"cannot build env {spec.level!r} ({type(exc).__name__}: {exc}); "
            "--level takes a stage 1-1 .. 8-4 or a Gymnasium id"
        ) from exc
    if problems := check_compatible(
        ckpt.model.spec, ckpt.trained_action_set, spec, env.num_actions
    ):
        env.close()
        raise EvalError("; ".join(problems))
    return ckpt, spec, env, device


def evaluate(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """Play, write best.mp4 and summary.json; returns the summary and the Markdown tables."""
    ckpt, spec, env, device = _setup(args)
    names = POLICIES if args.policy == "both" else (args.policy,)
    generator = seeded_generator(args.seed)
    plan = [
        (name, make_policy(ckpt.model, greedy=name == "greedy", device=device, generator=generator))
        for name in names
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, args.torch_threads))  # batch-1 convs only lose from more threads
    try:
        played = play_policies(
            env,
            [(name, policy, args.episodes) for name, policy in plan],
            stack=ckpt.model.spec.stack,
            record=not args.no_video,
        )
    finally:
        env.close()
        torch.set_num_threads(threads)
    summaries = {name: summarise(played.episodes[name]) for name in names}
    out = args.out or _default_out(ckpt.path, args.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    video = None
    if played.best_frames and played.best is not None:
        fps = Fraction(NES_FPS, spec.frame_skip)
        write_video(out / "best.mp4", played.best_frames, fps, args.scale)
        h, w = played.best_frames[0].shape[:2]
        video = {"path": str(out / "best.mp4"), "policy": played.best[0]}
        video |= {"episode": played.best[1], "frames": len(played.best_frames)}
        video |= {"fps": float(fps), "codec": "h264", "pix_fmt": "yuv420p"}
        video |= {"width": w * args.scale, "height": h * args.scale}
    overall = {"policies": list(names), "episodes_per_policy": args.episodes}
    overall |= {"policy_version": ckpt.policy_version, "env_frames": ckpt.env_frames}
    overall |= {"level": spec.level, "checkpoint": str(ckpt.path)}
    overall |= {"seed": args.seed, "device": str(device)}
    result = {
        "overall": overall,
        "policies": {name: s._asdict() for name, s in summaries.items()},
        "env": spec.to_wire(),
        "model_spec": ckpt.model.spec.to_wire(),
        "video": video,
        "episodes": [
            {"policy": name} | row for name in names for row in episode_rows(played.episodes[name])
        ],
    }
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    tables = [
        f"## {name}\n\n{markdown_table(played.episodes[name], s, name)}"
        for name, s in summaries.items()
    ]
    return result, "\n\n".join(tables)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        result, table = evaluate(args)
    except (EvalError, DeviceUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    o = result["overall"]
    print(f"checkpoint {o['checkpoint']} (policy v{o['policy_version']}), level {o['level']}\n")
    print(table)
    print()
    for name, s in result["policies"].items():  # one line per policy, together for comparison
        print(summary_line(EvalSummary(**s), name))
    if result["video"]:
        v = result["video"]
        print(
            f"\nbest episode: {v['policy']} {v['episode']}: {v['path']} "
            f"({v['frames']} frames, {v['fps']:g} fps)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
