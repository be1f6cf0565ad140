"""What an update reports: the figures of its optimizer steps, summed as they are taken (`Tally`)
into one `UpdateStats`. Free of IO; shapes as in learner/update.py (T steps, N sequences)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from learner.losses import group_moments, group_sums


class Losses(NamedTuple):
    """One optimizer step's losses and the figures taken on its way (T steps, N sequences)."""

    total: torch.Tensor  # [] with gradient
    pg: torch.Tensor  # [] detached from here on
    baseline: torch.Tensor
    entropy: torch.Tensor
    clip_fraction: torch.Tensor
    priorities: torch.Tensor  # [N]
    advantages: torch.Tensor  # [T, N] the surrogate's advantages before normalisation, detached
    entropies: torch.Tensor  # [T, N] the policy's entropy at each step, detached


class UpdateStats(NamedTuple):
    """Detached 0-dim tensors (read with .item() off the hot path) and per-sequence priorities;
    losses, entropy and clip fraction are means over the update's optimizer steps."""

    total_loss: torch.Tensor
    pg_loss: torch.Tensor
    baseline_loss: torch.Tensor
    entropy: torch.Tensor
    grad_norm: torch.Tensor  # the last step's, before clipping
    priorities: torch.Tensor  # [N] mean |v_s - V(x_s)| per sequence, from the first pass
    clip_fraction: torch.Tensor  # share of steps whose surrogate took the clipped branch
    sgd_steps: int  # optimizer steps taken (epochs x minibatches)
    epochs: int  # passes made over the batch
    level_steps: torch.Tensor  # [MAX_GROUPS] steps of each level index in the batch
    level_advantage_std: torch.Tensor  # [MAX_GROUPS] std of its raw advantages, first pass
    level_entropy: torch.Tensor  # [MAX_GROUPS] the policy's mean entropy on its steps, first pass


# The losses an update reports as means over its optimizer steps, as UpdateStats names them
MEANS = ("total_loss", "pg_loss", "baseline_loss", "entropy", "clip_fraction")


class Tally:
    """What an update reports, summed over its optimizer steps (`add`) into its UpdateStats
    (`stats`): the losses' means, the last step's gradient norm and, from the first pass (the
    network as it was before the update), the priorities and each level's figures."""

    def __init__(self, num_sequences: int, device: torch.device):
        self.sums = torch.zeros(len(MEANS), device=device)  # [5] in MEANS' order
        self.steps = 0
        self.grad_norm = torch.zeros((), device=device)
        self.priorities = torch.zeros(num_sequences, device=device)  # [N]
        self.advantage_sums: torch.Tensor | None = None  # per level index (group_sums)
        self.entropy_sums: torch.Tensor | None = None

    def add(
        self,
        losses: Losses,
        grad_norm: torch.Tensor,
        level: torch.Tensor,
        index: torch.Tensor | None,
        first_pass: bool,
    ) -> None:
        """One optimizer step's `losses` on the sequences `index` (None: all), whose steps' level
        indices are `level` [T, n], and its gradient norm before clipping."""
        step = {"total_loss": losses.total.detach(), "pg_loss": losses.pg}
        step |= {"baseline_loss": losses.baseline, "entropy": losses.entropy}
        step |= {"clip_fraction": losses.clip_fraction}
        self.sums += torch.stack([step[name] for name in MEANS])
        self.steps += 1
        self.grad_norm = grad_norm.detach()
        if not first_pass:
            return
        if index is None:
            self.priorities = losses.priorities
        else:
            self.priorities[index] = losses.priorities
        self.advantage_sums = group_sums(losses.advantages, level, self.advantage_sums)
        self.entropy_sums = group_sums(losses.entropies, level, self.entropy_sums)

    def stats(self, passes: int) -> UpdateStats:
        means = dict(zip(MEANS, (self.sums / self.steps).unbind(), strict=True))
        advantages = group_moments(self.advantage_sums)
        return UpdateStats(
            **means, grad_norm=self.grad_norm, priorities=self.priorities, sgd_steps=self.steps,
            epochs=passes, level_steps=advantages.count, level_advantage_std=advantages.std,
            level_entropy=group_moments(self.entropy_sums).mean,
        )  # fmt: skip
