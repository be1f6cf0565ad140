"""Self-imitation's math (learner/self_imitation.py) against loops written from Oh et al. 2018."""

from __future__ import annotations

import pytest
import torch

from learner import self_imitation as sil


def slow_returns(rewards, discounts, bootstrap):
    T, N = rewards.shape
    out = torch.zeros(T, N)
    for n in range(N):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                total += weight * float(rewards[k, n])
                weight *= float(discounts[k, n])
            out[t, n] = total + weight * float(bootstrap[n])
    return out


@pytest.mark.parametrize("T,N", [(1, 1), (5, 3), (32, 2)])
def test_returns_match_the_sum_of_discounted_rewards_and_the_bootstrap(T, N):
    g = torch.Generator().manual_seed(T * 10 + N)
    rewards = torch.randn(T, N, generator=g)
    discounts = 0.9 * (torch.rand(T, N, generator=g) > 0.2).float()  # some episode ends
    bootstrap = torch.randn(N, generator=g)
    assert torch.allclose(
        sil.returns(rewards, discounts, bootstrap),
        slow_returns(rewards, discounts, bootstrap),
        atol=1e-5,
    )


def test_an_episode_end_stops_the_return():
    rewards = torch.tensor([[1.0], [2.0], [4.0]])
    discounts = torch.tensor([[0.5], [0.0], [0.5]])  # the episode ends after step 1
    out = sil.returns(rewards, discounts, torch.tensor([8.0]))
    assert out[:, 0].tolist() == [1.0 + 0.5 * 2.0, 2.0, 4.0 + 0.5 * 8.0]


def test_returns_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="pass"):
        sil.returns(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3))


def slow_loss(log_pi, value, returns, scale, weights):
    T, N = log_pi.shape
    policy = value_loss = 0.0
    for t in range(T):
        for n in range(N):
            gap = max(float(returns[t, n] - value[t, n]), 0.0)
            nlp = min(-float(log_pi[t, n]), sil.MAX_NEG_LOG_PI)
            policy += nlp * min(gap / scale, sil.ADVANTAGE_CLIP) * float(weights[n])
            value_loss += 0.5 * gap**2 * float(weights[n])
    return policy / (T * N), value_loss / (T * N)


def test_the_loss_matches_the_formula_and_ignores_returns_below_the_value():
    g = torch.Generator().manual_seed(0)
    T, N = 6, 4
    log_pi = -torch.rand(T, N, generator=g) * 8  # some beyond the -log pi clip
    value = torch.randn(T, N, generator=g)
    returns = torch.randn(T, N, generator=g) * 2
    weights = torch.rand(N, generator=g)
    out = sil.self_imitation_loss(log_pi, value, returns, 0.7, weights)
    policy, value_loss = slow_loss(log_pi, value, returns, 0.7, weights)
    assert out.policy.item() == pytest.approx(policy, rel=1e-5)
    assert out.value.item() == pytest.approx(value_loss, rel=1e-5)
    assert out.total.item() == pytest.approx(policy + sil.VALUE_COST * value_loss, rel=1e-5)
    gaps = (returns - value).clamp(min=0)
    assert torch.allclose(out.priorities, gaps.mean(0))
    assert out.positive.item() == pytest.approx(float((gaps > 0).float().mean()))


def test_the_gradient_raises_the_taken_action_and_the_value_only_where_the_return_beat_it():
    logits = torch.zeros(2, 1, 3, requires_grad=True)  # two steps, one sequence, three actions
    value = torch.tensor([[0.0], [5.0]], requires_grad=True)
    actions = torch.tensor([[1], [1]])
    log_pi = torch.log_softmax(logits, -1).gather(-1, actions[..., None]).squeeze(-1)
    returns = torch.tensor([[1.0], [1.0]])  # beats the value at step 0 only
    sil.self_imitation_loss(log_pi, value, returns, 1.0, torch.ones(1)).total.backward()
    assert logits.grad[0, 0, 1] < 0 and logits.grad[0, 0, 0] > 0  # descent raises action 1
    assert logits.grad[1].abs().max() == 0  # below the value: nothing learned
    assert value.grad[0, 0] < 0 and value.grad[1, 0] == 0  # descent raises V towards R


def test_the_loss_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="pass"):
        sil.self_imitation_loss(
            torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), 1.0, torch.ones(3)
        )
