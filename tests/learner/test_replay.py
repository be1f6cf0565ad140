"""PrioritizedReplay against the formulas of Schaul et al. 2016, written out by hand."""

import math
from statistics import NormalDist

import pytest
import torch

from learner.replay import (
    PrioritizedReplay,
    ReplayCapacityError,
    _mem_available_bytes,
    check_fits,
    estimate_bytes,
)

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    ),
]


def ids(start: int, n: int) -> dict[str, torch.Tensor]:
    """A batch whose only field names each sequence: row r holds start + r."""
    return {"id": torch.arange(start, start + n)}


def slot_contents(replay: PrioritizedReplay, draws: int = 4000) -> dict[int, int]:
    """Map slot -> stored id, read back through sample() only."""
    sample = replay.sample(draws)
    return dict(zip(sample.indices.tolist(), sample.batch["id"].tolist(), strict=True))


def chi2_critical(df: int, p: float = 0.999) -> float:
    """Wilson–Hilferty approximation to the p-quantile of a chi-square with df degrees."""
    z = NormalDist().inv_cdf(p)
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_statistic(observed: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs.double() * observed.sum()
    return float(((observed.double() - expected) ** 2 / expected).sum())


PRIORITIES = torch.tensor([0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0])


def filled(alpha: float, beta: float = 0.4) -> PrioritizedReplay:
    replay = PrioritizedReplay(len(PRIORITIES), alpha=alpha, beta=beta, device="cpu")
    replay.add(ids(0, len(PRIORITIES)), priorities=PRIORITIES)
    return replay


# ---------------------------------------------------------------------------- sampling law
def test_wilson_hilferty_is_close_to_tabulated_quantiles():
    # 0.999 quantiles from standard chi-square tables; the approximation errs slightly high.
    assert chi2_critical(7) == pytest.approx(24.322, rel=0.01)
    assert chi2_critical(20) == pytest.approx(45.315, rel=0.01)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_sampling_frequencies_match_p_to_the_alpha(alpha):
    torch.manual_seed(1234)
    draws = 200_000
    sample = filled(alpha).sample(draws)
    observed = torch.bincount(sample.indices, minlength=len(PRIORITIES))
    probs = PRIORITIES.double() ** alpha
    probs /= probs.sum()
    assert chi2_statistic(observed, probs) < chi2_critical(len(PRIORITIES) - 1)


def test_chi_square_check_rejects_the_wrong_alpha():
    """The goodness-of-fit test has power: α=0.6 draws fail against the α=1 law."""
    torch.manual_seed(1234)
    sample = filled(0.6).sample(200_000)
    observed = torch.bincount(sample.indices, minlength=len(PRIORITIES))
    wrong = PRIORITIES.double() / PRIORITIES.sum()
    assert chi2_statistic(observed, wrong) > 10 * chi2_critical(len(PRIORITIES) - 1)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights_follow_the_formula(beta):
    torch.manual_seed(0)
    alpha = 0.7
    replay = filled(alpha, beta)
    sample = replay.sample(64)
    probs = PRIORITIES.double() ** alpha / (PRIORITIES.double() ** alpha).sum()
    n_stored = len(PRIORITIES)
    w = (n_stored * probs[sample.indices]) ** (-beta)
    expected = w / w.max()
    assert sample.weights.dtype == torch.float32
    torch.testing.assert_close(sample.weights.double(), expected, rtol=1e-5, atol=1e-7)
    assert sample.weights.max().item() == 1.0


def test_beta_is_settable_and_validated():
    replay = filled(1.0, beta=0.4)
    replay.beta = 1.0
    assert replay.beta == 1.0
    with pytest.raises(ValueError, match="beta"):
        replay.beta = 1.5


# ---------------------------------------------------------------------------- ring order
def test_fifo_overwrites_the_oldest_first():
    replay = PrioritizedReplay(4, alpha=0.0, beta=0.0, device="cpu")
    slots = [replay.add(ids(i, 1)).item() for i in range(6)]
    assert slots == [0, 1, 2, 3, 0, 1]
    assert replay.size == 4
    assert slot_contents(replay) == {0: 4, 1: 5, 2: 2, 3: 3}


def test_batch_wrapping_the_ring_splits_across_the_end():
    replay = PrioritizedReplay(5, alpha=0.0, beta=0.0, device="cpu")
    replay.add(ids(0, 3))
    assert replay.add(ids(3, 4)).tolist() == [3, 4, 0, 1]
    assert slot_contents(replay) == {0: 5, 1: 6, 2: 2, 3: 3, 4: 4}


def test_batch_larger_than_capacity_keeps_its_last_sequences():
    replay = PrioritizedReplay(4, alpha=0.0, beta=0.0, device="cpu")
    replay.add(ids(100, 1))
    slots = replay.add(ids(0, 10))
    assert slots.tolist() == [1, 2, 3, 0]  # same as ten single adds
    assert replay.size == 4
    assert slot_contents(replay) == {1: 6, 2: 7, 3: 8, 0: 9}


# ---------------------------------------------------------------------------- priorities
def test_updated_priority_dominates_then_fades():
    torch.manual_seed(0)
    replay = PrioritizedReplay(10, alpha=1.0, beta=0.4, device="cpu")
    replay.add(ids(0, 10))
    replay.update_priorities(torch.tensor([3]), torch.tensor([1e6]))
    assert (replay.sample(1000).indices == 3).float().mean().item() > 0.99
    replay.update_priorities(torch.tensor([3]), torch.tensor([1e-4]))
    assert (replay.sample(1000).indices == 3).sum().item() < 5


def test_new_sequences_get_the_running_max_priority():
    replay = PrioritizedReplay(3, alpha=1.0, beta=0.4, device="cpu")
    replay.add(ids(0, 3))
    assert replay.priority_quantiles([0.0, 1.0]).tolist() == [1.0, 1.0]  # starts at 1.0
    replay.update_priorities(torch.tensor([0, 1, 2]), torch.tensor([5.0, 0.5, 0.5]))
    replay.add(ids(3, 1))  # evicts slot 0, the one holding 5.0
    # The running max remembers 5.0, so the newcomer is the maximum.
    assert replay.priority_quantiles([1.0]).item() == 5.0
    replay.update_priorities(torch.tensor([2]), torch.tensor([7.0]))
    replay.add(ids(4, 1))  # into slot 1, at the new max 7.0
    assert replay.priority_quantiles([0.0, 0.5, 1.0]).tolist() == [5.0, 7.0, 7.0]


def test_explicit_priorities_are_clamped_and_raise_the_max():
    replay = PrioritizedReplay(4, alpha=1.0, beta=0.4, device="cpu", eps=1e-3)
    replay.add(ids(0, 3), priorities=torch.tensor([0.0, float("nan"), 9.0]))
    assert replay.priority_quantiles([0.0, 1.0]).tolist() == pytest.approx([1e-3, 9.0])
    replay.add(ids(3, 1))
    sorted_priorities = replay.priority_quantiles([0.0, 1 / 3, 2 / 3, 1.0]).tolist()
    assert sorted_priorities == pytest.approx([1e-3, 1e-3, 9.0, 9.0], rel=1e-3)


def test_priority_quantiles_on_empty_buffer_are_nan():
    replay = PrioritizedReplay(4, alpha=1.0, beta=0.4, device="cpu")
    assert torch.isnan(replay.priority_quantiles([0.5, 0.9])).all()


# ---------------------------------------------------------------------------- storage
@pytest.mark.parametrize("device", DEVICES)
def test_storage_and_outputs_live_on_the_requested_device(device):
    replay = PrioritizedReplay(8, alpha=0.6, beta=0.4, device=device)
    slots = replay.add({"x": torch.zeros(5, 3)})  # a host batch
    sample = replay.sample(4)
    assert replay.device.type == device
    for tensor in (slots, sample.indices, sample.weights, *sample.batch.values()):
        assert tensor.device.type == device
    assert slots.dtype == sample.indices.dtype == torch.int64


def test_arbitrary_fields_and_dtypes_round_trip_exactly():
    torch.manual_seed(0)
    n, t = 12, 4

    def batch(start: int) -> dict[str, torch.Tensor]:
        return {
            "id": torch.arange(start, start + n),
            "frames": torch.randint(0, 256, (n, t + 4, 12, 12), dtype=torch.uint8),
            "done": torch.rand(n, t) < 0.3,
            "action": torch.randint(-(2**40), 2**40, (n, t)),
            "logits": torch.randn(n, t, 7),
        }

    replay = PrioritizedReplay(32, alpha=0.6, beta=0.4, device="cpu")
    sources = [batch(0), batch(n)]
    for source in sources:
        replay.add(source)
    sample = replay.sample(200)
    for row, seq_id in enumerate(sample.batch["id"].tolist()):
        source = sources[seq_id // n]
        for key, stored in sample.batch.items():
            assert stored.dtype == source[key].dtype, key
            assert torch.equal(stored[row], source[key][seq_id % n]), key


def test_sampled_batch_is_a_copy_that_survives_overwrites():
    replay = PrioritizedReplay(2, alpha=0.0, beta=0.0, device="cpu")
    replay.add(ids(0, 2))
    sample = replay.sample(8)
    before = sample.batch["id"].clone()
    replay.add(ids(10, 2))
    assert torch.equal(sample.batch["id"], before)


# ---------------------------------------------------------------------------- bad input
def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="capacity"):
        PrioritizedReplay(0, alpha=0.6, beta=0.4, device="cpu")
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplay(4, alpha=-1.0, beta=0.4, device="cpu")
    with pytest.raises(ValueError, match="beta"):
        PrioritizedReplay(4, alpha=0.6, beta=-0.1, device="cpu")


def test_mismatched_batches_raise_naming_the_field():
    replay = PrioritizedReplay(8, alpha=0.6, beta=0.4, device="cpu")
    replay.add({"frames": torch.zeros(2, 5, 6, dtype=torch.uint8), "reward": torch.zeros(2, 5)})
    with pytest.raises(ValueError, match=r"'frames'.*\[N, 5, 7\].*\[N, 5, 6\]"):
        replay.add({"frames": torch.zeros(2, 5, 7, dtype=torch.uint8), "reward": torch.zeros(2, 5)})
    with pytest.raises(ValueError, match="'reward'.*float64"):
        replay.add(
            {
                "frames": torch.zeros(2, 5, 6, dtype=torch.uint8),
                "reward": torch.zeros(2, 5, dtype=torch.float64),
            }
        )
    with pytest.raises(ValueError, match="'reward'.*3 sequences.*'frames'"):
        replay.add({"frames": torch.zeros(2, 5, 6, dtype=torch.uint8), "reward": torch.zeros(3, 5)})
    with pytest.raises(ValueError, match="fields.*'action'"):
        replay.add({"frames": torch.zeros(2, 5, 6, dtype=torch.uint8), "action": torch.zeros(2)})
    with pytest.raises(ValueError, match="priorities"):
        replay.add(
            {"frames": torch.zeros(2, 5, 6, dtype=torch.uint8), "reward": torch.zeros(2, 5)},
            priorities=torch.ones(3),
        )
    with pytest.raises(ValueError, match="'scalar'"):
        PrioritizedReplay(8, alpha=0.6, beta=0.4, device="cpu").add({"scalar": torch.tensor(1.0)})
    with pytest.raises(ValueError, match="same length"):
        replay.update_priorities(torch.tensor([0, 1]), torch.ones(3))
    assert replay.size == 2  # nothing half-written by the rejected adds


def test_sample_on_empty_buffer_raises():
    replay = PrioritizedReplay(8, alpha=0.6, beta=0.4, device="cpu")
    with pytest.raises(ValueError, match="empty"):
        replay.sample(4)


def test_estimate_bytes_counts_storage_and_priorities():
    example = {
        "frames": torch.empty(24, 84, 84, dtype=torch.uint8, device="meta"),
        "reward": torch.empty(20, dtype=torch.float32, device="meta"),
    }
    assert estimate_bytes(example, 10) == 10 * (24 * 84 * 84 + 20 * 4 + 4)


def test_check_fits_reports_the_numbers_for_an_absurd_capacity():
    free = _mem_available_bytes()
    if free is None:
        pytest.skip("no /proc/meminfo on this system")
    example = {"frames": torch.empty(24, 84, 84, dtype=torch.uint8, device="meta")}
    capacity = 10**9
    needed = estimate_bytes(example, capacity)
    with pytest.raises(ReplayCapacityError, match=f"needs {needed} bytes") as caught:
        check_fits(needed, "cpu", capacity=capacity)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.needed_bytes == needed
    assert f"{error.free_bytes} bytes" in str(error)
    assert f"at most {error.suggested_capacity} sequences" in str(error)
    per_sequence = needed // capacity
    assert 0 < error.suggested_capacity * per_sequence <= 0.9 * error.free_bytes
    check_fits(estimate_bytes(example, error.suggested_capacity), "cpu")  # the advice fits


# ---------------------------------------------------------------------------- no host sync
SYNCING_METHODS = [
    "item",
    "cpu",
    "tolist",
    "numpy",
    "__int__",
    "__float__",
    "__bool__",
    "__index__",
]


@pytest.mark.parametrize("device", DEVICES)
def test_hot_path_never_syncs_with_the_host(device, monkeypatch):
    torch.manual_seed(0)
    replay = PrioritizedReplay(16, alpha=0.6, beta=0.4, device=device)
    host_batch = {"frames": torch.zeros(6, 3, 4, dtype=torch.uint8), "reward": torch.randn(6, 3)}
    device_batch = {key: value.to(device) for key, value in host_batch.items()}
    priorities = torch.rand(6, device=device)

    def forbidden(*args, **kwargs):
        raise AssertionError("host sync on the replay hot path")

    with monkeypatch.context() as patch:
        for name in SYNCING_METHODS:
            patch.setattr(torch.Tensor, name, forbidden)
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(4):  # wraps the ring
                replay.add(device_batch)
                replay.add(host_batch, priorities=priorities)
                sample = replay.sample(8)
                replay.update_priorities(sample.indices, sample.weights + 0.5)
        finally:
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
    assert replay.size == 16


def test_adding_a_tensor_that_requires_grad_stores_plain_data():
    replay = PrioritizedReplay(4, alpha=0.6, beta=0.4, device="cpu")
    logits = torch.randn(2, 3, requires_grad=True)
    replay.add({"logits": logits * 2})
    sample = replay.sample(4)
    assert not sample.batch["logits"].requires_grad
    assert sample.batch["logits"].grad_fn is None
