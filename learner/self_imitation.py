"""Self-imitation learning (Oh et al. 2018, "Self-Imitation Learning", Sec. 3.1, Eq. 1-3): the
policy imitates its own past actions where the return that followed beat the value's estimate,
and the value rises to meet that return; nothing is learned where the return fell short.

    L_sil = E_{s,a,R ~ replay}[ -log pi(a|s) (R - V(s))+  +  beta_sil / 2 ((R - V(s))+)^2 ]

The replay holds whole T-step sequences rather than episodes, so the return of step t is the
sequence's n-step return bootstrapped from the value of its final frame (`returns`):
R_t = r_t + gamma_t R_{t+1}, R_T = V(x_T), with the truncation bootstrap folded into r_t as the
update does for V-trace. That is the n-step lower bound of Tang 2020 ("Self-Imitation Learning
via Generalized Lower Bound Q-learning"); at gamma 0.9 the bootstrap weighs gamma^(T-t), 0.03 at
the first of 32 steps. Replay samples a sequence in proportion to its mean (R - V)+ (Sec. 3.2's
prioritisation, per sequence).

Units: the value head predicts PopArt-normalised values, so the value term regresses on normalised
returns. The policy term weighs -log pi by (R - V)+ in units of `scale` (the update's advantage
std, so that it speaks the same units as the normalised surrogate beside it), clipped at
ADVANTAGE_CLIP, and -log pi is clipped at MAX_NEG_LOG_PI (Oh et al.'s code clips both), so that
neither a rare big return nor an action the policy has all but dropped can swamp the update.

Pure functions of tensors, time-major [T, N].
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

VALUE_COST = 0.01  # beta_sil: the value term's weight in L_sil (Oh et al. 2018, Atari)
ADVANTAGE_CLIP = 1.0  # the policy term's weight (R - V)+ / scale is clipped at this
MAX_NEG_LOG_PI = 5.0  # -log pi(a|s) is clipped at this (the gradient stops beyond it)


def returns(rewards: Tensor, discounts: Tensor, bootstrap: Tensor) -> Tensor:
    """n-step returns within each sequence, R_t = r_t + gamma_t R_{t+1}, R_T = bootstrap.

    Args:
        rewards: [T, N] r_t (the truncation bootstrap already folded in).
        discounts: [T, N] gamma_t: 0 after an episode ended at step t, else gamma.
        bootstrap: [N] V(x_T), the value of each sequence's last frame.
    Returns:
        [T, N] R_t.
    """
    if rewards.shape != discounts.shape or rewards.shape[1:] != bootstrap.shape:
        raise ValueError(
            f"rewards {list(rewards.shape)}, discounts {list(discounts.shape)} and bootstrap "
            f"{list(bootstrap.shape)}: pass [T, N], [T, N] and [N]"
        )
    out = torch.empty_like(rewards)
    acc = bootstrap
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = rewards[t] + discounts[t] * acc
        out[t] = acc
    return out


class SelfImitationLoss(NamedTuple):
    policy: Tensor  # [] -log pi(a|s) weighted by the clipped (R - V)+ / scale, with gradient
    value: Tensor  # [] 1/2 ((R - V)+)^2 in normalised units, with gradient
    total: Tensor  # [] policy + VALUE_COST * value
    positive: Tensor  # [] share of steps whose return beat the value, detached
    priorities: Tensor  # [N] mean (R - V)+ of each sequence, normalised units, detached


def self_imitation_loss(
    log_pi: Tensor, value: Tensor, returns: Tensor, scale: Tensor | float, weights: Tensor
) -> SelfImitationLoss:
    """L_sil of Oh et al. 2018 (Eq. 1-3) over replayed steps.

    Args:
        log_pi: [T, N] log pi(a_t|x_t) of the actions taken, with gradient.
        value: [T, N] the value head's output n(x_t), PopArt-normalised, with gradient.
        returns: [T, N] R_t, normalised as `value` is.
        scale: [] or [T, N] (or a float), > 0: the unit of (R - V)+ in the policy term,
            normalised.
        weights: [N] prioritised replay's importance weights.
    """
    if not (log_pi.shape == value.shape == returns.shape and log_pi.shape[1:] == weights.shape):
        raise ValueError(
            f"log_pi {list(log_pi.shape)}, value {list(value.shape)}, returns "
            f"{list(returns.shape)} and weights {list(weights.shape)}: pass [T, N] x 3 and [N]"
        )
    w = weights[None, :]  # [1, N]
    gap = (returns - value).clamp(min=0)  # [T, N] (R - V)+, with gradient through V
    advantage = (gap.detach() / scale).clamp(max=ADVANTAGE_CLIP)  # [T, N]
    neg_log_pi = (-log_pi).clamp(max=MAX_NEG_LOG_PI)  # [T, N]
    policy = (neg_log_pi * advantage * w).mean()
    value_loss = 0.5 * (gap**2 * w).mean()
    return SelfImitationLoss(
        policy=policy,
        value=value_loss,
        total=policy + VALUE_COST * value_loss,
        positive=(gap.detach() > 0).float().mean(),
        priorities=gap.detach().mean(dim=0),
    )
