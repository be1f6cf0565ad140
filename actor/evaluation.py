"""Evaluation episodes, free of sockets: used by `make eval` and by the eval-mode actor.

The policy sees exactly what it saw in training: the env factory's 84x84 grayscale frames, stacked
by `common.stacking.stack_frames` from a 4-frame ring whose `first` flags mask the frames of an
earlier episode, and its previous action (A = none at the episode's first step).

Video: one full-colour NES screen (240x256, native) per agent step, upscaled by an integer factor
with nearest neighbour, at 60/frame_skip fps (15 fps for frame skip 4), H.264 yuv420p in MP4.
An episode of `length` agent steps gives `length + 1` frames: the reset screen, then the screen
after each step (the last NES frame of that step), the final (death / flag / cutoff) one included.
The best episode is the one with the largest max x, then the largest return, then the earliest.

Two policies are played from one network: `greedy` (argmax actions; deterministic on a fixed start
state) and `sampled` (actions drawn from the policy, as the actors play, from a seeded generator).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from actor.rollout import sample_actions
from common.env import EpisodeSummary, FrameEnv
from common.env_spec import ACTION_SETS, EnvSpec
from common.model import ActorCritic, ModelSpec
from common.stacking import STACK, stack_frames

NES_FPS = 60  # NES frames per second (60.0988 on hardware; players and the game say 60)

POLICIES = ("greedy", "sampled")  # the labels of mario_eval_* and of make eval's summaries

# (stacked frames [1, S, H, W] uint8, previous action in [0, A], A = none) -> action. Called
# step by step through each episode; the previous action is A exactly at an episode's first step,
# where a recurrent policy resets its state.
Policy = Callable[[torch.Tensor, int], int]


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


def make_policy(
    model: ActorCritic,
    *,
    greedy: bool,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> Policy:
    """Argmax (greedy) or sampled actions from `model`, one observation at a time. Sampling draws
    from `generator` (a CPU generator; seed it for reproducible episodes), else torch's global one.
    A recurrent core's state is carried from step to step and zeroed at each episode's first step
    (previous action A), as the actors do.
    """
    model = model.to(device).eval()
    none = model.spec.num_actions
    state = model.initial_state(1, device)  # [1, C]

    def policy(obs: torch.Tensor, last_action: int) -> int:
        nonlocal state
        last = torch.tensor([last_action], dtype=torch.long, device=device)  # [1]
        if last_action == none:
            state = model.initial_state(1, device)
        with torch.inference_mode():
            out = model(obs.to(device), last, state)
            state = out.state
            logits = out.logits.float().cpu()  # [1, A]
            return int(sample_actions(logits, greedy=greedy, generator=generator)[0])

    return policy


def seeded_generator(*seed: int) -> torch.Generator:
    """A CPU generator seeded from one or more integers (e.g. `--seed` and the actor id)."""
    state = np.random.SeedSequence(list(seed)).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


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
    last = env.num_actions  # none yet
    while True:
        last = policy(ring.observe(), last)
        step = env.step(last)  # action[t] follows frame t; frame t+1 follows
        if on_frame is not None:
            on_frame()
        if step.episode is not None:
            return step.episode
        ring.push(step.frame, first=False)


def _screen_recorder(env: FrameEnv, into: list[np.ndarray], xs: list[int]) -> Callable[[], None]:
    """Each screen, and the episode's max x when it was shown (FrameEnv's running maximum)."""

    def record() -> None:
        into.append(screen_rgb(env))
        xs.append(env._max_x)

    return record


class Played(NamedTuple):
    episodes: dict[str, list[EpisodeSummary]]  # policy name -> its episodes, in play order
    best: tuple[str, int] | None  # (policy, index) of the best episode of all; None if none
    best_frames: list[np.ndarray]  # its colour screens; empty without recording
    best_peak: int = 0  # the index in best_frames of its max-x moment (first reached)


def play_policies(
    env: FrameEnv,
    policies: Sequence[tuple[str, Policy, int]],
    *,
    stack: int = STACK,
    record: bool = True,
) -> Played:
    """Play `count` episodes of each (name, policy, count) in turn; the best episode of all
    (largest max x, then return, then the earliest played) keeps its colour screens.

    Only the best episode so far and the current one are held: about 180 KB per agent step each.
    """
    episodes: dict[str, list[EpisodeSummary]] = {name: [] for name, _, _ in policies}
    best: tuple[str, int] | None = None
    best_key: tuple[int, float] | None = None
    best_frames: list[np.ndarray] = []
    best_peak = 0
    for name, policy, count in policies:
        for i in range(count):
            frames: list[np.ndarray] = []
            xs: list[int] = []
            on_frame = _screen_recorder(env, frames, xs) if record else None
            e = play_episode(env, policy, stack=stack, on_frame=on_frame)
            episodes[name].append(e)
            if best_key is None or (e.max_x, e.episode_return) > best_key:  # ties: the earliest
                best, best_key, best_frames = (name, i), (e.max_x, e.episode_return), frames
                best_peak = xs.index(max(xs)) if xs else 0
    return Played(episodes, best, best_frames, best_peak)


def play_episodes(
    env: FrameEnv, policy: Policy, count: int, *, stack: int = STACK, record: bool = True
) -> tuple[list[EpisodeSummary], list[np.ndarray]]:
    """Play `count` episodes; their summaries and the best one's colour screens (see `best_index`).

    Only the best episode so far and the current one are held: about 180 KB per agent step each.
    """
    played = play_policies(env, [("", policy, count)], stack=stack, record=record)
    return played.episodes[""], played.best_frames


class EvalSummary(NamedTuple):
    episodes: int
    flag_rate: float
    mean_max_x: float
    median_max_x: float
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
        median_max_x=float(np.median([e.max_x for e in episodes])),
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


def summary_line(summary: EvalSummary, policy: str = "") -> str:
    """One line: episodes, mean and median max x, flag rate, mean return; `policy` names it."""
    n = summary.episodes
    return (
        f"{policy + ': ' if policy else ''}{n} episode{'s' if n != 1 else ''}: "
        f"mean max x {summary.mean_max_x:.1f}, median {summary.median_max_x:.1f} "
        f"(max {summary.max_max_x}), flag rate {summary.flag_rate:.1%}, "
        f"mean return {summary.mean_return:.1f}"
    )


def markdown_table(
    episodes: Sequence[EpisodeSummary], summary: EvalSummary, policy: str = ""
) -> str:
    """The episodes as a Markdown table, then `summary_line`."""
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
    lines.append(summary_line(summary, policy))
    return "\n".join(lines)


# ---- IO -------------------------------------------------------------------------------------


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
