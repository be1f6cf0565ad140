"""Policy-loss math for sample reuse: the clipped surrogate and advantage normalisation; and
moments per group (a run's levels), which the update reports.

Pure functions of tensors; shapes are time-major `[T, B]` (any shape works elementwise).

Reusing a batch for several passes (epochs of minibatches) moves the learner's policy pi away
from the behaviour policy mu that chose the actions. The clipped surrogate of PPO (Schulman et al.
2017, "Proximal Policy Optimization Algorithms", Eq. 7) bounds how far one batch can push it; APPO
(Petrenko et al. 2020, "Sample Factory", Sec. 3.2 and App. B) uses it with V-trace advantages and
the ratio pi/mu to the actor's own policy, which is what `clipped_surrogate` takes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class SurrogateReturns(NamedTuple):
    loss: Tensor  # same shape as the inputs: -min(r A, clip(r) A), with gradient through r
    clipped: Tensor  # same shape, bool: the clipped branch was the smaller one (no gradient)


def clipped_surrogate(log_ratio: Tensor, advantages: Tensor, clip: float) -> SurrogateReturns:
    """PPO's clipped surrogate loss per step (Schulman et al. 2017, Eq. 7), negated for descent.

        L_t = -min(r_t A_t, clip(r_t, 1 / (1 + eps), 1 + eps) A_t),   r_t = pi(a_t|x_t) / mu(a_t|x_t)

    The lower bound 1 / (1 + eps) rather than 1 - eps makes the trust region symmetric in log
    space, as Sample Factory's APPO does.

    Args:
        log_ratio: [T, B] log pi(a_t|x_t) - log mu(a_t|x_t); gradient flows through it.
        advantages: [T, B] A_t, treated as constants (detached here).
        clip: eps > 0.
    Returns:
        SurrogateReturns; average `loss` over the valid steps yourself.
    """
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if log_ratio.shape != advantages.shape:
        raise ValueError(
            f"log_ratio {list(log_ratio.shape)} and advantages {list(advantages.shape)} "
            "must have the same shape"
        )
    adv = advantages.detach()
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 / (1.0 + clip), 1.0 + clip) * adv
    loss = -torch.minimum(unclipped, clipped)
    return SurrogateReturns(loss, (clipped < unclipped).detach())


MAX_GROUPS = 256  # group indices are a chunk's uint8 `level`


class GroupMoments(NamedTuple):
    count: Tensor  # [MAX_GROUPS] elements per group
    mean: Tensor  # [MAX_GROUPS] 0 where a group is empty
    std: Tensor  # [MAX_GROUPS] population std, 0 where a group is empty


def group_sums(values: Tensor, groups: Tensor, into: Tensor | None = None) -> Tensor:
    """[3, MAX_GROUPS] float64: the count, sum and sum of squares of `values` [T, B] within each
    group (`groups` [T, B] in [0, MAX_GROUPS)), added to `into` (earlier sums) when given."""
    v = values.detach().reshape(-1).double()
    terms = torch.stack([torch.ones_like(v), v, v * v])  # [3, T*B]
    if into is None:
        into = torch.zeros(3, MAX_GROUPS, dtype=v.dtype, device=v.device)
    return into.index_add(1, groups.reshape(-1).long(), terms)


def group_moments(sums: Tensor) -> GroupMoments:
    """Count, mean and population std per group from `group_sums`, as float32."""
    count, total, squares = sums
    n = count.clamp(min=1.0)
    mean = total / n
    std = (squares / n - mean**2).clamp(min=0.0).sqrt()
    return GroupMoments(count.float(), mean.float(), std.float())


def normalize_advantages(advantages: Tensor, eps: float = 1e-8) -> Tensor:
    """(A - mean A) / (std A + eps) over every element of `advantages` [T, B] -> [T, B] detached (a
    lone element becomes 0): the policy step's scale no longer depends on the reward's."""
    adv = advantages.detach()
    if adv.numel() < 2:
        return torch.zeros_like(adv)
    return (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
