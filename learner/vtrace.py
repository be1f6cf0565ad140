"""V-trace off-policy targets and policy-gradient advantages.

Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures": Section 4.1, Eq. (1) (the v-trace target) and Section 4.2
(the policy-gradient advantage rho_s (r_s + gamma v_{s+1} - V(x_s))).

Every tensor is time-major: `[T, B]` for per-step quantities, `[T, B, A]` for logits, `[B]` for
the bootstrap value V(x_T) of the state after the last step of the chunk. The discount gamma_s is
per step, so an episode that ends inside the chunk is expressed as `discounts[s] = 0`.
"""

from typing import NamedTuple

import torch
from torch import Tensor


class VTraceReturns(NamedTuple):
    vs: Tensor  # [T, B] v-trace targets v_s, detached
    pg_advantages: Tensor  # [T, B] rho_s (r_s + gamma_s v_{s+1} - V(x_s)), detached


class VTraceFromLogitsReturns(NamedTuple):
    vs: Tensor  # [T, B] detached
    pg_advantages: Tensor  # [T, B] detached
    log_rhos: Tensor  # [T, B] log pi(a_s|x_s) - log mu(a_s|x_s)
    behaviour_action_log_probs: Tensor  # [T, B] log mu(a_s|x_s)
    target_action_log_probs: Tensor  # [T, B] log pi(a_s|x_s), keeps its gradient


def _check_shape(name: str, tensor: Tensor, expected: tuple[int, ...], what: str) -> None:
    if tuple(tensor.shape) != expected:
        raise ValueError(
            f"{name} must have shape {what} = {list(expected)}, got {list(tensor.shape)}"
        )


def _check_threshold(name: str, threshold: float | None) -> None:
    if threshold is not None and not threshold > 0:
        raise ValueError(f"{name} must be positive or None (no clipping), got {threshold}")


def from_importance_weights(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets (IMPALA Section 4.1, Eq. (1)) and advantages (Section 4.2).

    Computed with the backward recursion
        v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1})),
        delta_s V = rho_s (r_s + gamma_s V(x_{s+1}) - V(x_s)),
    with rho_s = min(clip_rho_threshold, pi/mu), c_s = lambda min(1, pi/mu) and v_T = V(x_T).
    lambda < 1 is the paper's Remark 2 (Sec. 4.1): it shortens the traces as in TD(lambda); on
    policy (pi = mu) v_s - V(x_s) is then GAE(gamma, lambda)'s advantage (Schulman et al. 2016).

    Args:
        log_rhos: [T, B] log pi(a_s|x_s) - log mu(a_s|x_s) of the actions taken.
        discounts: [T, B] gamma_s; 0 where the episode ended at step s.
        rewards: [T, B] r_s.
        values: [T, B] V(x_s) under the current parameters.
        bootstrap_value: [B] V(x_T).
        clip_rho_threshold: rho-bar of the targets; None disables clipping.
        clip_pg_rho_threshold: rho-bar of the policy-gradient advantage; None disables clipping.
        lambda_: lambda in (0, 1]; 1 is the paper's plain V-trace.

    Returns:
        VTraceReturns of [T, B] tensors. No gradient flows through them: they are targets.
    """
    if log_rhos.dim() != 2:
        raise ValueError(f"log_rhos must have shape [T, B], got {list(log_rhos.shape)}")
    time_steps, batch = log_rhos.shape
    _check_shape("discounts", discounts, (time_steps, batch), "[T, B]")
    _check_shape("rewards", rewards, (time_steps, batch), "[T, B]")
    _check_shape("values", values, (time_steps, batch), "[T, B]")
    _check_shape("bootstrap_value", bootstrap_value, (batch,), "[B]")
    _check_threshold("clip_rho_threshold", clip_rho_threshold)
    _check_threshold("clip_pg_rho_threshold", clip_pg_rho_threshold)
    if not 0 < lambda_ <= 1:
        raise ValueError(f"lambda_ must be in (0, 1], got {lambda_}")

    with torch.no_grad():
        rhos = torch.exp(log_rhos)  # [T, B]
        clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
        cs = lambda_ * rhos.clamp(max=1.0)  # [T, B] trace-cutting coefficients c_s
        # V(x_{s+1}): values shifted one step left, V(x_T) appended.
        values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])  # [T, B]
        deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)  # [T, B]

        # Backward over time, vectorised over B; T is small, so a Python loop is cheap.
        vs_minus_v = torch.empty_like(deltas)  # [T, B]
        acc = torch.zeros_like(bootstrap_value)  # [B] v_T - V(x_T) = 0
        for s in reversed(range(time_steps)):
            acc = deltas[s] + discounts[s] * cs[s] * acc
            vs_minus_v[s] = acc
        vs = vs_minus_v + values  # [T, B]

        # v_{s+1}: vs shifted one step left, v_T = V(x_T) appended.
        vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)])  # [T, B]
        advantages = rewards + discounts * vs_t_plus_1 - values  # [T, B]
        pg_advantages = weighted_advantages(log_rhos, advantages, clip_pg_rho_threshold)

    return VTraceReturns(vs=vs.detach(), pg_advantages=pg_advantages)


def weighted_advantages(
    log_rhos: Tensor, advantages: Tensor, clip_pg_rho_threshold: float | None = 1.0
) -> Tensor:
    """Section 4.2's policy-gradient advantage min(rho-bar, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s)),
    [T, B] detached: log_rhos [T, B], advantages [T, B] the bracket, clip_pg_rho_threshold rho-bar
    (None: no clipping)."""
    with torch.no_grad():
        rhos = torch.exp(log_rhos)  # [T, B]
        if clip_pg_rho_threshold is not None:
            rhos = rhos.clamp(max=clip_pg_rho_threshold)
        return rhos * advantages


def action_log_probs(logits: Tensor, actions: Tensor) -> Tensor:
    """log p(a_s|x_s) of the actions taken: logits [T, B, A], actions [T, B] int64 -> [T, B]."""
    log_probs = torch.log_softmax(logits, dim=-1)  # [T, B, A]
    return log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # [T, B]


def from_logits(
    behaviour_policy_logits: Tensor,
    target_policy_logits: Tensor,
    actions: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> VTraceFromLogitsReturns:
    """V-trace from the logits of the behaviour policy mu and the target policy pi.

    log_rhos = log pi(a_s|x_s) - log mu(a_s|x_s), then `from_importance_weights`.

    Args:
        behaviour_policy_logits: [T, B, A] logits of mu, the actor's policy when it acted.
        target_policy_logits: [T, B, A] logits of pi, the learner's current policy.
        actions: [T, B] int64 actions a_s taken by mu.
        discounts, rewards, values, bootstrap_value, clip_rho_threshold, clip_pg_rho_threshold,
        lambda_: as in `from_importance_weights`.

    Returns:
        VTraceFromLogitsReturns; vs and pg_advantages are detached, target_action_log_probs
        keeps its gradient for the policy-gradient loss.
    """
    if target_policy_logits.dim() != 3:
        raise ValueError(
            f"target_policy_logits must have shape [T, B, A], got {list(target_policy_logits.shape)}"
        )
    time_steps, batch, num_actions = target_policy_logits.shape
    shape = (time_steps, batch, num_actions)
    _check_shape("behaviour_policy_logits", behaviour_policy_logits, shape, "[T, B, A]")
    _check_shape("actions", actions, (time_steps, batch), "[T, B]")
    if actions.dtype != torch.int64:
        raise ValueError(f"actions must be int64 (torch.long), got {actions.dtype}")

    target_action_log_probs = action_log_probs(target_policy_logits, actions)  # [T, B]
    behaviour_action_log_probs = action_log_probs(behaviour_policy_logits, actions)  # [T, B]
    log_rhos = target_action_log_probs - behaviour_action_log_probs  # [T, B]
    vtrace = from_importance_weights(
        log_rhos=log_rhos, discounts=discounts, rewards=rewards, values=values,
        bootstrap_value=bootstrap_value, clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold, lambda_=lambda_,
    )  # fmt: skip
    return VTraceFromLogitsReturns(
        vs=vtrace.vs, pg_advantages=vtrace.pg_advantages, log_rhos=log_rhos,
        behaviour_action_log_probs=behaviour_action_log_probs,
        target_action_log_probs=target_action_log_probs,
    )  # fmt: skip
