"""Evaluation episodes, free of sockets: played by the eval actor and by `make eval`.

An episode is stepped by the training actor's own path (actor/rollout.py): a `Lane` of one env,
its chunks dropped as they fill, so the policy sees in evaluation exactly what it saw in training.
Two policies are played from one network: `greedy` (argmax) and `sampled` (from a seeded
generator); "perturbed" is common.env_spec.PERTURBATION's; every episode starts at the level's
start. Videos: docs/EVALUATION.md, "The video".
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from actor.rollout import Lane, infer_and_act
from common.env import EpisodeSummary, FrameEnv, Step
from common.env_spec import PERTURBATION, EnvSpec, Perturbation

NES_FPS = 60  # NES frames per second (60.0988 on hardware; players and the game say 60)

POLICIES = ("greedy", "sampled")  # the labels of mario_eval_* and of make eval's summaries

CHUNK_STEPS = 32  # the lane's chunk length: its buffers are the frame ring; chunks are dropped


def perturbed(spec: EnvSpec, by: Perturbation = PERTURBATION) -> EnvSpec:
    """`spec` played perturbed: `by`'s sticky actions and no-op starts, or the spec's own where
    they are larger (a run that trains with more is judged with no less)."""
    return dataclasses.replace(
        spec,
        sticky_actions=max(spec.sticky_actions, by.sticky_actions),
        noop_max=max(spec.noop_max, by.noop_max),
        frontier_starts=0.0,  # evaluation plays from the level's start
    )


# The policy's turn for a lane's current step: it reads the lane's stacks, previous actions and
# core states (`observe`, `last_action`, `core_state`) and records its choice with `Lane.act`.
Policy = Callable[[Lane], None]


def model_policy(
    model: torch.nn.Module,
    *,
    greedy: bool,
    rng: np.random.Generator,
    device: torch.device | None = None,
) -> Policy:
    """Argmax (greedy) or sampled actions from `model`, through the actors' `infer_and_act`;
    sampling draws from `rng` (seed it for reproducible episodes)."""

    def policy(lane: Lane) -> None:
        infer_and_act(model, lane, rng, 0, greedy=greedy, device=device)

    return policy


def random_policy(num_actions: int, rng: np.random.Generator) -> Policy:
    """Uniformly random actions from `rng`, whatever the screen shows (the baseline's floor)."""

    def policy(lane: Lane) -> None:
        logits = np.zeros((lane.K, num_actions), np.float32)  # [K, A] uniform
        lane.act(rng.integers(num_actions, size=lane.K), logits, 0)

    return policy


def screen_rgb(env: FrameEnv) -> np.ndarray:
    """The current full-resolution colour screen, [240, 256, 3] uint8 for Mario: a view the
    env's next step overwrites, so keep a copy (`Screens.append` makes one).

    Gymnasium envs give their last raw observation (grayscale repeated to three channels).
    """
    if env.spec.is_mario:
        return env._env.screen
    obs = np.asarray(env._obs, dtype=np.uint8)
    if obs.ndim == 2:
        obs = np.repeat(obs[:, :, None], 3, axis=2)
    return obs[:, :, :3]


# glibc maps any allocation above 32 MiB (its dynamic mmap threshold's ceiling) on its own, and
# unmaps it when freed
SCREEN_BLOCK_BYTES = 48 * 2**20


class Screens(Sequence[np.ndarray]):
    """An episode's colour screens, [H, W, 3] uint8 each, copied into blocks of at least
    SCREEN_BLOCK_BYTES (256 Mario screens) that the system takes back when the episode is dropped.

    One array per screen (180 kB for Mario) came from the heap instead, which kept what the
    longest episode so far had used: the eval actor's memory stepped up with each longer episode,
    towards ~440 MB for a 2,400-step time-out. A block's pages are touched only as screens fill it.
    """

    def __init__(self) -> None:
        self._blocks: list[np.ndarray] = []  # [per_block, H, W, 3] each
        self._per_block = 0
        self._len = 0

    def append(self, screen: np.ndarray) -> None:
        if self._len == len(self._blocks) * self._per_block:
            if not self._blocks:
                self._per_block = -(-SCREEN_BLOCK_BYTES // max(1, screen.nbytes))
            self._blocks.append(np.empty((self._per_block, *screen.shape), np.uint8))
        block, i = divmod(self._len, self._per_block)
        np.copyto(self._blocks[block][i], screen)
        self._len += 1

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> np.ndarray:  # type: ignore[override]
        if not -self._len <= i < self._len:
            raise IndexError(f"screen {i} of {self._len}")
        block, j = divmod(i % self._len, self._per_block)
        return self._blocks[block][j]


class Episode(NamedTuple):
    summary: EpisodeSummary  # the env's own
    screens: Screens  # its colour screens, length + 1; empty without recording
    peak: int  # the index in `screens` of its max-x moment (first reached); 0 without


class _Watched:
    """The env as its lane steps it, with each episode's end and, when recording, its screens:
    the lane resets an env inside the step that ends its episode, so they are taken here."""

    def __init__(self, env: FrameEnv, record: bool):
        self.env, self.record = env, record
        self.frame_shape, self.num_actions = env.frame_shape, env.num_actions
        self.screens = Screens()
        self.xs: list[int] = []  # the episode's max x when each screen was shown
        self.ended: Episode | None = None

    @property
    def level_index(self) -> int:
        return self.env.level_index

    def _show(self) -> None:
        if self.record:
            self.screens.append(screen_rgb(self.env))
            self.xs.append(self.env._max_x)

    def reset(self) -> np.ndarray:
        frame = self.env.reset()
        self.screens, self.xs = Screens(), []
        self._show()
        return frame

    def step(self, action: int) -> Step:
        s = self.env.step(action)
        self._show()
        if s.episode is not None:
            peak = self.xs.index(max(self.xs)) if self.xs else 0
            self.ended = Episode(s.episode, self.screens, peak)
        return s


class EpisodePlayer:
    """One env, played one whole episode at a time by any policy; between episodes the env
    waits on its next episode's reset frame. `state_size`: the network's core state (0: none)."""

    def __init__(self, env: FrameEnv, state_size: int = 0, record: bool = True):
        if env.spec.frontier_starts:
            raise ValueError("evaluation plays from the level's start: set frontier_starts=0")
        self.env = env
        self._watched = _Watched(env, record)
        self.lane = Lane([self._watched], CHUNK_STEPS, env.num_actions, state_size=state_size)

    def play(self, policy: Policy, on_step: Callable[[], None] | None = None) -> Episode:
        """Play the current episode to its end; `on_step` is called after every agent step."""
        while True:
            policy(self.lane)  # action[t] follows the stack of frame t
            self.lane.step()  # frame t+1 follows; a finished episode's env is reset at once
            self.lane.take_finished()  # chunks are the learner's business
            if on_step is not None:
                on_step()
            if (ended := self._watched.ended) is not None:
                self._watched.ended = None
                return ended


def upscale(frame: np.ndarray, scale: int) -> np.ndarray:
    """Nearest-neighbour integer upscaling of [H, W, C] to [H*scale, W*scale, C]."""
    if scale == 1:
        return frame
    return np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1)


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
