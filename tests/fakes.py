"""Shared fakes: small Gymnasium envs with Mario's observation format (84x84 uint8 frames), and
random valid chunks.

The envs are referenced by Gymnasium id with the module prefix, e.g.
EnvSpec(level="tests.fakes:Corridor-v0"), so actor processes started by tests import this module
themselves.
"""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np

from common import chunk, wire

SIZE = 84

# Learner flags for a run on Corridor: one frame per step, a cutoff no shorter than its T, and
# the plain env (the learner's default perturbs it) that the tests' baselines and budgets assume.
CORRIDOR_LEARNER_ARGS = [
    *("--level", "tests.fakes:Corridor-v0", "--frame-skip", "1", "--no-progress-steps", "20"),
    *("--sticky-actions", "0", "--noop-max", "0"),
]


class Corridor(gym.Env):
    """A corridor with a goal at one end, shown in the image; reaching the other end is death.

    Each episode the goal is on the left or the right (random). The agent starts in the middle.
    Action 1 moves right, action 6 moves left (as in SIMPLE_MOVEMENT), the rest stay. Reward: 0.1
    for each new closest distance to the goal, +1 at the goal. A random policy rarely gets there
    within the step limit; a policy that reads the cue gets ~2 in `half` steps.
    """

    metadata = {"render_modes": []}

    def __init__(self, half: int = 8, max_steps: int = 60):
        self.half = half
        self.max_steps = max_steps
        self.action_space = gym.spaces.Discrete(7)
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE), np.uint8)
        self._frame = np.zeros((SIZE, SIZE), np.uint8)

    def _render(self) -> np.ndarray:
        f = self._frame
        f[:] = 0
        cue = slice(0, SIZE // 2) if self.goal < 0 else slice(SIZE // 2, SIZE)
        f[:12, cue] = 255  # the goal side, lit across the top
        col = int((self.pos + self.half) / (2 * self.half) * (SIZE - 8))
        f[30:70, col : col + 8] = 160  # the agent
        return f

    def _info(self) -> dict:
        return {"x_pos": self.best, "flag_get": self.pos == self.goal * self.half}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.goal = 1 if self.np_random.random() < 0.5 else -1
        self.pos = 0
        self.best = 0
        self.steps = 0
        return self._render(), self._info()

    def step(self, action):
        self.pos += {1: 1, 6: -1}.get(int(action), 0)
        self.steps += 1
        progress = self.pos * self.goal
        reward = 0.0
        if progress > self.best:
            reward += 0.1 * (progress - self.best)
            self.best = progress
        won = progress >= self.half
        lost = progress <= -self.half
        if won:
            reward += 1.0
        truncated = self.steps >= self.max_steps and not (won or lost)
        return self._render(), reward, won or lost, truncated, self._info()


class HangingBuild(gym.Env):
    """An env whose construction never finishes (a stand-in for a wedged emulator)."""

    def __init__(self):
        time.sleep(3600)


class FlakyBuild(Corridor):
    """Fails the first `FLAKY_FAILURES` constructions in this process (env var, default 2)."""

    built = 0

    def __init__(self):
        FlakyBuild.built += 1
        if FlakyBuild.built <= int(os.environ.get("FLAKY_FAILURES", "2")):
            raise RuntimeError(f"flaky build #{FlakyBuild.built}")
        super().__init__()


gym.register("Corridor-v0", entry_point=Corridor)
gym.register("HangingBuild-v0", entry_point=HangingBuild)
gym.register("FlakyBuild-v0", entry_point=FlakyBuild)


def make_chunk(
    seed: int = 0,
    T: int = 3,
    K: int = 2,
    H: int = 6,
    W: int = 5,
    A: int = 7,
    C: int = 0,
    levels: int = 1,
    **fields,
) -> wire.Chunk:
    """A random valid chunk: some steps terminated, some truncated (never both), a core state of
    width C (zero where step 0 starts an episode), each step's level drawn from a set of `levels`
    (all 0 for one); `fields` override the message's other fields."""
    rng = np.random.default_rng(seed)
    a = chunk.new_arrays({"T": T, "K": K, "H": H, "W": W, "A": A, "C": C})
    ends = rng.integers(0, 5, size=(T, K))  # 0: terminated, 1: truncated, else: goes on
    a["terminated"][:], a["truncated"][:] = ends == 0, ends == 1
    a["first"][:4] = rng.random((4, K)) < 0.3  # first[0:4] is free
    a["first"][4:] = a["terminated"] | a["truncated"]  # the frame after an end starts one
    for k in np.flatnonzero(a["truncated"].any(axis=0)):  # env k's last cut, as a lane keeps it
        a["final_t"][k] = np.flatnonzero(a["truncated"][:, k])[-1]
    a["frames"][:] = rng.integers(0, 256, size=a["frames"].shape)
    a["final_frames"][:] = rng.integers(0, 256, size=a["final_frames"].shape)
    a["actions"][:] = rng.integers(0, A, size=(T, K))
    a["rewards"][:] = rng.standard_normal((T, K))
    a["behaviour_logits"][:] = rng.standard_normal((T, K, A))
    a["last_actions"][:] = np.where(a["first"][3], A, rng.integers(0, A, size=K))
    a["core_state"][:] = np.where(a["first"][3, :, None], 0.0, rng.standard_normal((K, C)))
    if levels > 1:
        a["level"][:] = rng.integers(0, levels, size=(T, K))
    episodes = (
        wire.EpisodeStats(
            level="1-1", episode_return=12.5, length=33, max_x=410, flag=False, outcome="death"
        ),
        wire.EpisodeStats(
            level="1-2", episode_return=-1.0, length=1, max_x=0, flag=True, outcome="flag"
        ),
    )
    header = dict(actor_id=int(rng.integers(0, 100)), instance_id="3f2a9c", level="1-1",
                  seq=int(rng.integers(0, 1000)), policy_version=int(rng.integers(0, 50)),
                  send_time=1.7e9 + float(rng.random()), episodes=episodes)  # fmt: skip
    return wire.Chunk(**{**header, "arrays": a, **fields})


def scripted_policy(choose):
    """An `actor.evaluation.Policy` for a lane of one env from `choose(stack [S, H, W] uint8,
    previous action) -> action`: a test's scripted player (its logits are uniform)."""

    def policy(lane) -> None:
        action = choose(lane.observe()[0], int(lane.last_action()[0]))
        lane.act(np.array([action]), np.zeros((1, lane.A), np.float32), 0)

    return policy
