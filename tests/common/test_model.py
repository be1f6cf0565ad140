from __future__ import annotations

import pytest
import torch

from common.model import ActorCritic, ModelSpec


@pytest.mark.parametrize("arch", ["small", "nature", "resnet"])
def test_shapes_and_dtypes(arch):
    model = ActorCritic(ModelSpec(arch=arch, num_actions=5))
    out = model(torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8))
    assert out.logits.shape == (3, 5) and out.value.shape == (3,)
    assert out.logits.dtype == torch.float32
    out.value.sum().backward()  # trainable end to end


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
    z = trunk.fc(trunk.convs(x.float() / 255))
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


def test_a_spec_without_previous_action_ignores_it():
    model = ActorCritic(ModelSpec(num_actions=5, last_action=False))
    assert model.last_action is None
    assert not any("last_action" in name for name, _ in model.named_parameters())
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(model(x, torch.tensor([1, 2])).logits, model(x).logits)


def test_specs_saved_before_the_previous_action_load_without_it():
    old = {"arch": "small", "num_actions": 7, "stack": 4, "frame_size": 84}
    assert ModelSpec.from_dict(old) == ModelSpec(last_action=False)
    assert ModelSpec.from_dict(ModelSpec().to_wire()) == ModelSpec()
