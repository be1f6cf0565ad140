"""The learner's update, free of IO: a time-major batch in, `epochs` x `minibatches` optimizer
steps out (APPO: V-trace targets and a clipped surrogate; one step when both are 1).

Shapes are time-major: T = unroll length, N = sequences in the batch (chunks x envs), H x W the
frame size, A the number of actions. The batch holds the arrays of common/chunk.py, each env a
sequence (learner/batching.py), each frame once; learner/inputs.py builds what the network sees.

The recipe (`Learner.step`): bootstrap and V-trace once per batch, with the network as it was
before the update, and hold those targets and advantages through its passes (as Sample
Factory's APPO holds its GAE targets); then at each optimizer step, the current network on the
T stacks that acted gives the ratios pi/mu, and the three losses (policy, value, entropy) are
taken, backed up, clipped and stepped. Values are PopArt-normalised (learner/popart.py): V(x) in
reward units is sigma n(x) + mu. A recurrent core is unrolled from the chunk's `core_state` over
all T+1 stacks (common/model.py). With `precision` "bf16" the network runs under bfloat16
autocast; V-trace, the advantages and the losses stay float32.

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
from learner.batching import Batch, select
from learner.config import LearnerConfig
from learner.inputs import final_previous_actions, final_stacks, heads_input, previous_actions
from learner.losses import clipped_surrogate, normalize_advantages
from learner.popart import PopArt
from learner.tally import Losses, Tally, UpdateStats


class Hyper(NamedTuple):
    """The update's settings: each is the LearnerConfig field of the same name (`from_config`),
    with no default here, so that no Hyper can train with settings other than the config's.
    V-trace's truncation levels rho-bar and c-bar are IMPALA's 1 (learner/vtrace.py)."""

    discount: float
    loss_reward_scale: float
    loss_reward_clip: float  # 0 = off
    baseline_cost: float
    entropy_cost: float
    max_grad_norm: float
    vtrace_lambda: float  # 1 = IMPALA's V-trace; < 1 shortens the traces (GAE(lambda) on policy)
    epochs: int  # passes over each batch
    minibatches: int  # optimizer steps per pass, each on a disjoint set of whole sequences
    ppo_clip: float  # > 0: PPO's clipped surrogate on pi/mu (APPO); 0: IMPALA's gradient
    normalize_advantages: bool  # per minibatch, zero mean and unit variance
    precision: str  # "fp32", or "bf16": the network under bfloat16 autocast

    @classmethod
    def from_config(cls, cfg: LearnerConfig) -> Hyper:
        """The fields of `cfg` that the update reads, by name."""
        return cls(**{name: getattr(cfg, name) for name in cls._fields})


def shape_rewards(rewards: torch.Tensor, hyper: Hyper) -> torch.Tensor:
    r = rewards * hyper.loss_reward_scale
    if hyper.loss_reward_clip > 0:
        r = r.clamp(-hyper.loss_reward_clip, hyper.loss_reward_clip)
    return r


class Outputs(NamedTuple):
    """The network's outputs over a batch: S = T+1 stacks per sequence, or the T acting ones
    where nothing bootstraps (`network_outputs(..., bootstrap=False)`)."""

    logits: torch.Tensor  # [S, N, A] target policy, with gradient, float32
    values: torch.Tensor  # [S, N] V(x) in reward units (PopArt's denormalised), detached
    features: torch.Tensor  # [T*N, F] the heads' input at the first T stacks, with gradient
    final_values: torch.Tensor | None  # [N] V of each sequence's final stack, detached


def network_outputs(
    model: ActorCritic, batch: Batch, hyper: Hyper, popart: PopArt, bootstrap: bool = True
) -> Outputs:
    """The network over all T+1 stacks of every sequence, plus each sequence's final stack;
    without `bootstrap`, over the T stacks that acted only (what an optimizer step needs: the
    ratios pi/mu and the value loss)."""
    T, N = batch.unroll_length, batch.num_sequences
    S = T + 1 if bootstrap else T
    stacks = stack_frames(batch.frames, batch.first)[:S]  # [S, N, 4, H, W]
    prev = previous_actions(batch, model.spec.num_actions)[:S]  # [S, N]
    obs, last = stacks.flatten(0, 1), prev.flatten()  # [S*N, 4, H, W], [S*N]
    if bootstrap:  # then the final stacks: [S*N + N, ...]
        obs = torch.cat([obs, final_stacks(batch)], dim=0)
        last = torch.cat([last, final_previous_actions(batch)])
    bf16 = hyper.precision == "bf16"
    with torch.autocast(obs.device.type, dtype=torch.bfloat16, enabled=bf16):
        h = heads_input(model, batch, model.features(obs, last), S)  # [S*N (+ N), F']
        logits = model.policy(h[: S * N]).view(S, N, -1).float()  # [S, N, A]
        with torch.no_grad():  # the head predicts sigma-normalised values; V(x) in reward units
            raw = popart.denormalize(model.value(h).squeeze(-1).float())  # [S*N (+ N)]
    h = h.float()
    values = raw[: S * N].view(S, N)  # [S, N]
    final_values = raw[S * N :] if bootstrap else None  # [N]
    return Outputs(logits, values, h[: T * N], final_values)


def vtrace_targets(
    out: Outputs, batch: Batch, hyper: Hyper
) -> tuple[vtrace.VTraceFromLogitsReturns, torch.Tensor]:
    """V-trace's targets under the network's outputs `out` (over all T+1 stacks), and the
    surrogate's advantages r_s + gamma_s v_{s+1} - V(x_s) [T, N] (without the rho_s factor)."""
    T = batch.unroll_length
    values = out.values  # [T+1, N]
    # ---- bootstrap: discounts end at any episode end; truncation bootstraps via the reward ---
    discount = hyper.discount
    ended = batch.terminated | batch.truncated  # [T, N]
    discounts = (~ended).float() * discount  # [T, N]
    steps = torch.arange(T, device=values.device)[:, None]  # [T, 1]
    # The value of the real next frame after truncated step t (the sequence's final frame);
    # V(x_t) stands in should an env ever be cut twice in one chunk.
    next_value = torch.where(
        steps == batch.final_t[None, :], out.final_values[None, :], values[:T]
    )  # [T, N]
    rewards = shape_rewards(batch.rewards, hyper)  # [T, N]
    rewards = rewards + discount * batch.truncated.float() * next_value  # r_t + g V(x_final)

    # ---- V-trace (Espeholt et al. 2018, Sec. 4.1) -----------------------------------------------
    vt = vtrace.from_logits(
        behaviour_policy_logits=batch.behaviour_logits,  # [T, N, A]
        target_policy_logits=out.logits[:T],  # [T, N, A]
        actions=batch.actions,  # [T, N]
        discounts=discounts,
        rewards=rewards,
        values=values[:T],
        bootstrap_value=values[T],  # [N]
        lambda_=hyper.vtrace_lambda,
    )
    # The advantage of the surrogate, whose ratio pi/mu already weights it: Sec. 4.2's
    # q_s - V(x_s) without the rho_s factor. vs[s+1] follows step s; V(x_T) after the last.
    vs_next = torch.cat([vt.vs[1:], values[T][None]])  # [T, N]
    advantages = rewards + discounts * vs_next - values[:T]  # [T, N]
    return vt, advantages


class Forward(NamedTuple):
    """The network's outputs and the targets they give (`forward_and_targets`)."""

    logits: torch.Tensor  # [T+1, N, A]
    values: torch.Tensor  # [T+1, N] reward units, detached
    features: torch.Tensor  # [T*N, F]
    final_values: torch.Tensor  # [N]
    vtrace: vtrace.VTraceFromLogitsReturns  # targets [T, N], detached
    advantages: torch.Tensor  # [T, N] r_s + gamma_s v_{s+1} - V(x_s), detached (no rho)


def forward_and_targets(model: ActorCritic, batch: Batch, hyper: Hyper, popart: PopArt) -> Forward:
    out = network_outputs(model, batch, hyper, popart)
    return Forward(*out, *vtrace_targets(out, batch, hyper))


class Targets(NamedTuple):
    """What an update holds fixed through its passes: the value targets and advantages of the
    network before them, and the behaviour policy's log-probabilities."""

    vs: torch.Tensor  # [T, N] V-trace targets, reward units, detached
    advantages: torch.Tensor  # [T, N] r_s + gamma_s v_{s+1} - V(x_s), detached (no rho)
    behaviour_log_probs: torch.Tensor  # [T, N] log mu(a_s|x_s) of the actions taken

    def select(self, index: torch.Tensor | None) -> Targets:
        """The targets of sequences `index` [n] (all of them for None)."""
        if index is None:
            return self
        return Targets(*(t[:, index] for t in self))


def batch_targets(model: ActorCritic, batch: Batch, hyper: Hyper, popart: PopArt) -> Targets:
    """The targets of the whole batch under the network as it is now, without gradient."""
    with torch.no_grad():
        fwd = forward_and_targets(model, batch, hyper, popart)
    vt = fwd.vtrace
    return Targets(vt.vs, fwd.advantages, vt.behaviour_action_log_probs)


def loss_and_stats(
    model: ActorCritic, batch: Batch, hyper: Hyper, popart: PopArt, targets: Targets
) -> Losses:
    """The three losses of one (mini)batch against the held `targets`: the policy's (on the
    current network's ratios pi/mu), the value's (in PopArt's normalised units; PopArt's
    statistics move and the value head is rescaled to keep its outputs) and the entropy bonus."""
    T, N = batch.unroll_length, batch.num_sequences
    # ---- unpack: the current network on the T stacks that acted -----------------------------
    out = network_outputs(model, batch, hyper, popart, bootstrap=False)
    log_pi = vtrace.action_log_probs(out.logits, batch.actions)  # [T, N] log pi(a_s|x_s)
    log_rhos = log_pi - targets.behaviour_log_probs  # [T, N] log pi/mu
    advantages = targets.advantages  # [T, N]
    w = batch.weights[None, :]  # [1, N] replay's importance weights (1 for fresh sequences)

    # ---- policy: APPO's clipped surrogate on pi/mu, or IMPALA's rho-weighted gradient --------
    clip_fraction = torch.zeros((), device=w.device)
    if hyper.ppo_clip > 0:
        adv = normalize_advantages(advantages) if hyper.normalize_advantages else advantages
        surrogate = clipped_surrogate(log_rhos, adv, hyper.ppo_clip)  # [T, N]
        pg_loss = (surrogate.loss * w).mean()
        clip_fraction = surrogate.clipped.float().mean()
    else:  # Sec. 4.2: min(rho-bar, pi/mu) weights the advantage
        adv = vtrace.weighted_advantages(log_rhos, advantages)  # [T, N]
        if hyper.normalize_advantages:
            adv = normalize_advantages(adv)
        pg_loss = -(log_pi * adv * w).mean()

    # ---- value: regress the head on PopArt-normalised targets v_s -----------------------------
    popart.update(targets.vs)  # new statistics; the head rescaled so that V(x) is unchanged
    predicted = model.value(out.features).squeeze(-1).view(T, N)  # [T, N] normalised
    baseline_loss = 0.5 * ((popart.normalize(targets.vs) - predicted) ** 2 * w).mean()

    # ---- entropy bonus --------------------------------------------------------------------------
    log_probs = F.log_softmax(out.logits, dim=-1)  # [T, N, A]
    entropies = -(log_probs.exp() * log_probs).sum(-1)  # [T, N]
    entropy = entropies.mean()
    total = pg_loss + hyper.baseline_cost * baseline_loss - hyper.entropy_cost * entropy

    # ---- plumbing: replay's priorities ---------------------------------------------------------
    # a sequence's mean |v_s - V(x_s)|: what the value has not learned yet (PER's |TD error|)
    priorities = (targets.vs - out.values).abs().mean(dim=0)  # [N]
    return Losses(
        total, pg_loss.detach(), baseline_loss.detach(), entropy.detach(), clip_fraction,
        priorities, advantages, entropies.detach(),
    )  # fmt: skip


def minibatch_indices(
    num_sequences: int, minibatches: int, generator: torch.Generator | None, device
) -> list[torch.Tensor]:
    """A random split of the sequences into `minibatches` near-equal parts (fewer if N is small)."""
    parts = max(1, min(minibatches, num_sequences))
    order = torch.randperm(num_sequences, generator=generator).to(device)
    return list(order.tensor_split(parts))


class Learner:
    """Owns model, optimizer and PopArt; `step(batch)` is one synchronous, IO-free update:
    `epochs` passes over the batch, each split into `minibatches` optimizer steps. The policy
    version counts updates (batches), not optimizer steps."""

    def __init__(
        self, model: ActorCritic, optimizer: torch.optim.Optimizer, hyper: Hyper, seed: int = 0
    ):
        if hyper.epochs < 1 or hyper.minibatches < 1:
            raise ValueError(
                f"epochs and minibatches must be >= 1, got {hyper.epochs}, {hyper.minibatches}"
            )
        self.model = model
        self.optimizer = optimizer
        self.hyper = hyper
        self.popart = PopArt(model.value, device=model.value.weight.device)
        self.updates = 0
        self.sgd_steps = 0
        self._generator = torch.Generator().manual_seed(seed)  # minibatch splits, on the host

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set_learning_rate(self, lr: float) -> None:
        """The rate of the next optimizer steps (learner/lr_schedule.py decides it)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def observe_fresh(self, batch: Batch) -> None:
        """Fold a batch of fresh (not replayed) sequences into the input normalisation: each of
        its frames once, frames[3 : T+3] (the first three repeat the previous chunk's, the last
        is the next chunk's first)."""
        self.model.observe_frames(batch.frames[STACK - 1 : -1])  # [T, N, H, W]

    def step(self, batch: Batch, epochs: int | None = None) -> UpdateStats:
        """One update: `epochs` passes (default: the hyperparameters') of `minibatches` steps."""
        passes = self.hyper.epochs if epochs is None else epochs
        if passes < 1:
            raise ValueError(f"epochs must be >= 1, got {passes}")
        self.model.train()
        tally = Tally(batch.num_sequences, batch.actions.device)
        # ---- bootstrap and V-trace, once: the targets of the network before the update ------
        targets = batch_targets(self.model, batch, self.hyper, self.popart)
        for epoch in range(passes):
            for index in self._minibatches(batch):
                sub = batch if index is None else select(batch, index)
                # ---- the three losses, backward, clip, step ---------------------------------
                losses = loss_and_stats(
                    self.model, sub, self.hyper, self.popart, targets.select(index)
                )
                self.optimizer.zero_grad(set_to_none=True)
                losses.total.backward()
                grad_norm = nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.hyper.max_grad_norm
                )
                self.optimizer.step()
                # ---- plumbing: what the update reports ------------------------------------
                tally.add(losses, grad_norm, sub.level, index, first_pass=epoch == 0)
        self.updates += 1
        self.sgd_steps += tally.steps
        return tally.stats(passes)

    def _minibatches(self, batch: Batch) -> list[torch.Tensor | None]:
        """One pass's minibatches: sequence indices, or [None] for the whole batch."""
        if self.hyper.minibatches == 1:
            return [None]
        device = batch.actions.device
        return minibatch_indices(
            batch.num_sequences, self.hyper.minibatches, self._generator, device
        )
