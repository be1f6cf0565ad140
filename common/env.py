"""The env factory: one preprocessed 84x84 grayscale frame per agent step.

An agent step repeats the action for `frame_skip` NES frames, sums the rewards, and returns the
pixel-wise max of the last two frames (the NES draws some sprites on alternate frames), in nes-py's
grayscale, resized to `frame_size`. An episode is truncated (not terminated) after
`no_progress_steps` agent steps without a new max x; the training reward is the game's plus
`flag_bonus` or minus `death_penalty`. Perturbations (Machado et al. 2018): `sticky_actions` and
`noop_max`. An env draws each episode's level from the set (`common.levels`), keeps one emulator
per level played (~0.6 MiB each) and, with `frontier_starts`, its snapshots (`common.frontier`).
Envs are built one after another (`build_envs`), each timed, retried and under a watchdog:
building emulators in parallel is what made the previous trainer hang (docs/DESIGN.md).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import cv2
import gymnasium as gym
import numpy as np

from common.env_spec import ACTION_SETS, BUTTON_BITS, EnvSpec
from common.frontier import Archive, Cell
from common.levels import LevelSchedule

log = logging.getLogger(__name__)

# Exit status of a process whose env build overran its watchdog.
WATCHDOG_EXIT_CODE = 3


class EpisodeSummary(NamedTuple):
    """Reported once when an episode ends. `episode_return` is the game's own (unshaped) reward."""

    level: str
    episode_return: float
    length: int  # agent steps
    max_x: int
    flag: bool
    outcome: str  # flag | death | no_progress | other
    start_x: int = -1  # x of the frontier snapshot it started from; -1: the level's start


class Step(NamedTuple):
    frame: np.ndarray  # [H, W] uint8, a view reused by the next step: copy it to keep it
    reward: float  # training reward (shaped as configured)
    terminated: bool  # death or flag: the discount is zero
    truncated: bool  # no-progress cutoff or the env's own limit: bootstrap from `frame`
    episode: EpisodeSummary | None  # set when terminated or truncated


def signed_x(raw: int) -> int:
    """Mario's x from the game's 16-bit page:pixel pair, read as signed: the game takes it below
    zero (page 0xFF) where it moves Mario back (4-4's loops), which unsigned would be a max x."""
    return raw - 0x10000 if raw >= 0x8000 else raw


def _make_mario(world: int, stage: int) -> Any:
    """The nes-py stage env, its info dict (NESEnv's `_get_info` hook) cut to what training reads:
    the full dict costs ~5% of emulation time. Imported here: the learner never loads nes-py."""
    from gym_super_mario_bros import SuperMarioBrosEnv

    class LeanSuperMarioBrosEnv(SuperMarioBrosEnv):
        def _get_info(self) -> dict[str, Any]:
            return {"x_pos": self._x_position, "flag_get": self._flag_get}

    return LeanSuperMarioBrosEnv(target=(world, stage))


class FrameEnv:
    """One env: `reset() -> frame`, `step(action) -> Step`. Not thread-safe; one per thread."""

    def __init__(
        self,
        spec: EnvSpec,
        seed: int | tuple[int, ...] = 0,
        on_level_built: Callable[[float], object] = lambda seconds: None,
        build_timeout_s: float = 60.0,
        on_level_failed: Callable[[], object] = lambda: None,
        build_retries: int = 2,
    ):
        """`seed` drives the level draw, sticky actions and no-op starts. Each emulator built after
        the first (which this constructor builds) is reported to `on_level_built(seconds)`, built
        under a `watchdog` of `build_timeout_s` and retried `build_retries` times after a failure
        (each reported to `on_level_failed()`) before EnvBuildError."""
        problems = spec.problems()
        if problems:
            raise ValueError("invalid env spec: " + "; ".join(problems))
        self.spec = spec
        size = spec.frame_size
        self._out = np.zeros((size, size), np.uint8)
        self._half: np.ndarray | None = None
        seeds = (seed,) if isinstance(seed, int) else tuple(seed)
        self.schedule = LevelSchedule(spec.levels, seeds)
        self._rng = np.random.default_rng((*seeds, 1))  # sticky actions and no-op starts
        self._held = 0  # the buttons of the last NES frame (sticky actions)
        self.archive = Archive() if spec.frontier_starts and spec.is_mario else None  # snapshots
        self._cell: Cell | None = None  # the snapshot this episode started from
        self._games: dict[str, Any] = {}  # level -> its emulator, built when first drawn
        self._on_level_built = on_level_built
        self._on_level_failed = on_level_failed
        self._build_timeout_s = build_timeout_s
        self._build_retries = build_retries
        self.level = self.schedule.next_level()  # the first episode's, built with the env
        self._drawn = True  # the next reset plays self.level instead of drawing
        self._index = {level: i for i, level in enumerate(self.schedule.levels)}
        if spec.is_mario:
            self._games[self.level] = self._build(self.level)
            self._buttons = [
                sum(BUTTON_BITS[b] for b in combo) for combo in ACTION_SETS[spec.action_set]
            ]
            self.num_actions = len(self._buttons)
            self._gray = [np.zeros((240, 256), np.uint8) for _ in range(2)]
        else:
            self._games[self.level] = gym.make(spec.level, disable_env_checker=True)
            space = self._games[self.level].action_space
            if not isinstance(space, gym.spaces.Discrete):
                raise ValueError(f"{spec.level}: action space must be Discrete, got {space}")
            self.num_actions = int(space.n)
            self._buttons = list(range(self.num_actions))
            shape = self._games[self.level].observation_space.shape
            self._gray = [np.zeros(shape[:2], np.uint8) for _ in range(2)]
        self._env = self._games[self.level]
        self.frame_shape = (size, size)
        self._obs: Any = None
        self._new_episode()

    @property
    def level_index(self) -> int:
        """The current episode's level as its index in the set (a chunk's `level`)."""
        return self._index[self.level]

    @staticmethod
    def _build(level: str) -> Any:
        world, stage = (int(x) for x in level.split("-"))
        return _make_mario(world, stage)

    def _draw_level(self) -> None:
        """The next episode's level: its emulator, built now if this env never played it."""
        if not self._drawn:
            self.level = self.schedule.next_level()
        self._drawn = False
        for attempt in range(self._build_retries + 1):
            if self.level in self._games:
                break
            start = time.perf_counter()
            try:
                with watchdog(self._build_timeout_s, f"building the emulator of {self.level}"):
                    self._games[self.level] = self._build(self.level)
            except Exception as exc:
                self._on_level_failed()
                if attempt == self._build_retries:
                    raise EnvBuildError(
                        f"could not build the emulator of level {self.level} after "
                        f"{attempt + 1} attempts: {type(exc).__name__}: {exc}"
                    ) from exc
                log.warning("building level %s failed (%s); retrying", self.level, exc)
                time.sleep(0.5 * 2**attempt)
                continue
            seconds = time.perf_counter() - start
            log.info("built the emulator of level %s in %.2f s", self.level, seconds)
            self._on_level_built(seconds)
        self._env = self._games[self.level]

    def _new_episode(self) -> None:
        self._return = 0.0
        self._length = 0
        self._max_x = 0
        self._since_progress = 0

    def _grab(self, into: np.ndarray) -> None:
        """Full-resolution grayscale of the current frame into `into`."""
        if self.spec.is_mario:
            self._env.observation("grayscale", output=into)
        elif self._obs.ndim == 3:
            cv2.cvtColor(self._obs, cv2.COLOR_RGB2GRAY, dst=into)
        else:
            np.copyto(into, self._obs)

    def _finish_frame(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        if b is not None:
            np.maximum(a, b, out=a)
        if a.shape == self._out.shape:
            np.copyto(self._out, a)
            return self._out
        if a.shape[0] >= 2 * self._out.shape[0] and a.shape[1] >= 2 * self._out.shape[1]:
            # A 2x2 box filter (cv2's fast integer-factor path), then bilinear: about INTER_AREA's
            # quality at a tenth of its cost (~12 µs vs ~105 µs for 240x256 -> 84x84).
            h, w = a.shape[0] // 2, a.shape[1] // 2
            if self._half is None:
                self._half = np.empty((h, w), np.uint8)
            cv2.resize(a, (w, h), dst=self._half, interpolation=cv2.INTER_AREA)
            a = self._half
        cv2.resize(a, self.frame_shape, dst=self._out, interpolation=cv2.INTER_LINEAR)
        return self._out

    def reset(self) -> np.ndarray:
        """Start an episode on the next level of the set, at its start or (a `frontier_starts`
        share) at a snapshot of this env's archive; returns its first frame (a reused view: copy
        it to keep it)."""
        self._draw_level()
        self._cell = None
        if self.archive is not None:
            self.archive.trail.clear()  # an episode cut short (a restart) leaves no trail
            if self._rng.random() < self.spec.frontier_starts:
                self._cell = self.archive.pick(self.level, self._rng)
        info = self._start()
        self._held = 0
        if self.spec.noop_max:
            info = self._noop_start(info)
        self._new_episode()
        self._max_x = signed_x(int(info.get("x_pos", 0)))
        self._grab(self._gray[0])
        return self._finish_frame(self._gray[0], None)

    def _start(self) -> dict[str, Any]:
        """The emulator at the level's start, or at `_cell`'s snapshot; its info."""
        self._obs, info = self._env.reset()
        if self._cell is not None:
            self._env.load_state(self._cell.snapshot)  # dumped by this emulator (one per level)
            self._env._did_reset()  # the game's reward counters from the snapshot's state
            self._obs, info = self._env.screen, self._env._get_info()
        return info

    def _noop_start(self, info: dict[str, Any]) -> dict[str, Any]:
        """0..noop_max agent steps with no buttons; an episode that ends meanwhile restarts."""
        for _ in range(int(self._rng.integers(self.spec.noop_max + 1)) * self.spec.frame_skip):
            self._obs, _, terminated, truncated, info = self._env.step(0)
            if terminated or truncated:
                return self._start()
        return info

    def _remember(self, x: int) -> None:
        """The trail of an episode from the level's start: Mario standing on the ground at x."""
        ram = self._env.ram
        if x > 0 and ram[0x0E] == 8 and ram[0x1D] == 0 and ram[0xB5] == 1:  # normal, on ground
            self.archive.walk(self._length, x, self._env.dump_state)

    def step(self, action: int) -> Step:
        button = self._buttons[action]
        skip = self.spec.frame_skip
        reward = 0.0
        terminated = truncated = False
        info: dict[str, Any] = {}
        last = prev = None
        sticky = self.spec.sticky_actions
        repeats = self._rng.random(skip) < sticky if sticky else None
        for i in range(skip):
            if repeats is None or not repeats[i]:
                self._held = button
            self._obs, r, terminated, truncated, info = self._env.step(self._held)
            reward += r
            done = terminated or truncated
            if i >= skip - 2 or done:
                prev, last = last, self._gray[i % 2]
                self._grab(last)
            if done:
                break
        frame = self._finish_frame(last, prev)
        flag = bool(info.get("flag_get", False))
        x = signed_x(int(info.get("x_pos", 0)))
        self._return += reward
        self._length += 1
        if x > self._max_x:
            self._max_x = x
            self._since_progress = 0
        else:
            self._since_progress += 1
        cutoff = self.spec.no_progress_steps
        no_progress = cutoff > 0 and self._since_progress >= cutoff and not terminated
        shaped = reward
        if terminated:
            shaped += self.spec.flag_bonus if flag else -self.spec.death_penalty
        truncated = truncated or no_progress
        if self.archive is not None and self._cell is None and not (terminated or truncated):
            self._remember(x)
        episode = None
        if terminated or truncated:
            if no_progress:
                outcome = "no_progress"
            elif terminated:
                outcome = "flag" if flag else "death"
            else:
                outcome = "other"
            if self.archive is not None:
                failed = self._cell is None and outcome in ("death", "no_progress")
                self.archive.end(self.level, failed, self._rng)
            start_x = self._cell.x if self._cell else -1
            episode = EpisodeSummary(
                self.level, self._return, self._length, self._max_x, flag, outcome, start_x
            )
        return Step(frame, shaped, terminated, truncated, episode)

    def close(self) -> None:
        self.archive = None  # its snapshots die with their emulators
        for game in self._games.values():
            game.close()


@contextmanager
def watchdog(timeout_s: float, what: str) -> Iterator[None]:
    """End the process with WATCHDOG_EXIT_CODE and every thread's traceback if the block overruns:
    a timer thread (a hung native call cannot be interrupted), backed up by faulthandler's C
    thread a few seconds later in case the hang holds the GIL."""

    def expire() -> None:
        log.critical(
            "%s did not finish within its %.0f s budget; exiting so a supervisor can restart "
            "this process (raise the build timeout if this machine is just slow)", what, timeout_s,
        )  # fmt: skip
        faulthandler.dump_traceback(all_threads=True)
        os._exit(WATCHDOG_EXIT_CODE)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(timeout_s + 5.0, exit=True)
    try:
        yield
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()


class EnvBuildError(RuntimeError):
    """An env could not be built after all retries."""


def build_envs(
    spec: EnvSpec,
    count: int,
    *,
    timeout_s: float = 60.0,
    retries: int = 2,
    backoff_s: float = 0.5,
    on_built: Callable[[float], object] = lambda seconds: None,
    on_failed: Callable[[], object] = lambda: None,
    seed: int | tuple[int, ...] = 0,
    between: Callable[[], object] = lambda: None,
) -> list[FrameEnv]:
    """Build `count` envs one after another, each reset once, timed and logged; `on_built(s)` gets
    each env's (and each later emulator's) build time, `on_failed()` each failed attempt,
    `between()` runs after each env in the caller's thread (an actor keeps its link alive). Env i
    seeds with (*seed, i). A build that raises is retried `retries` times with exponential
    backoff, then EnvBuildError; one over `timeout_s` ends the process (`watchdog`)."""
    envs: list[FrameEnv] = []
    for i in range(count):
        for attempt in range(retries + 1):
            start = time.perf_counter()
            try:
                with watchdog(timeout_s, f"building env {i} ({spec.level})"):
                    seeds = (seed,) if isinstance(seed, int) else seed
                    env = FrameEnv(spec, (*seeds, i), on_built, timeout_s, on_failed, retries)
                    env.reset()
            except ValueError:
                raise  # a bad spec does not get better by retrying
            except Exception as exc:
                on_failed()
                if attempt == retries:
                    raise EnvBuildError(
                        f"could not build env {i} for level {spec.level!r} after "
                        f"{retries + 1} attempts: {type(exc).__name__}: {exc}"
                    ) from exc
                wait = backoff_s * 2**attempt
                log.warning(
                    "env %d build attempt %d failed (%s: %s); retrying in %.1f s",
                    i, attempt + 1, type(exc).__name__, exc, wait,
                )  # fmt: skip
                time.sleep(wait)
                continue
            seconds = time.perf_counter() - start
            log.info(
                "built env %d/%d (%s of %s) in %.2f s", i + 1, count, env.level, spec.level, seconds
            )
            on_built(seconds)
            envs.append(env)
            between()
            break
    return envs
