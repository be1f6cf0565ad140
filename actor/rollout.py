"""Rollout collection, free of sockets: lanes of envs that fill fixed-length chunks.

An actor's envs are split into lanes (two by default). While one lane's envs step in a worker
thread (nes-py releases the GIL while emulating), the main thread runs the policy for the other
lane, so inference hides behind emulation. Each lane fills its own chunk buffers (common/chunk.py);
the frames buffer doubles as the frame ring: the stack for step t is frames[t : t+4] with their
`first` flags (`common.stacking`). With a recurrent core a lane also keeps each env's core state
[K, C], zeroed where an episode starts; a chunk records the state its step 0 started from
(`core_state`). Evaluation (actor/evaluation.py) steps through these same lanes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from common import chunk
from common.env import EpisodeSummary, FrameEnv
from common.stacking import STACK, stack_newest

HISTORY = STACK - 1  # frames before step 0 that the first stacks need


class FinishedChunk(NamedTuple):
    """One finished chunk of a lane: T steps of K envs."""

    arrays: dict[str, np.ndarray]  # laid out as common/chunk.py declares
    episodes: list[EpisodeSummary]
    policy_version: int  # oldest policy that acted in the chunk


class Lane:
    """K envs stepped together; `observe` → policy → `act` → `step`, T times per chunk."""

    def __init__(
        self,
        envs: list[FrameEnv],
        unroll_length: int,
        num_actions: int,
        layout: chunk.Layout = chunk.LAYOUT,
        state_size: int = 0,
    ):
        if not envs:
            raise ValueError("a lane needs at least one env")
        self.envs = envs
        self.T = unroll_length
        self.K = len(envs)
        self.A = num_actions
        self.layout = layout
        H, W = envs[0].frame_shape
        self.sizes = {
            "T": unroll_length, "K": len(envs), "H": H, "W": W, "A": num_actions, "C": state_size
        }  # fmt: skip
        self.t = 0
        self.finished: list[FinishedChunk] = []
        self._policy_version: int | None = None
        self._last = np.full(self.K, self.A, np.uint8)  # [K] previous action, A = none
        self._state = np.zeros((self.K, state_size), np.float32)  # [K, C] core state, 0 = reset
        self._new_buffers()
        self._obs = np.empty((self.K, STACK, H, W), np.uint8)
        for k, env in enumerate(envs):
            self.arrays["frames"][HISTORY, k] = env.reset()
            self.arrays["first"][HISTORY, k] = True

    def _new_buffers(self, carry: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.arrays = chunk.new_arrays(self.sizes, self.layout)
        if carry is not None:  # the last 4 frames become the next chunk's history + first obs
            self.arrays["frames"][: HISTORY + 1], self.arrays["first"][: HISTORY + 1] = carry
        self.arrays["last_actions"][:] = self._last  # [K]
        self.arrays["core_state"][:] = self._state  # [K, C]
        self.episodes: list[EpisodeSummary] = []

    def observe(self) -> torch.Tensor:
        """Stacked observations for the current step: [K, 4, H, W] uint8, a view of a buffer
        that the next call overwrites (`common.stacking.stack_frames` semantics)."""
        window = slice(self.t, self.t + STACK)
        stack_newest(self.arrays["frames"][window], self.arrays["first"][window], out=self._obs)
        return torch.from_numpy(self._obs)

    def last_action(self) -> torch.Tensor:
        """The policy's previous-action input for the current step: [K] int64, A = none."""
        return torch.from_numpy(self._last.astype(np.int64))

    def core_state(self) -> torch.Tensor:
        """The core's state for the current step: [K, C] float32 (zeros where it starts an
        episode), a view that `act` overwrites."""
        return torch.from_numpy(self._state)

    def act(
        self,
        actions: np.ndarray,
        logits: np.ndarray,
        policy_version: int,
        state: np.ndarray | None = None,
    ) -> None:
        """Record the behaviour policy's choice for the current step, and the core's state
        [K, C] after it (None: no core)."""
        self.arrays["actions"][self.t] = actions  # action[t] follows frames[3+t]
        self.arrays["behaviour_logits"][self.t] = logits
        if state is not None:
            self._state[:] = state
        if self._policy_version is None:
            self._policy_version = policy_version

    def step(self) -> int:
        """Step every env once with the recorded actions; returns agent steps taken (K).

        Runs in a worker thread: touches only this lane's envs and buffers.
        """
        t, a = self.t, self.arrays
        for k, env in enumerate(self.envs):
            a["level"][t, k] = env.level_index  # the level step t plays, before a reset moves it
            s = env.step(int(a["actions"][t, k]))
            a["rewards"][t, k] = s.reward
            a["terminated"][t, k] = s.terminated
            a["truncated"][t, k] = s.truncated
            nxt = HISTORY + t + 1  # frames[3+t+1] is the observation after action t
            if s.episode is not None:
                self.episodes.append(s.episode)
                if s.truncated:  # bootstrap needs the real next frame, not the reset frame
                    a["final_frames"][k], a["final_t"][k] = s.frame, t
                a["frames"][nxt, k] = env.reset()
                a["first"][nxt, k] = True
                self._last[k] = self.A
                self._state[k] = 0.0
            else:
                a["frames"][nxt, k] = s.frame
                self._last[k] = a["actions"][t, k]
        self.t += 1
        if self.t == self.T:
            self._finish()
        return self.K

    def _finish(self) -> None:
        version = self._policy_version if self._policy_version is not None else 0
        self.finished.append(FinishedChunk(self.arrays, self.episodes, version))
        carry = (self.arrays["frames"][self.T :].copy(), self.arrays["first"][self.T :].copy())
        self._new_buffers(carry)
        self.t = 0
        self._policy_version = None

    def take_finished(self) -> list[FinishedChunk]:
        out, self.finished = self.finished, []
        return out


def split_lanes(
    envs: list[FrameEnv], lanes: int, unroll_length: int, num_actions: int, state_size: int = 0
) -> list[Lane]:
    """Split envs into `lanes` near-equal lanes (fewer if there are fewer envs)."""
    lanes = max(1, min(lanes, len(envs)))
    groups = [envs[i::lanes] for i in range(lanes)]
    return [Lane(g, unroll_length, num_actions, state_size=state_size) for g in groups]


def infer_and_act(
    model: torch.nn.Module,
    lane: Lane,
    rng: np.random.Generator,
    policy_version: int,
    *,
    greedy: bool = False,
    device: torch.device | None = None,
) -> None:
    """The policy's turn for one lane: its stacks, previous actions and core states through the
    model (on `device`, else where its inputs are: the CPU), actions sampled from the logits, or
    their argmax when `greedy`, and exactly those logits recorded with them (and the core's new
    state). The training actor samples; the eval actor and `make eval` take both turns."""
    inputs = (lane.observe(), lane.last_action(), lane.core_state())
    if device is not None:
        inputs = tuple(x.to(device) for x in inputs)
    with torch.inference_mode():
        out = model(*inputs)
    logits = out.logits.float().cpu().numpy()  # [K, A]
    state = out.state.float().cpu().numpy() if out.state.shape[1] else None  # [K, C]
    actions = logits.argmax(axis=-1) if greedy else sample_from_logits(logits, rng)
    lane.act(actions, logits, policy_version, state)


def sample_from_logits(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Actions [B] int64 drawn from softmax(logits [B, A]) by the Gumbel-max trick: one numpy
    draw and an argmax, far fewer calls than softmax + multinomial on the actor's hot path."""
    return np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1)
