"""Evaluate a checkpoint: play episodes on a level, keep the best one as a video, summarise.

    make eval RUN=runs/x [LEVEL=1-1 EPISODES=5 GREEDY=1 DEVICE=auto]   # the run's latest checkpoint
    make eval CKPT=runs/x/checkpoints/ckpt-0000001234.pt

The policy sees exactly what it saw in training: the env factory's 84x84 grayscale frames, stacked
by `common.stacking.stack_frames` from a 4-frame ring whose `first` flags mask the frames of an
earlier episode. The env spec comes from the checkpoint (action set, frame size); the actor-side
fields (frame skip, no-progress cutoff) take the EnvSpec defaults unless given as flags.

Video: one full-colour NES screen (240x256, native) per agent step, upscaled by an integer factor
with nearest neighbour, at 60/frame_skip fps (15 fps for frame skip 4), H.264 yuv420p in MP4.
An episode of `length` agent steps gives `length + 1` frames: the reset screen, then the screen
after each step (the last NES frame of that step), the final (death / flag / cutoff) one included.
The best episode is the one with the largest max x, then the largest return, then the earliest.

Everything above `# ---- IO` reads no files and prints nothing, so an eval-mode actor can
reuse it: `FrameRing`, `make_policy`, `play_episode`, `play_episodes`, `screen_rgb`, `summarise`,
`episode_rows`, `check_compatible`, `upscale`, `markdown_table`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from actor.rollout import sample_actions
from common.env import ACTION_SETS, EnvSpec, EpisodeSummary, FrameEnv
from common.model import ActorCritic, ModelSpec
from common.stacking import STACK, stack_frames

NES_FPS = 60  # NES frames per second (60.0988 on hardware; players and the game say 60)

Policy = Callable[[torch.Tensor], int]  # stacked frames [1, S, H, W] uint8 -> action


class FrameRing:
    """The last `stack` frames of one env with their `first` flags, as the actor keeps them."""

    def __init__(self, frame_shape: tuple[int, int], stack: int = STACK):
        self.frames = torch.zeros((stack, 1, *frame_shape), dtype=torch.uint8)  # [S, 1, H, W]
        self.first = torch.zeros((stack, 1), dtype=torch.bool)  # [S, 1]

    def push(self, frame: np.ndarray, first: bool) -> None:
        """Append the newest frame (copied); `first` marks the reset frame of an episode."""
        self.frames = torch.roll(self.frames, -1, dims=0)
        self.first = torch.roll(self.first, -1, dims=0)
        self.frames[-1, 0] = torch.from_numpy(frame)
        self.first[-1, 0] = first

    def observe(self) -> torch.Tensor:
        """The policy's input for the newest frame: [1, S, H, W] uint8."""
        return stack_frames(self.frames, self.first, stack=self.frames.shape[0])[0]


def make_policy(model: ActorCritic, *, greedy: bool, device: torch.device | str = "cpu") -> Policy:
    """Argmax (greedy) or sampled actions from `model`, one observation at a time."""
    model = model.to(device).eval()

    def policy(obs: torch.Tensor) -> int:
        with torch.inference_mode():
            logits = model(obs.to(device)).logits  # [1, A]
            return int(sample_actions(logits.float().cpu(), greedy=greedy)[0])

    return policy


def screen_rgb(env: FrameEnv) -> np.ndarray:
    """A copy of the current full-resolution colour screen: [240, 256, 3] uint8 for Mario.

    Gymnasium envs give their last raw observation (grayscale repeated to three channels).
    """
    if env.spec.is_mario:
        return np.array(env._env.screen, dtype=np.uint8, copy=True)
    obs = np.asarray(env._obs, dtype=np.uint8)
    if obs.ndim == 2:
        obs = np.repeat(obs[:, :, None], 3, axis=2)
    return np.array(obs[:, :, :3], copy=True)


def play_episode(
    env: FrameEnv,
    policy: Policy,
    *,
    stack: int = STACK,
    on_frame: Callable[[], None] | None = None,
) -> EpisodeSummary:
    """Reset `env` and play one episode to its end; the env's own summary of it.

    `on_frame` is called after the reset and after every agent step (length + 1 calls), when the
    env shows the screen that step ended on: pass e.g. `lambda: frames.append(screen_rgb(env))`.
    """
    ring = FrameRing(env.frame_shape, stack)
    ring.push(env.reset(), first=True)
    if on_frame is not None:
        on_frame()
    while True:
        step = env.step(policy(ring.observe()))  # action[t] follows frame t; frame t+1 follows
        if on_frame is not None:
            on_frame()
        if step.episode is not None:
            return step.episode
        ring.push(step.frame, first=False)


def _screen_recorder(env: FrameEnv, into: list[np.ndarray]) -> Callable[[], None]:
    return lambda: into.append(screen_rgb(env))


def play_episodes(
    env: FrameEnv, policy: Policy, count: int, *, stack: int = STACK, record: bool = True
) -> tuple[list[EpisodeSummary], list[np.ndarray]]:
    """Play `count` episodes; their summaries and the best one's colour screens (see `best_index`).

    Only the best episode so far and the current one are held: about 180 KB per agent step each.
    """
    episodes: list[EpisodeSummary] = []
    best_frames: list[np.ndarray] = []
    for _ in range(count):
        frames: list[np.ndarray] = []
        on_frame = _screen_recorder(env, frames) if record else None
        episodes.append(play_episode(env, policy, stack=stack, on_frame=on_frame))
        if best_index(episodes) == len(episodes) - 1:
            best_frames = frames
    return episodes, best_frames


class EvalSummary(NamedTuple):
    episodes: int
    flag_rate: float
    mean_max_x: float
    max_max_x: int
    mean_return: float
    best_index: int  # the best episode: largest max_x, then return, then earliest


def best_index(episodes: Sequence[EpisodeSummary]) -> int:
    return max(
        range(len(episodes)), key=lambda i: (episodes[i].max_x, episodes[i].episode_return, -i)
    )


def summarise(episodes: Sequence[EpisodeSummary]) -> EvalSummary:
    if not episodes:
        raise ValueError("no episodes to summarise")
    return EvalSummary(
        episodes=len(episodes),
        flag_rate=float(np.mean([e.flag for e in episodes])),
        mean_max_x=float(np.mean([e.max_x for e in episodes])),
        max_max_x=max(e.max_x for e in episodes),
        mean_return=float(np.mean([e.episode_return for e in episodes])),
        best_index=best_index(episodes),
    )


def episode_rows(episodes: Sequence[EpisodeSummary]) -> list[dict[str, Any]]:
    """JSON-ready rows: index, max_x, flag, return, length, outcome."""
    return [
        {"index": i, "max_x": e.max_x, "flag": e.flag, "return": e.episode_return}
        | {"length": e.length, "outcome": e.outcome}
        for i, e in enumerate(episodes)
    ]


def action_set_for(num_actions: int) -> str | None:
    """The action set with this many actions, if exactly one has."""
    names = [name for name, combos in ACTION_SETS.items() if len(combos) == num_actions]
    return names[0] if len(names) == 1 else None


def check_compatible(
    model_spec: ModelSpec, trained_action_set: str | None, env_spec: EnvSpec, env_actions: int
) -> list[str]:
    """Every way the checkpoint's network cannot play this env, each saying what to change."""
    out = []
    if model_spec.num_actions != env_actions:
        trained = f" ({trained_action_set})" if trained_action_set else ""
        env_name = env_spec.action_set if env_spec.is_mario else env_spec.level
        fix = f"; pass --action-set {trained_action_set}" if trained_action_set else ""
        out.append(
            f"checkpoint has {model_spec.num_actions} actions{trained}, "
            f"env has {env_actions} ({env_name}){fix}"
        )
    if model_spec.frame_size != env_spec.frame_size:
        out.append(
            f"checkpoint expects {model_spec.frame_size}x{model_spec.frame_size} frames, env makes "
            f"{env_spec.frame_size}x{env_spec.frame_size}; pass --frame-size {model_spec.frame_size}"
        )
    return out


def upscale(frame: np.ndarray, scale: int) -> np.ndarray:
    """Nearest-neighbour integer upscaling of [H, W, C] to [H*scale, W*scale, C]."""
    if scale == 1:
        return frame
    return np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1)


def markdown_table(episodes: Sequence[EpisodeSummary], summary: EvalSummary) -> str:
    lines = [
        "| episode | max x | flag | return | length | outcome |",
        "|---:|---:|:---:|---:|---:|:---|",
    ]
    for i, e in enumerate(episodes):
        best = " (best)" if i == summary.best_index else ""
        lines.append(
            f"| {i}{best} | {e.max_x} | {'yes' if e.flag else 'no'} | {e.episode_return:.0f} "
            f"| {e.length} | {e.outcome} |"
        )
    lines.append("")
    lines.append(
        f"{summary.episodes} episodes: flag rate {summary.flag_rate:.2f}, "
        f"mean max x {summary.mean_max_x:.1f} (max {summary.max_max_x}), "
        f"mean return {summary.mean_return:.1f}"
    )
    return "\n".join(lines)


# ---- IO -------------------------------------------------------------------------------------


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
    ckpt_dir = run_dir / "checkpoints"
    path = latest_path(ckpt_dir) if ckpt_dir.is_dir() else None
    if path is None:
        raise EvalError(f"{run_dir} has no checkpoints in {ckpt_dir}; train first or pass CKPT=")
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
        model = ActorCritic(ModelSpec(**state["model_spec"]))
        model.load_state_dict(state["model"])
    except (TypeError, ValueError, RuntimeError) as exc:
        raise EvalError(f"{path}: its model_spec and weights do not make a network: {exc}") from exc
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    trained = config.get("action_set") or action_set_for(model.spec.num_actions)
    version, frames = int(state.get("policy_version", -1)), int(state.get("env_frames", -1))
    return Checkpoint(path, model, trained, config, version, frames)


def write_video(path: Path, frames: Sequence[np.ndarray], fps: Fraction, scale: int = 1) -> None:
    """H.264 yuv420p MP4 of [H, W, 3] uint8 RGB frames, written to a temp file then renamed."""
    import av

    height, width = frames[0].shape[0] * scale, frames[0].shape[1] * scale
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.mp4")
    with av.open(str(tmp), "w", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "18", "preset": "medium"}
        for frame in frames:
            image = av.VideoFrame.from_ndarray(np.ascontiguousarray(upscale(frame, scale)), "rgb24")
            container.mux(stream.encode(image))
        container.mux(stream.encode(None))  # flush the encoder's delayed frames
    os.replace(tmp, path)


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise EvalError("--device cuda asked for, but torch sees no CUDA device; pass --device cpu")
    return torch.device(name)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="evaluate", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run-dir", type=Path, help="run directory: its latest checkpoint is played")
    src.add_argument("--checkpoint", type=Path, help="a checkpoint file to play")
    p.add_argument("--level", default="1-1", help="stage W-S, or a Gymnasium id")
    p.add_argument("--episodes", type=int, default=5, help="episodes to play")
    p.add_argument(
        "--greedy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="argmax actions (default); --no-greedy samples from the policy",
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
    p.add_argument("--seed", type=int, default=0, help="torch seed (for --no-greedy)")
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
        return run_dir / "eval"
    parent = ckpt.resolve().parent
    return (parent.parent if parent.name == "checkpoints" else parent) / "eval"


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
    device = _resolve_device(args.device)
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
    """Play, write best.mp4 and summary.json; returns the summary and the Markdown table."""
    ckpt, spec, env, device = _setup(args)
    torch.manual_seed(args.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, args.torch_threads))  # batch-1 convs only lose from more threads
    policy = make_policy(ckpt.model, greedy=args.greedy, device=device)
    try:
        episodes, best_frames = play_episodes(
            env, policy, args.episodes, stack=ckpt.model.spec.stack, record=not args.no_video
        )
    finally:
        env.close()
        torch.set_num_threads(threads)
    summary = summarise(episodes)
    out = args.out or _default_out(ckpt.path, args.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    video = None
    if best_frames:
        fps = Fraction(NES_FPS, spec.frame_skip)
        write_video(out / "best.mp4", best_frames, fps, args.scale)
        h, w = best_frames[0].shape[:2]
        video = {"path": str(out / "best.mp4"), "episode": summary.best_index}
        video |= {"frames": len(best_frames), "fps": float(fps), "codec": "h264"}
        video |= {"pix_fmt": "yuv420p", "width": w * args.scale, "height": h * args.scale}
    overall = summary._asdict() | {"policy_version": ckpt.policy_version}
    overall |= {"env_frames": ckpt.env_frames, "level": spec.level, "checkpoint": str(ckpt.path)}
    overall |= {"greedy": args.greedy, "seed": args.seed, "device": str(device)}
    result = {
        "overall": overall,
        "env": spec.to_wire(),
        "model_spec": ckpt.model.spec.to_wire(),
        "video": video,
        "episodes": episode_rows(episodes),
    }
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    return result, markdown_table(episodes, summary)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        result, table = evaluate(args)
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    o = result["overall"]
    print(f"checkpoint {o['checkpoint']} (policy v{o['policy_version']}), level {o['level']}\n")
    print(table)
    if result["video"]:
        v = result["video"]
        print(
            f"\nbest episode {v['episode']}: {v['path']} ({v['frames']} frames, {v['fps']:g} fps)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
