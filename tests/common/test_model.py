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
