"""The KL limit per update: the KL against a slow reference, a limit that ends an update after
its first pass, one that never binds (then the update is today's, bit for bit), its metrics."""

from __future__ import annotations

import json
import math
import types
from collections import deque

import pytest
import torch
from torch import nn

from common.metrics import LearnerMetrics
from common.rundir import RunDir
from learner import telemetry, update
from learner.checkpoint import Totals
from learner.losses import categorical_kl
from learner.update import Learner, batch_targets, loss_and_stats, minibatch_indices, select
from tests.learner.test_update import hyper, make_batch, new_model, on_policy

EPOCHS, MINIBATCHES = 4, 2


def slow_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) [T, B] straight from the definition: sum over a of p(a) log(p(a) / q(a))."""
    T, B, A = p_logits.shape
    out = torch.zeros(T, B, dtype=torch.float64)
    for t in range(T):
        for b in range(B):
            p_exp = [math.exp(x) for x in p_logits[t, b].double().tolist()]
            q_exp = [math.exp(x) for x in q_logits[t, b].double().tolist()]
            p = [e / sum(p_exp) for e in p_exp]
            q = [e / sum(q_exp) for e in q_exp]
            out[t, b] = sum(p[a] * math.log(p[a] / q[a]) for a in range(A))
    return out


@pytest.mark.parametrize("shape", [(5, 3, 7), (1, 1, 7), (2, 4, 2)])
def test_the_kl_is_the_definitions(shape):
    g = torch.Generator().manual_seed(1)
    p, q = torch.randn(*shape, generator=g) * 2, torch.randn(*shape, generator=g) * 2
    kl = categorical_kl(p, q)
    assert kl.shape == shape[:2]
    torch.testing.assert_close(kl.double(), slow_kl(p, q), rtol=1e-5, atol=1e-6)
    assert (kl >= 0).all()
    assert categorical_kl(p, p + 3.0).abs().max() < 1e-6  # a shift of the logits is one policy


def test_logits_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match="must match"):
        categorical_kl(torch.zeros(2, 3, 7), torch.zeros(2, 3, 6))


def trained(kl_limit: float, epochs: int = EPOCHS, seed: int = 5):
    """A learner after one update of the same batch from the same network and seed."""
    model = new_model()
    h = hyper(epochs=epochs, minibatches=MINIBATCHES, kl_limit=kl_limit)
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-3), h, seed=seed)
    batch = on_policy(model, make_batch(4, 4, seed=3))
    return learner, learner.step(batch), batch


def params(learner: Learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.model.parameters()]


def test_a_tiny_limit_ends_the_update_after_its_first_pass():
    learner, stats, _ = trained(1e-9)
    assert stats.kl_stopped and stats.kl is not None and stats.kl.item() > 1e-9
    assert stats.epochs == 1 and stats.sgd_steps == MINIBATCHES
    assert learner.sgd_steps == MINIBATCHES and learner.updates == 1
    one_pass, _, _ = trained(0.0, epochs=1)  # the batch is trained on no further
    for a, b in zip(params(learner), params(one_pass), strict=True):
        assert torch.equal(a, b)


def count_forwards(monkeypatch) -> list[bool]:
    """The learner's forwards from now on, each by its `bootstrap` flag."""
    calls, forward = [], update.network_outputs

    def counting(*args, **kwargs):
        calls.append(kwargs.get("bootstrap", True))
        return forward(*args, **kwargs)

    monkeypatch.setattr(update, "network_outputs", counting)
    return calls


def test_a_limit_never_reached_runs_every_pass_and_trains_as_no_limit(monkeypatch):
    calls = count_forwards(monkeypatch)
    unlimited, stats_off, _ = trained(0.0)
    assert len(calls) == 1 + EPOCHS * MINIBATCHES  # the targets' forward, then one per step
    assert stats_off.kl is None and not stats_off.kl_stopped
    calls.clear()
    limited, stats, _ = trained(1e9)
    assert len(calls) == 1 + EPOCHS * MINIBATCHES + EPOCHS  # and one per pass for the KL
    assert not stats.kl_stopped and stats.epochs == EPOCHS
    assert stats.sgd_steps == EPOCHS * MINIBATCHES and 0 < stats.kl.item() < 1e9
    for a, b in zip(params(limited), params(unlimited), strict=True):
        assert torch.equal(a, b)
    for name in ("total_loss", "pg_loss", "baseline_loss", "entropy", "grad_norm"):
        assert torch.equal(getattr(stats, name), getattr(stats_off, name)), name


def untouched_update(learner: Learner, batch, seed: int) -> None:
    """The update as it was before the KL limit: targets, then epochs x minibatches steps."""
    h, model, g = learner.hyper, learner.model, torch.Generator().manual_seed(seed)
    model.train()
    targets = batch_targets(model, batch, h, learner.popart)
    for _ in range(h.epochs):
        for index in minibatch_indices(batch.num_sequences, h.minibatches, g, "cpu"):
            sub = select(batch, index)
            losses = loss_and_stats(model, sub, h, learner.popart, targets.select(index))
            learner.optimizer.zero_grad(set_to_none=True)
            losses.total.backward()
            nn.utils.clip_grad_norm_(model.parameters(), h.max_grad_norm)
            learner.optimizer.step()


def test_no_limit_is_the_update_without_one_bit_for_bit():
    learner, _, batch = trained(0.0)
    reference = new_model()
    ref = Learner(reference, torch.optim.Adam(reference.parameters(), lr=1e-3), learner.hyper)
    untouched_update(ref, batch, seed=5)
    for a, b in zip(params(learner), params(ref), strict=True):
        assert torch.equal(a, b)


def test_the_kl_and_its_stops_reach_the_metrics(tmp_path, monkeypatch):
    metrics = LearnerMetrics()
    names = {m.name: m.kind.__name__ for m in metrics.TABLE}
    assert names["mario_learner_update_kl"] == "Gauge"
    assert names["mario_learner_kl_stops"] == "Counter"
    monkeypatch.setattr(telemetry, "RECORD_EVERY_S", 0.0)
    learner, stats, _ = trained(1e-9)
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    ingest = types.SimpleNamespace(episodes=deque(), drain_episodes=list)
    t = telemetry.Telemetry(metrics, run, learner, None, ingest, 0.0)
    t.updated(stats, Totals(64, 16), steps=16, replayed=0, frames=64, compute_s=0.1)
    r = metrics.registry
    assert r.get_sample_value("mario_learner_kl_stops_total") == 1
    assert r.get_sample_value("mario_learner_update_kl") == pytest.approx(stats.kl.item())
    (line,) = run.metrics.read_text().splitlines()
    assert json.loads(line)["update_kl"] == pytest.approx(stats.kl.item())
    t.updated(stats._replace(kl=None, kl_stopped=False), Totals(128, 32), 16, 0, 64, 0.1)
    assert r.get_sample_value("mario_learner_kl_stops_total") == 1
    assert json.loads(run.metrics.read_text().splitlines()[1])["update_kl"] is None
