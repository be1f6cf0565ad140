"""The learner's update, free of IO: a time-major batch in, one optimizer step out.

Shapes are time-major: T = unroll length, N = sequences in the batch (chunks x envs), H x W the
frame size, A the number of actions. The batch holds each frame once; stacks are rebuilt here, on
the learner's device, with the same function the actor used (common.stacking).

Truncation is not termination. A step cut by the no-progress cutoff keeps a discount of zero
inside V-trace (nothing after it belongs to the same trajectory) but its reward is bootstrapped,
r_t + gamma V(x_final), from the value of the real next frame that the chunk carries.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from common.model import ActorCritic
from common.stacking import STACK, stack_frames
from learner import vtrace


class Batch(NamedTuple):
    frames: torch.Tensor  # [T+4, N, H, W] uint8; frames[3+t] seen at step t
    first: torch.Tensor  # [T+4, N] bool
    actions: torch.Tensor  # [T, N] int64
    rewards: torch.Tensor  # [T, N] float32, as the env gave them
    terminated: torch.Tensor  # [T, N] bool
    truncated: torch.Tensor  # [T, N] bool
    behaviour_logits: torch.Tensor  # [T, N, A] float32
    final_frames: torch.Tensor  # [N, H, W] uint8: next frame of the sequence's truncated step
    final_t: torch.Tensor  # [N] int64: that step, or -1 when none
    last_actions: torch.Tensor  # [N] int64: action before step 0, A = none (episode start)
    weights: torch.Tensor  # [N] float32 importance weights (1 for fresh data)

    @property
    def unroll_length(self) -> int:
        return self.actions.shape[0]

    @property
    def num_sequences(self) -> int:
        return self.actions.shape[1]


class Hyper(NamedTuple):
    discount: float = 0.99
    reward_scale: float = 0.1
    reward_clip: float = 1.0  # 0 = off
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    max_grad_norm: float = 40.0
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0


class UpdateStats(NamedTuple):
    """Detached 0-dim tensors (read with .item() off the hot path) and per-sequence priorities."""

    total_loss: torch.Tensor
    pg_loss: torch.Tensor
    baseline_loss: torch.Tensor
    entropy: torch.Tensor
    grad_norm: torch.Tensor
    priorities: torch.Tensor  # [N] mean |v_s - V(x_s)| per sequence


def final_stacks(batch: Batch) -> torch.Tensor:
    """Stacks ending in each sequence's final frame: [N, 4, H, W] (junk where final_t == -1).

    The stack of the real next observation after truncated step t is frames[3+t-2 .. 3+t] plus
    the final frame, i.e. frames[t+1 : t+4] then final_frames.
    """
    n = batch.num_sequences
    t = batch.final_t.clamp(min=0)  # [N]
    rows = t[None, :] + torch.arange(1, STACK, device=t.device)[:, None]  # [3, N]
    cols = torch.arange(n, device=t.device)[None, :].expand_as(rows)  # [3, N]
    frames = torch.cat([batch.frames[rows, cols], batch.final_frames[None]], dim=0)  # [4, N, H, W]
    no_start = torch.zeros_like(batch.first[:1])  # [1, N]: the final frame starts nothing
    first = torch.cat([batch.first[rows, cols], no_start], dim=0)  # [4, N]
    return stack_frames(frames, first)[0]  # [N, 4, H, W]


def previous_actions(batch: Batch, num_actions: int) -> torch.Tensor:
    """The policy's previous-action input at each of the T+1 stacks: [T+1, N] int64.

    Step t's is actions[t-1] (last_actions for t = 0), or A = none where frames[3+t] starts an
    episode; the actor's `Lane.last_action` is the step-by-step reference.
    """
    prev = torch.cat([batch.last_actions[None], batch.actions], dim=0)  # [T+1, N]
    none = torch.full_like(prev, num_actions)
    return torch.where(batch.first[STACK - 1 :], none, prev)


def final_previous_actions(batch: Batch) -> torch.Tensor:
    """Previous-action input of each sequence's final stack: the truncated step's action, [N]."""
    t = batch.final_t.clamp(min=0)  # [N]
    return batch.actions.gather(0, t[None]).squeeze(0)


def shape_rewards(rewards: torch.Tensor, hyper: Hyper) -> torch.Tensor:
    r = rewards * hyper.reward_scale
    if hyper.reward_clip > 0:
        r = r.clamp(-hyper.reward_clip, hyper.reward_clip)
    return r


class Forward(NamedTuple):
    logits: torch.Tensor  # [T+1, N, A] target policy, with gradient
    values: torch.Tensor  # [T+1, N] with gradient
    final_values: torch.Tensor  # [N] detached
    vtrace: vtrace.VTraceFromLogitsReturns  # targets [T, N], detached


def forward_and_targets(model: ActorCritic, batch: Batch, hyper: Hyper) -> Forward:
    T, N = batch.unroll_length, batch.num_sequences
    # ---- forward: all T+1 stacks of every sequence, plus each sequence's final stack ----------
    stacks = stack_frames(batch.frames, batch.first)  # [T+1, N, 4, H, W]
    obs = torch.cat([stacks.flatten(0, 1), final_stacks(batch)], dim=0)  # [(T+1)*N + N, 4, H, W]
    prev = previous_actions(batch, model.spec.num_actions)  # [T+1, N]
    last = torch.cat([prev.flatten(), final_previous_actions(batch)])  # [(T+1)*N + N]
    out = model(obs, last)
    logits = out.logits[: (T + 1) * N].view(T + 1, N, -1)  # [T+1, N, A]
    values = out.value[: (T + 1) * N].view(T + 1, N)  # [T+1, N]
    final_values = out.value[(T + 1) * N :].detach()  # [N]

    # ---- bootstrap: discounts end at any episode end; truncation bootstraps via the reward ---
    discount = hyper.discount
    ended = batch.terminated | batch.truncated  # [T, N]
    discounts = (~ended).float() * discount  # [T, N]
    steps = torch.arange(T, device=values.device)[:, None]  # [T, 1]
    # The value of the real next frame after truncated step t (the sequence's final frame);
    # V(x_t) stands in should an env ever be cut twice in one chunk.
    next_value = torch.where(
        steps == batch.final_t[None, :], final_values[None, :], values[:T].detach()
    )  # [T, N]
    rewards = shape_rewards(batch.rewards, hyper)  # [T, N]
    rewards = rewards + discount * batch.truncated.float() * next_value  # r_t + g V(x_final)

    # ---- V-trace (Espeholt et al. 2018, Sec. 4.1) -----------------------------------------------
    vt = vtrace.from_logits(
        behaviour_policy_logits=batch.behaviour_logits,  # [T, N, A]
        target_policy_logits=logits[:T],  # [T, N, A]
        actions=batch.actions,  # [T, N]
        discounts=discounts,
        rewards=rewards,
        values=values[:T].detach(),
        bootstrap_value=values[T].detach(),  # [N]
        clip_rho_threshold=hyper.clip_rho_threshold,
        clip_pg_rho_threshold=hyper.clip_pg_rho_threshold,
    )
    return Forward(logits, values, final_values, vt)


def loss_and_stats(model: ActorCritic, batch: Batch, hyper: Hyper):
    T = batch.unroll_length
    fwd = forward_and_targets(model, batch, hyper)
    vt, values = fwd.vtrace, fwd.values
    # ---- the three losses, weighted per sequence (replay importance weights) -----------------
    w = batch.weights[None, :]  # [1, N]
    pg_loss = -(vt.target_action_log_probs * vt.pg_advantages * w).mean()
    baseline_loss = 0.5 * ((vt.vs - values[:T]) ** 2 * w).mean()
    log_probs = F.log_softmax(fwd.logits[:T], dim=-1)  # [T, N, A]
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    total = pg_loss + hyper.baseline_cost * baseline_loss - hyper.entropy_cost * entropy
    # Priority of a sequence: its mean absolute V-trace error |v_s - V(x_s)|, the part of the
    # data the value function has not learned yet (the analogue of PER's |TD error|).
    priorities = (vt.vs - values[:T].detach()).abs().mean(dim=0)  # [N]
    return total, pg_loss, baseline_loss, entropy, priorities


class Learner:
    """Owns model and optimizer; `step(batch)` is one synchronous, IO-free update."""

    def __init__(self, model: ActorCritic, optimizer: torch.optim.Optimizer, hyper: Hyper):
        self.model = model
        self.optimizer = optimizer
        self.hyper = hyper
        self.updates = 0

    def step(self, batch: Batch) -> UpdateStats:
        self.model.train()
        total, pg, baseline, entropy, priorities = loss_and_stats(self.model, batch, self.hyper)
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.hyper.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        return UpdateStats(
            total.detach(),
            pg.detach(),
            baseline.detach(),
            entropy.detach(),
            grad_norm.detach(),
            priorities,
        )
