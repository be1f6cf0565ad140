"""The learner's update: bootstrapping at truncation vs termination, and that it learns."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn import functional as F

from common.model import ActorCritic, ModelSpec
from common.stacking import stack_frames
from learner import vtrace
from learner.batching import Batch, sequence_axes
from learner.config import LearnerConfig
from learner.inputs import final_stacks, previous_actions
from learner.popart import PopArt
from learner.update import (
    Hyper,
    Learner,
    batch_targets,
    forward_and_targets,
    loss_and_stats,
    select,
)

H = W = 84
A = 7


def replaced(batch: Batch, **arrays) -> Batch:
    """A copy of `batch` with some arrays swapped (copy.replace needs Python 3.13)."""
    return Batch(**(vars(batch) | arrays))


def make_batch(
    T: int, N: int, *, terminated=None, truncated=None, final_t=None, level=None, seed=0
) -> Batch:
    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 256, (T + 4, N, H, W), dtype=torch.uint8, generator=g)
    first = torch.zeros(T + 4, N, dtype=torch.bool)
    first[3] = True
    term = torch.zeros(T, N, dtype=torch.bool) if terminated is None else terminated
    trunc = torch.zeros(T, N, dtype=torch.bool) if truncated is None else truncated
    first[4:] = term | trunc  # the frame after an episode end starts the next episode
    return Batch(
        frames=frames,
        first=first,
        actions=torch.randint(0, A, (T, N), generator=g),
        rewards=torch.randn(T, N, generator=g) * 5,
        terminated=term,
        truncated=trunc,
        behaviour_logits=torch.zeros(T, N, A),
        final_frames=torch.randint(0, 256, (N, H, W), dtype=torch.uint8, generator=g),
        final_t=torch.full((N,), -1) if final_t is None else final_t,
        last_actions=torch.full((N,), A),  # step 0 starts an episode: no previous action
        core_state=torch.zeros(N, 0),  # a network without a recurrent core
        level=torch.zeros(T, N, dtype=torch.int64) if level is None else level,  # a set of one
        weights=torch.ones(N),
    )


def on_policy(model: ActorCritic, batch: Batch) -> Batch:
    """The same batch with behaviour logits equal to the model's own (rho = 1)."""
    with torch.no_grad():
        stacks = stack_frames(batch.frames, batch.first)[:-1]  # [T, N, 4, H, W]
        last = previous_actions(batch, A)[:-1]  # [T, N]
        logits = model(stacks.flatten(0, 1), last.flatten()).logits.view(*stacks.shape[:2], A)
    return replaced(batch, behaviour_logits=logits)


def new_model() -> ActorCritic:
    torch.manual_seed(0)
    net = ActorCritic(ModelSpec(num_actions=A))
    torch.nn.init.normal_(net.last_action.weight)  # as if trained: the previous action matters
    return net


model = pytest.fixture(name="model")(new_model)


def hyper(**changes) -> Hyper:
    """The learner's settings (LearnerConfig's defaults) with `changes`."""
    return Hyper.from_config(LearnerConfig())._replace(**changes)


def fwd_of(model: ActorCritic, batch: Batch, h: Hyper):
    """`forward_and_targets` with PopArt at its start (mu 0, sigma 1: the head's outputs are the
    values themselves)."""
    return forward_and_targets(model, batch, h, PopArt(model.value))


def losses_of(model: ActorCritic, batch: Batch, h: Hyper):
    """One step's losses on the targets of the network as it is (PopArt at its start)."""
    popart = PopArt(model.value)
    return loss_and_stats(model, batch, h, popart, batch_targets(model, batch, h, popart))


# IMPALA's update: one optimizer step per batch on the rho-weighted policy gradient
IMPALA = {"epochs": 1, "minibatches": 1, "ppo_clip": 0.0, "normalize_advantages": False}
HYPER = hyper(discount=0.9, loss_reward_scale=0.5, loss_reward_clip=0.0, **IMPALA)


def value_of(model: ActorCritic, stack: torch.Tensor, last_action: int) -> float:
    with torch.no_grad():
        return float(model(stack[None], torch.tensor([last_action])).value[0])


def test_truncation_bootstraps_from_the_final_frame(model):
    b = on_policy(
        model, make_batch(1, 1, truncated=torch.tensor([[True]]), final_t=torch.tensor([0]))
    )
    vs = fwd_of(model, b, HYPER).vtrace.vs  # [1, 1]
    zero = torch.zeros_like(b.frames[0, 0])  # frames 1, 2 precede the episode start at frame 3
    final = torch.stack([zero, zero, b.frames[3, 0], b.final_frames[0]])
    expected = 0.5 * float(b.rewards[0, 0]) + 0.9 * value_of(model, final, int(b.actions[0, 0]))
    assert float(vs[0, 0]) == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_termination_does_not_bootstrap(model):
    b = on_policy(model, make_batch(1, 1, terminated=torch.tensor([[True]])))
    vs = fwd_of(model, b, HYPER).vtrace.vs
    assert float(vs[0, 0]) == pytest.approx(0.5 * float(b.rewards[0, 0]), rel=1e-6)


def test_chunk_boundary_bootstraps_from_the_next_frame(model):
    b = on_policy(model, make_batch(1, 1))
    vs = fwd_of(model, b, HYPER).vtrace.vs
    nxt = stack_frames(b.frames, b.first)[1, 0]  # stack of frames[1:5]
    expected = 0.5 * float(b.rewards[0, 0]) + 0.9 * value_of(model, nxt, int(b.actions[0, 0]))
    assert float(vs[0, 0]) == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_final_frame_matters_only_where_truncated(model):
    b = make_batch(
        4,
        2,
        truncated=torch.tensor([[False, False], [True, False], [False, False], [False, False]]),
        final_t=torch.tensor([1, -1]),
    )
    other = replaced(b, final_frames=torch.zeros_like(b.final_frames))
    v1 = fwd_of(model, b, HYPER).vtrace.vs
    v2 = fwd_of(model, other, HYPER).vtrace.vs
    assert not torch.allclose(v1[:2, 0], v2[:2, 0])  # sequence 0: steps up to the cut change
    torch.testing.assert_close(v1[2:, 0], v2[2:, 0])  # after the cut: a new episode
    torch.testing.assert_close(v1[:, 1], v2[:, 1])  # sequence 1 has no truncation


def test_reward_scale_and_clip(model):
    b = on_policy(model, make_batch(1, 1, terminated=torch.tensor([[True]])))
    b = replaced(b, rewards=torch.tensor([[40.0]]))
    vs = fwd_of(model, b, hyper(loss_reward_scale=0.1, loss_reward_clip=1.0)).vtrace.vs
    assert float(vs[0, 0]) == pytest.approx(1.0)


def test_step_learns_a_fixed_batch(model):
    batch = make_batch(4, 2, seed=3)
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-4), hyper())
    with torch.no_grad():
        first = float(losses_of(model, batch, hyper()).baseline)
    for _ in range(20):
        stats = learner.step(batch)
    assert learner.updates == 20
    assert float(stats.baseline_loss) < 0.5 * first
    assert stats.priorities.shape == (2,) and bool((stats.priorities >= 0).all())
    assert torch.isfinite(stats.grad_norm)


def test_previous_actions_shift_actions_and_mark_episode_starts():
    b = make_batch(3, 2, terminated=torch.tensor([[False, False], [True, False], [False, False]]))
    b = replaced(
        b,
        actions=torch.tensor([[1, 2], [3, 4], [0, 1]]),
        last_actions=torch.tensor([A, 4]),
        first=b.first.index_fill(1, torch.tensor([1]), False),  # sequence 1: mid-episode at 0
    )
    prev = previous_actions(b, A)  # [T+1, N]
    assert prev[:, 0].tolist() == [A, 1, A, 0]  # step 2 follows the episode end at step 1
    assert prev[:, 1].tolist() == [4, 2, 4, 1]


def test_the_previous_action_changes_the_targets(model):
    b = on_policy(model, make_batch(3, 1, seed=4))
    other = replaced(b, actions=(b.actions + 1) % A)
    v1 = fwd_of(model, b, HYPER).values
    v2 = fwd_of(model, other, HYPER).values
    torch.testing.assert_close(v1[0], v2[0])  # step 0 starts the episode: no previous action
    assert not torch.allclose(v1[1:], v2[1:])


# ---- sample reuse: epochs, minibatches, held targets, the clipped surrogate, PopArt -------------


def test_select_keeps_sequences_whole():
    b = make_batch(3, 4, seed=5, final_t=torch.tensor([-1, 1, -1, 0]))
    sub = select(b, torch.tensor([3, 1]))
    for name, dim in sequence_axes().items():
        full, part = getattr(b, name), getattr(sub, name)
        torch.testing.assert_close(part, full.index_select(dim, torch.tensor([3, 1])))
    assert sub.final_t.tolist() == [0, 1]


def test_epochs_times_minibatches_optimizer_steps_one_policy_version(model):
    batch = on_policy(model, make_batch(4, 6, seed=6))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    learner = Learner(
        model, opt, hyper(epochs=3, minibatches=2, ppo_clip=0.1, normalize_advantages=True)
    )
    stats = learner.step(batch)
    assert learner.updates == 1 and learner.sgd_steps == 6 and stats.sgd_steps == 6
    assert opt.state[model.policy.weight]["step"] == 6
    assert stats.priorities.shape == (6,) and bool((stats.priorities > 0).all())
    assert 0 <= float(stats.clip_fraction) <= 1


def test_minibatches_never_exceed_the_sequences(model):
    batch = on_policy(model, make_batch(2, 2, seed=7))
    learner = Learner(
        model, torch.optim.SGD(model.parameters(), lr=0.0), hyper(epochs=1, minibatches=5)
    )
    assert learner.step(batch).sgd_steps == 2  # one sequence each, never an empty minibatch


def reference_loss(model, popart, batch, h, vs, adv) -> torch.Tensor:
    """APPO's loss written out element by element, with given targets vs [T, N] and advantages
    adv [T, N] (unit replay weights): PopArt's step on vs, then the value loss on them
    normalised by its new statistics."""
    T = batch.unroll_length
    fwd = forward_and_targets(model, batch, h, popart)  # the current network's logits
    log_pi = F.log_softmax(fwd.logits[:T], -1)  # [T, N, A]
    log_mu = F.log_softmax(batch.behaviour_logits, -1)
    a = batch.actions[..., None]
    ratio = (log_pi.gather(-1, a) - log_mu.gather(-1, a)).squeeze(-1).exp()  # [T, N]
    norm = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    lo, hi = 1 / (1 + h.ppo_clip), 1 + h.ppo_clip
    pg = -torch.minimum(ratio * norm, ratio.clamp(lo, hi) * norm).mean()
    popart.update(vs)
    predicted = model.value(fwd.features).squeeze(-1).view(T, -1)  # [T, N] normalised
    value = 0.5 * ((popart.normalize(vs) - predicted) ** 2).mean()
    entropy = -(log_pi.exp() * log_pi).sum(-1).mean()
    return pg + h.baseline_cost * value - h.entropy_cost * entropy


def test_the_pre_update_networks_targets_are_held_through_every_pass(model):
    """Every optimizer step of an update regresses on, and takes advantages from, the targets
    of the network as it was before the update."""
    batch = make_batch(4, 3, seed=11)
    h = hyper(epochs=3, minibatches=1)
    ref = copy.deepcopy(model)
    Learner(model, torch.optim.SGD(model.parameters(), lr=0.05), h).step(batch)

    opt, popart = torch.optim.SGD(ref.parameters(), lr=0.05), PopArt(ref.value)
    with torch.no_grad():
        fwd = forward_and_targets(ref, batch, h, popart)
        vs = fwd.vtrace.vs
        vs_next = torch.cat([vs[1:], fwd.values[4][None]])
        ended = batch.terminated | batch.truncated
        adv = batch.rewards * h.loss_reward_scale + h.discount * ~ended * vs_next - fwd.values[:4]
    for _ in range(3):
        opt.zero_grad()
        reference_loss(ref, popart, batch, h, vs, adv).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), h.max_grad_norm)
        opt.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


def test_v_trace_runs_once_an_update(model, monkeypatch):
    """An optimizer step needs only the ratios pi/mu: V-trace's recursion runs once an update
    (for the held targets), not at each of its epochs x minibatches steps."""

    calls = []
    real = vtrace.from_importance_weights
    monkeypatch.setattr(
        vtrace, "from_importance_weights", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    for ppo_clip in (0.1, 0.0):  # APPO's surrogate and IMPALA's rho-weighted gradient
        calls.clear()
        h = hyper(epochs=3, minibatches=2, ppo_clip=ppo_clip)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        assert Learner(model, opt, h).step(make_batch(4, 4, seed=13)).sgd_steps == 6
        assert len(calls) == 1


def test_surrogate_on_policy_has_impala_gradient(model):
    """At rho = 1 (lag 0) the clipped surrogate's gradient is IMPALA's: r = 1 is inside the clip
    and r A has gradient A grad log pi."""
    batch = on_policy(model, make_batch(4, 3, seed=8))
    grads = []
    for ppo_clip in (0.0, 0.1):
        net = copy.deepcopy(model)  # PopArt's step moves the value head: each from the same one
        settings = HYPER._replace(baseline_cost=0.0, entropy_cost=0.0, ppo_clip=ppo_clip)
        losses_of(net, batch, settings).total.backward()
        grads.append(torch.cat([p.grad.flatten() for p in net.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)
    assert grads[0].abs().sum() > 0


def test_surrogate_stops_pushing_a_policy_that_moved_past_the_clip(model):
    """Behaviour logits far from the learner's: every ratio outside [1/1.1, 1.1] in the
    direction of its advantage contributes no policy gradient."""
    # every step terminal: the advantage r - V(x) does not depend on mu through v_{s+1}
    batch = on_policy(model, make_batch(4, 3, seed=9, terminated=torch.ones(4, 3, dtype=bool)))
    adv = fwd_of(model, batch, HYPER).advantages
    # move mu so that pi/mu = 2 where the advantage is positive and 0.5 where it is negative
    shift = torch.where(adv > 0, -torch.log(torch.tensor(2.0)), torch.log(torch.tensor(2.0)))
    logits = batch.behaviour_logits.clone()
    logits.scatter_add_(-1, batch.actions[..., None], shift[..., None])
    # the other actions' logits are unchanged, so mu(a) moves by less than the shift: the ratio
    # still lands beyond the clip in the advantage's direction
    moved = replaced(batch, behaviour_logits=logits.detach())
    model.zero_grad()
    losses = losses_of(
        model, moved, HYPER._replace(baseline_cost=0.0, entropy_cost=0.0, ppo_clip=0.1)
    )
    losses.total.backward()
    assert float(losses.clip_fraction) == 1.0
    assert all(p.grad is None or p.grad.abs().max() == 0 for p in model.parameters())


def test_popart_step_learns_a_fixed_batch_in_normalised_units(model):
    batch = on_policy(model, make_batch(4, 2, seed=3))
    # targets far from the head's scale
    batch = replaced(batch, rewards=batch.rewards * 100)
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-3), HYPER)
    learner.popart = popart = PopArt(model.value, beta=0.3)  # quicker than the default's 3e-3
    for _ in range(40):
        stats = learner.step(batch)
    sigma = float(popart.stats.sigma(popart.min_sigma))
    assert sigma > 5  # the statistics found the targets' scale
    assert float(stats.baseline_loss) < 0.5  # in units of sigma, not of the raw targets
    fwd = forward_and_targets(model, batch, HYPER, popart)
    err = (fwd.vtrace.vs - fwd.values[:4]).abs().mean()
    assert float(err) < 0.5 * float(fwd.vtrace.vs.abs().mean())  # denormalised values track


def test_learner_refuses_zero_epochs(model):
    with pytest.raises(ValueError, match="epochs and minibatches"):
        Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), hyper(epochs=0))


def test_hyper_is_the_configs_fields_by_name_with_no_defaults_to_drift():
    assert Hyper._field_defaults == {}  # no Hyper trains with settings other than the config's
    cfg = LearnerConfig(discount=0.5, ppo_clip=0.2, epochs=3, normalize_advantages=False)
    assert Hyper.from_config(cfg)._asdict() == {name: getattr(cfg, name) for name in Hyper._fields}


# The recurrent core: unrolled over each sequence as the actor stepped it


def test_core_unroll_matches_the_actor_stepping_it_with_resets_and_a_carried_state():
    """Every value the learner computes with an LSTM core, the final stack's included, equals
    the network stepped one stack at a time from the chunk's state, zeroed at episode starts."""
    torch.manual_seed(1)
    net = ActorCritic(ModelSpec(num_actions=A, core="lstm", core_size=32)).eval()
    T, N = 6, 3
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    terminated[2, 0] = True  # sequence 0: a death at step 2, the next episode starts at 3
    truncated[3, 1] = True  # sequence 1: cut at step 3, bootstrapped from its final stack
    batch = make_batch(
        T, N, terminated=terminated, truncated=truncated, final_t=torch.tensor([-1, 3, -1])
    )
    batch.first[3, 1:] = False  # sequences 1 and 2 continue an episode from the last chunk
    batch.last_actions[1:] = torch.tensor([2, 5])
    batch.core_state = torch.randn(N, net.spec.state_size)  # where the actor's core was
    with torch.no_grad():
        fwd = forward_and_targets(net, batch, hyper(), PopArt(net.value))
        stacks = stack_frames(batch.frames, batch.first)  # [T+1, N, 4, H, W]
        prev = previous_actions(batch, A)  # [T+1, N]
        finals = final_stacks(batch)  # [N, 4, H, W]
        for n in range(N):
            state = batch.core_state[n : n + 1]
            for t in range(T + 1):
                if batch.first[3 + t, n]:
                    state = net.initial_state(1)
                out = net(stacks[t, n : n + 1], prev[t, n : n + 1], state)
                torch.testing.assert_close(fwd.values[t, n], out.value[0], rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(fwd.logits[t, n], out.logits[0], rtol=1e-5, atol=1e-5)
                state = out.state
                if t == batch.final_t[n]:
                    final = net(finals[n : n + 1], batch.actions[t, n : n + 1], state).value
                    torch.testing.assert_close(fwd.final_values[n], final[0], rtol=1e-5, atol=1e-5)
    moved = replaced(batch, core_state=torch.zeros_like(batch.core_state))
    with torch.no_grad():
        other = forward_and_targets(net, moved, hyper(), PopArt(net.value))
    assert not torch.allclose(other.values[:, 1:], fwd.values[:, 1:])  # the state is used
    torch.testing.assert_close(other.values[:, 0], fwd.values[:, 0])  # ... unless reset at 0


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_a_recurrent_learner_learns_a_fixed_batch_in_whole_sequences(core):
    torch.manual_seed(0)
    net = ActorCritic(ModelSpec(num_actions=A, core=core, core_size=32))
    batch = make_batch(8, 4)
    batch.core_state = torch.zeros(4, net.spec.state_size)
    learner = Learner(net, torch.optim.Adam(net.parameters(), lr=1e-3), hyper())
    first = learner.step(batch)
    for _ in range(30):
        last = learner.step(batch)
    assert last.baseline_loss < 0.5 * first.baseline_loss
    assert first.sgd_steps == 8  # 4 epochs x 2 minibatches of whole sequences


# Mixed precision


def test_bf16_autocast_keeps_the_targets_and_losses_in_float32_and_near_fp32(model):
    batch = on_policy(model, make_batch(8, 4, seed=3))
    with torch.no_grad():
        full = losses_of(copy.deepcopy(model), batch, hyper())  # each from the same value head
        half = losses_of(copy.deepcopy(model), batch, hyper(precision="bf16"))
        fwd = fwd_of(model, batch, hyper(precision="bf16"))
    assert fwd.logits.dtype == fwd.values.dtype == fwd.vtrace.vs.dtype == torch.float32
    assert half.total.dtype == torch.float32
    torch.testing.assert_close(half.baseline, full.baseline, rtol=0.05, atol=0.05)
    torch.testing.assert_close(half.entropy, full.entropy, rtol=0.02, atol=0.02)
