"""Policy-loss math for sample reuse: the clipped surrogate and advantage normalisation.

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


def normalize_advantages(advantages: Tensor, eps: float = 1e-8) -> Tensor:
    """(A - mean A) / (std A + eps) over every element: the policy step's scale no longer depends
    on the reward's (as PPO implementations and Sample Factory do per minibatch).

    Args:
        advantages: [T, B]; with a single element the result is 0.
    Returns:
        [T, B], detached.
    """
    adv = advantages.detach()
    if adv.numel() < 2:
        return torch.zeros_like(adv)
    return (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
