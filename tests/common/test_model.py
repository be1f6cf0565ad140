from __future__ import annotations

import pytest
import torch

from common.model import (
    INPUT_NORM_STD_FLOOR,
    ActorCritic,
    DeviceUnavailable,
    FormerNetwork,
    ModelSpec,
    Moments,
    merge_moments,
    resolve_device,
)


@pytest.mark.parametrize("arch", ["small", "nature", "resnet"])
def test_shapes_and_dtypes(arch):
    model = ActorCritic(ModelSpec(arch=arch, num_actions=5))
    out = model(torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8))
    assert out.logits.shape == (3, 5) and out.value.shape == (3,)
    assert out.logits.dtype == torch.float32
    out.value.sum().backward()  # trainable end to end


@pytest.mark.parametrize(("core", "width"), [("none", 0), ("lstm", 2 * 64), ("gru", 64)])
def test_a_recurrent_core_takes_and_returns_its_state(core, width):
    model = ActorCritic(ModelSpec(num_actions=5, core=core, core_size=64))
    assert model.spec.state_size == width
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    out = model(x)  # no state: zeros, an episode's first step
    assert out.state.shape == (3, width)
    again = model(x, state=out.state)
    if core == "none":
        assert model.core is None and again.state.shape == (3, 0)
        torch.testing.assert_close(again.logits, out.logits)
    else:  # the same frames after another history give other outputs
        assert not torch.allclose(again.logits, out.logits)
        (again.value.sum() + again.state.sum()).backward()
        assert model.core.weight_hh.grad.abs().sum() > 0  # the state carries gradient


def test_a_bad_core_is_refused():
    with pytest.raises(ValueError, match="core must be one of.*core_size must be >= 1"):
        ActorCritic(ModelSpec(core="rnn", core_size=0))


def test_uint8_and_float_inputs_agree():
    model = ActorCritic(ModelSpec())
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    a, b = model(x), model(x.float() / 255)
    torch.testing.assert_close(a.logits, b.logits)


def test_bad_spec_lists_every_problem():
    with pytest.raises(ValueError, match="arch.*num_actions"):
        ActorCritic(ModelSpec(arch="lstm", num_actions=0))


def _reference_hidden(model: ActorCritic, x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """The trunk's hidden layer written out: ReLU(W conv(x) + b + E[last])."""
    trunk = model.trunk
    pixels = x.float() / 255
    pixels = (pixels - model.input_mean) / (model.input_var.sqrt() + INPUT_NORM_STD_FLOOR)
    z = trunk.fc(trunk.convs(pixels))
    return torch.relu(z + model.last_action.weight[last])


def test_previous_action_enters_the_hidden_layer():
    torch.manual_seed(0)
    model = ActorCritic(ModelSpec(num_actions=5))
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    last = torch.tensor([0, 4, 5])  # 5 = none
    fresh = model(x, last)
    torch.testing.assert_close(fresh.logits, model(x).logits)  # zero at start: ignored
    torch.nn.init.normal_(model.last_action.weight)
    out = model(x, last)
    h = _reference_hidden(model, x, last)
    torch.testing.assert_close(out.logits, model.policy(h))
    torch.testing.assert_close(out.value, model.value(h).squeeze(-1))
    none = model(x, torch.full((3,), 5))
    torch.testing.assert_close(model(x).logits, none.logits)  # no argument = none
    assert not torch.allclose(out.logits, none.logits)


def test_saved_specs_load_and_those_of_a_former_network_are_refused():
    assert ModelSpec.from_dict(ModelSpec().to_wire()) == ModelSpec()
    previous = {**ModelSpec(core="gru").to_wire(), "last_action": True, "input_norm": True}
    assert ModelSpec.from_dict(previous) == ModelSpec(core="gru")  # the switches named as on
    for off in ("last_action", "input_norm"):
        with pytest.raises(FormerNetwork, match="its network lacks"):
            ModelSpec.from_dict({**previous, off: False})
    before_both = {"arch": "small", "num_actions": 7, "stack": 4, "frame_size": 84}
    with pytest.raises(FormerNetwork, match="previous action as an input and input norm"):
        ModelSpec.from_dict(before_both)
    with_both = {**before_both, "last_action": True, "input_norm": True}  # before the core
    assert ModelSpec.from_dict(with_both) == ModelSpec()
    one_head = {**ModelSpec(core="gru").to_wire(), "value_heads": 1}  # per-level PopArt's release
    assert ModelSpec.from_dict(one_head) == ModelSpec(core="gru")
    with pytest.raises(FormerNetwork, match="a value head for each of its 4 levels, per-level"):
        ModelSpec.from_dict({**one_head, "value_heads": 4})


# ---- input normalisation ---------------------------------------------------------------------


def _moments(x: torch.Tensor) -> Moments:
    x = x.double()
    return Moments(
        torch.tensor(float(x.shape[0])),
        x.mean(0, keepdim=True),
        x.var(0, unbiased=False, keepdim=True),
    )


def test_merged_moments_equal_those_of_the_concatenation():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(37, 1, 5, 5, generator=g, dtype=torch.float64)
    b = torch.rand(11, 1, 5, 5, generator=g, dtype=torch.float64) * 3 + 1
    got = merge_moments(_moments(a), _moments(b), max_count=1e9)
    want = _moments(torch.cat([a, b]))
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y)


def test_moments_past_the_cap_become_an_exponential_average():
    a = _moments(torch.zeros(100, 1, 2, 2))
    b = _moments(torch.ones(10, 1, 2, 2))
    got = merge_moments(a, b, max_count=50.0)  # a counts as 40 frames: the batch weighs 10/50
    assert float(got.count) == 50.0
    torch.testing.assert_close(got.mean, torch.full((1, 1, 2, 2), 0.2, dtype=torch.float64))
    # a batch larger than the cap replaces the moments
    big = merge_moments(a, _moments(torch.ones(80, 1, 2, 2)), max_count=50.0)
    torch.testing.assert_close(big.mean, torch.ones(1, 1, 2, 2, dtype=torch.float64))


def test_observed_frames_standardise_the_input_and_travel_with_the_weights():
    torch.manual_seed(1)
    model = ActorCritic(ModelSpec(num_actions=5))
    frames = torch.randint(0, 256, (6, 3, 84, 84), dtype=torch.uint8)
    frames[:, :, :10] = 200  # a static band: variance 0, held off by the floor
    model.observe_frames(frames)
    pixels = frames.reshape(-1, 1, 84, 84).float() / 255
    torch.testing.assert_close(model.input_mean, pixels.mean(0, keepdim=True))
    torch.testing.assert_close(model.input_var, pixels.var(0, unbiased=False, keepdim=True))
    assert float(model.input_count) == 18
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    last = torch.tensor([5, 5])
    torch.testing.assert_close(
        model(x, last).logits, model.policy(_reference_hidden(model, x, last))
    )
    copy = ActorCritic(ModelSpec(num_actions=5))  # an actor's model, loaded from the broadcast
    copy.load_state_dict(model.state_dict())
    torch.testing.assert_close(copy(x).logits, model(x).logits)


def test_device_auto_is_cuda_when_torch_sees_it_and_cuda_without_it_names_the_flag():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        assert resolve_device("cuda:0") == torch.device("cuda:0")
    else:
        with pytest.raises(DeviceUnavailable, match=r"--device cuda:0 .*pass --device cpu"):
            resolve_device("cuda:0")


def test_a_cuda_index_torch_does_not_see_or_no_device_name_is_refused_saying_what_to_pass():
    count = torch.cuda.device_count()
    seen = "no CUDA device" if count == 0 else f"{count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    with pytest.raises(DeviceUnavailable, match=rf"--device cuda:{count} asked for, .*{seen}"):
        resolve_device(f"cuda:{count}")
    with pytest.raises(DeviceUnavailable, match=r"must be auto, cpu, cuda or cuda:N.*'cuda:x'"):
        resolve_device("cuda:x")
