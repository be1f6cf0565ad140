"""V-trace against a slow reference written straight from IMPALA Eq. (1) as a double sum."""

import math

import numpy as np
import pytest
import torch

from learner import vtrace

TOLERANCE = 1e-5


# --- Slow reference: Espeholt et al. 2018, Section 4.1, Eq. (1) and Section 4.2 -----------------


def reference_vtrace(
    log_rhos, discounts, rewards, values, bootstrap_value, clip_rho, clip_pg_rho, lam=1.0
):
    """v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i)(prod_{i=s}^{t-1} c_i) delta_t V,
    c_i = lam min(1, rho_i) (Remark 2 of Sec. 4.1 for lam < 1).

    Plain Python floats over float64 numpy arrays, one (s, b) at a time; no recursion.
    """
    time_steps, batch = log_rhos.shape
    rhos = np.exp(log_rhos.astype(np.float64))
    values_ext = np.concatenate([values, bootstrap_value[None]]).astype(np.float64)  # [T+1, B]
    vs = np.zeros((time_steps, batch), dtype=np.float64)
    pg_advantages = np.zeros((time_steps, batch), dtype=np.float64)

    def clip(rho, threshold):
        return rho if threshold is None else min(threshold, rho)

    for b in range(batch):
        for s in range(time_steps):
            total = float(values_ext[s, b])
            for t in range(s, time_steps):
                gamma_product = math.prod(float(discounts[i, b]) for i in range(s, t))
                c_product = math.prod(lam * min(1.0, float(rhos[i, b])) for i in range(s, t))
                delta = clip(float(rhos[t, b]), clip_rho) * (
                    float(rewards[t, b])
                    + float(discounts[t, b]) * values_ext[t + 1, b]
                    - values_ext[t, b]
                )
                total += gamma_product * c_product * delta
            vs[s, b] = total
        for s in range(time_steps):
            v_next = vs[s + 1, b] if s + 1 < time_steps else float(bootstrap_value[b])
            pg_advantages[s, b] = clip(float(rhos[s, b]), clip_pg_rho) * (
                float(rewards[s, b]) + float(discounts[s, b]) * v_next - values_ext[s, b]
            )
    return vs, pg_advantages


def make_inputs(time_steps, batch, seed=0, log_rho_low=-1.0, log_rho_high=1.0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)

    def uniform(shape, low, high):
        return low + (high - low) * torch.rand(shape, generator=generator, dtype=dtype)

    return dict(
        log_rhos=uniform((time_steps, batch), log_rho_low, log_rho_high),
        discounts=uniform((time_steps, batch), 0.9, 1.0),
        rewards=uniform((time_steps, batch), -1.0, 1.0),
        values=uniform((time_steps, batch), -2.0, 2.0),
        bootstrap_value=uniform((batch,), -2.0, 2.0),
    )


def run_reference(inputs, clip_rho, clip_pg_rho):
    arrays = {name: tensor.double().numpy() for name, tensor in inputs.items()}
    return reference_vtrace(**arrays, clip_rho=clip_rho, clip_pg_rho=clip_pg_rho)


def assert_matches_reference(inputs, clip_rho, clip_pg_rho):
    returns = vtrace.from_importance_weights(
        **inputs, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho
    )
    ref_vs, ref_pg = run_reference(inputs, clip_rho, clip_pg_rho)
    np.testing.assert_allclose(returns.vs.numpy(), ref_vs, rtol=TOLERANCE, atol=TOLERANCE)
    np.testing.assert_allclose(
        returns.pg_advantages.numpy(), ref_pg, rtol=TOLERANCE, atol=TOLERANCE
    )


# --- Agreement with the reference ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("time_steps", "batch"),
    [(1, 5), (7, 1), (1, 1), (20, 8)],
    ids=["T=1", "B=1", "T=1,B=1", "typical"],
)
def test_matches_reference(time_steps, batch):
    inputs = make_inputs(time_steps, batch, seed=time_steps * 100 + batch)
    assert_matches_reference(inputs, clip_rho=1.0, clip_pg_rho=1.0)


@pytest.mark.parametrize(
    ("clip_rho", "clip_pg_rho"),
    [(1.0, 1.0), (0.5, 2.0), (2.0, 0.5), (None, None), (None, 1.0), (1.0, None)],
)
def test_matches_reference_when_rhos_are_clipped_on_both_sides(clip_rho, clip_pg_rho):
    # log rho in [-4, 4]: rho from ~0.02 to ~55, far below and far above every threshold.
    inputs = make_inputs(20, 8, seed=1, log_rho_low=-4.0, log_rho_high=4.0)
    rhos = inputs["log_rhos"].exp()
    for threshold in (0.5, 1.0, 2.0):
        assert (rhos > 10 * threshold).any() and (rhos < threshold / 10).any()
    assert_matches_reference(inputs, clip_rho=clip_rho, clip_pg_rho=clip_pg_rho)


def test_clipping_changes_the_result():
    inputs = make_inputs(10, 4, seed=2, log_rho_low=-3.0, log_rho_high=3.0)
    clipped = vtrace.from_importance_weights(**inputs)
    unclipped = vtrace.from_importance_weights(
        **inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None
    )
    assert not torch.allclose(clipped.vs, unclipped.vs)
    assert not torch.allclose(clipped.pg_advantages, unclipped.pg_advantages)


def test_on_policy_without_discount_is_the_monte_carlo_return():
    # rho = c = 1 and gamma = 1: v_s is the sum of the remaining rewards plus V(x_T).
    inputs = make_inputs(6, 3, seed=3)
    inputs["log_rhos"] = torch.zeros_like(inputs["log_rhos"])
    inputs["discounts"] = torch.ones_like(inputs["discounts"])
    returns = vtrace.from_importance_weights(**inputs)
    remaining_rewards = inputs["rewards"].flip(0).cumsum(0).flip(0)
    torch.testing.assert_close(returns.vs, remaining_rewards + inputs["bootstrap_value"])


@pytest.mark.parametrize("lam", [0.95, 0.5])
def test_lambda_matches_reference(lam):
    inputs = make_inputs(20, 8, seed=11, log_rho_low=-2.0, log_rho_high=2.0)
    returns = vtrace.from_importance_weights(**inputs, lambda_=lam)
    ref_vs, ref_pg = reference_vtrace(
        **{k: t.double().numpy() for k, t in inputs.items()}, clip_rho=1.0, clip_pg_rho=1.0, lam=lam
    )
    np.testing.assert_allclose(returns.vs.numpy(), ref_vs, rtol=TOLERANCE, atol=TOLERANCE)
    np.testing.assert_allclose(
        returns.pg_advantages.numpy(), ref_pg, rtol=TOLERANCE, atol=TOLERANCE
    )
    plain = vtrace.from_importance_weights(**inputs)
    assert not torch.allclose(returns.vs, plain.vs)


def reference_gae(discounts, rewards, values, bootstrap_value, lam):
    """GAE (Schulman et al. 2016, Eq. 16) as its double sum: A_s = sum_t (prod gamma lam) delta_t,
    delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t); float64, one (s, b) at a time."""
    time_steps, batch = rewards.shape
    v = np.concatenate([values, bootstrap_value[None]]).astype(np.float64)
    out = np.zeros((time_steps, batch))
    for b in range(batch):
        for s in range(time_steps):
            for t in range(s, time_steps):
                weight = math.prod(float(discounts[i, b]) * lam for i in range(s, t))
                out[s, b] += weight * (rewards[t, b] + discounts[t, b] * v[t + 1, b] - v[t, b])
    return out


def test_on_policy_lambda_targets_are_gae_returns():
    # pi = mu: v_s - V(x_s) is GAE(gamma, lambda)'s advantage, an episode end included.
    inputs = make_inputs(16, 5, seed=12)
    inputs["log_rhos"] = torch.zeros_like(inputs["log_rhos"])
    inputs["discounts"][6, 2] = 0.0
    returns = vtrace.from_importance_weights(**inputs, lambda_=0.95)
    arrays = {k: t.double().numpy() for k, t in inputs.items() if k != "log_rhos"}
    gae = reference_gae(**arrays, lam=0.95)
    np.testing.assert_allclose(
        (returns.vs - inputs["values"]).numpy(), gae, rtol=TOLERANCE, atol=TOLERANCE
    )


@pytest.mark.parametrize("lam", [0.0, -0.5, 1.5])
def test_lambda_outside_its_range_is_refused(lam):
    with pytest.raises(ValueError, match="lambda_ must be in"):
        vtrace.from_importance_weights(**make_inputs(3, 2), lambda_=lam)


# --- Episode ending inside the chunk -------------------------------------------------------------


def test_episode_end_mid_chunk_isolates_the_steps_before_it():
    time_steps, batch, end = 12, 4, 5
    inputs = make_inputs(time_steps, batch, seed=4, log_rho_low=-2.0, log_rho_high=2.0)
    inputs["discounts"][end] = 0.0
    assert_matches_reference(inputs, clip_rho=1.0, clip_pg_rho=1.0)
    before = vtrace.from_importance_weights(**inputs)

    # Replace everything after the episode end, the bootstrap value included.
    other = make_inputs(time_steps, batch, seed=5, log_rho_low=-2.0, log_rho_high=2.0)
    perturbed = {name: tensor.clone() for name, tensor in inputs.items()}
    for name in ("log_rhos", "discounts", "rewards", "values"):
        perturbed[name][end + 1 :] = other[name][end + 1 :]
    perturbed["bootstrap_value"] = other["bootstrap_value"]
    after = vtrace.from_importance_weights(**perturbed)

    torch.testing.assert_close(after.vs[: end + 1], before.vs[: end + 1], rtol=0, atol=0)
    torch.testing.assert_close(
        after.pg_advantages[: end + 1], before.pg_advantages[: end + 1], rtol=0, atol=0
    )
    assert not torch.allclose(after.vs[end + 1 :], before.vs[end + 1 :])


# --- from_logits ---------------------------------------------------------------------------------


def make_logits_inputs(time_steps=8, batch=3, num_actions=5, seed=6, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    inputs = make_inputs(time_steps, batch, seed=seed, dtype=dtype)
    del inputs["log_rhos"]
    shape = (time_steps, batch, num_actions)
    inputs["behaviour_policy_logits"] = torch.randn(shape, generator=generator, dtype=dtype)
    inputs["target_policy_logits"] = torch.randn(shape, generator=generator, dtype=dtype)
    inputs["actions"] = torch.randint(0, num_actions, (time_steps, batch), generator=generator)
    return inputs


def test_from_logits_equals_from_importance_weights():
    inputs = make_logits_inputs()
    returns = vtrace.from_logits(**inputs)

    actions = inputs["actions"]
    target_probs = torch.softmax(inputs["target_policy_logits"], dim=-1)
    behaviour_probs = torch.softmax(inputs["behaviour_policy_logits"], dim=-1)
    log_rhos = torch.zeros(actions.shape, dtype=torch.float64)
    for t in range(actions.shape[0]):
        for b in range(actions.shape[1]):
            a = actions[t, b]
            log_rhos[t, b] = torch.log(target_probs[t, b, a]) - torch.log(behaviour_probs[t, b, a])

    expected = vtrace.from_importance_weights(
        log_rhos=log_rhos,
        discounts=inputs["discounts"],
        rewards=inputs["rewards"],
        values=inputs["values"],
        bootstrap_value=inputs["bootstrap_value"],
    )
    torch.testing.assert_close(returns.log_rhos, log_rhos)
    torch.testing.assert_close(returns.vs, expected.vs)
    torch.testing.assert_close(returns.pg_advantages, expected.pg_advantages)
    torch.testing.assert_close(
        returns.target_action_log_probs - returns.behaviour_action_log_probs, log_rhos
    )


def test_targets_carry_no_gradient_but_target_log_probs_do():
    inputs = make_logits_inputs()
    for name in ("target_policy_logits", "values", "rewards", "bootstrap_value"):
        inputs[name].requires_grad_(True)
    returns = vtrace.from_logits(**inputs)

    assert not returns.vs.requires_grad
    assert not returns.pg_advantages.requires_grad
    assert returns.target_action_log_probs.requires_grad
    (returns.target_action_log_probs * returns.pg_advantages).sum().backward()
    assert inputs["target_policy_logits"].grad is not None
    assert inputs["values"].grad is None


def test_from_importance_weights_output_is_detached_from_grad_inputs():
    inputs = {name: t.requires_grad_(True) for name, t in make_inputs(5, 2, seed=7).items()}
    returns = vtrace.from_importance_weights(**inputs)
    assert not returns.vs.requires_grad
    assert not returns.pg_advantages.requires_grad


# --- Shapes, thresholds, dtypes, devices ---------------------------------------------------------

T, B, A = 4, 3, 5

BAD_IMPORTANCE_WEIGHT_INPUTS = [
    ("log_rhos", torch.zeros(T), "log_rhos"),
    ("log_rhos", torch.zeros(T, B, 1), "log_rhos"),
    ("discounts", torch.zeros(T + 1, B), "discounts"),
    ("discounts", torch.zeros(T), "discounts"),
    ("rewards", torch.zeros(T, B + 1), "rewards"),
    ("values", torch.zeros(T, B, 1), "values"),
    ("bootstrap_value", torch.zeros(B + 1), "bootstrap_value"),
    ("bootstrap_value", torch.zeros(1, B), "bootstrap_value"),
    ("bootstrap_value", torch.zeros(()), "bootstrap_value"),
    ("clip_rho_threshold", 0.0, "clip_rho_threshold"),
    ("clip_rho_threshold", -1.0, "clip_rho_threshold"),
    ("clip_pg_rho_threshold", -0.5, "clip_pg_rho_threshold"),
]


@pytest.mark.parametrize(
    ("name", "bad_value", "message"),
    BAD_IMPORTANCE_WEIGHT_INPUTS,
    ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(BAD_IMPORTANCE_WEIGHT_INPUTS)],
)
def test_from_importance_weights_rejects_bad_input(name, bad_value, message):
    inputs = make_inputs(T, B)
    inputs[name] = bad_value
    with pytest.raises(ValueError, match=message):
        vtrace.from_importance_weights(**inputs)


BAD_LOGITS_INPUTS = [
    ("target_policy_logits", torch.zeros(T, B), "target_policy_logits"),
    ("behaviour_policy_logits", torch.zeros(T, B, A + 1), "behaviour_policy_logits"),
    ("behaviour_policy_logits", torch.zeros(T, B), "behaviour_policy_logits"),
    ("actions", torch.zeros(T, B, 1, dtype=torch.int64), "actions"),
    ("actions", torch.zeros(T + 1, B, dtype=torch.int64), "actions"),
    ("actions", torch.zeros(T, B), "int64"),
    ("rewards", torch.zeros(T, B + 1), "rewards"),
    ("bootstrap_value", torch.zeros(T, B), "bootstrap_value"),
]


@pytest.mark.parametrize(
    ("name", "bad_value", "message"),
    BAD_LOGITS_INPUTS,
    ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(BAD_LOGITS_INPUTS)],
)
def test_from_logits_rejects_bad_input(name, bad_value, message):
    inputs = make_logits_inputs(T, B, A)
    inputs[name] = bad_value
    with pytest.raises(ValueError, match=message):
        vtrace.from_logits(**inputs)


def test_shape_error_names_expected_and_actual_shape():
    inputs = make_inputs(T, B)
    inputs["rewards"] = torch.zeros(T + 2, B)
    with pytest.raises(ValueError, match=r"\[T, B\] = \[4, 3\], got \[6, 3\]"):
        vtrace.from_importance_weights(**inputs)


def test_float32_inputs_keep_their_dtype():
    inputs32 = make_inputs(20, 8, seed=8, dtype=torch.float32)
    returns = vtrace.from_importance_weights(**inputs32)
    assert returns.vs.dtype == torch.float32
    assert returns.pg_advantages.dtype == torch.float32
    ref_vs, ref_pg = run_reference(inputs32, 1.0, 1.0)
    np.testing.assert_allclose(returns.vs.numpy(), ref_vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(returns.pg_advantages.numpy(), ref_pg, rtol=1e-4, atol=1e-4)

    logits_returns = vtrace.from_logits(**make_logits_inputs(dtype=torch.float32))
    assert all(tensor.dtype == torch.float32 for tensor in logits_returns)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_cuda_and_matches_cpu():
    inputs = make_logits_inputs(time_steps=20, batch=8, dtype=torch.float32)
    cpu = vtrace.from_logits(**inputs)
    cuda = vtrace.from_logits(**{name: t.cuda() for name, t in inputs.items()})
    for cpu_tensor, cuda_tensor in zip(cpu, cuda, strict=True):
        assert cuda_tensor.is_cuda
        torch.testing.assert_close(cuda_tensor.cpu(), cpu_tensor, rtol=1e-5, atol=1e-5)
