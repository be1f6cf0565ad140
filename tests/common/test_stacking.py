"""stack_frames against a loop written straight from its definition."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.stacking import stack_frames, stack_newest


def reference(frames: np.ndarray, first: np.ndarray, stack: int) -> np.ndarray:
    n = frames.shape[0] - stack + 1
    out = np.zeros((n, frames.shape[1], stack, *frames.shape[2:]), frames.dtype)
    for t in range(n):
        for b in range(frames.shape[1]):
            newest = t + stack - 1
            for j in range(stack):
                i = t + j
                # frame i is kept unless an episode starts after it, up to the newest frame
                if not any(first[k, b] for k in range(i + 1, newest + 1)):
                    out[t, b, j] = frames[i, b]
    return out


@pytest.mark.parametrize(
    "n,b,stack,p", [(1, 1, 4, 0.3), (20, 3, 4, 0.2), (7, 2, 2, 0.5), (5, 4, 1, 0.5)]
)
def test_matches_reference(n, b, stack, p):
    rng = np.random.default_rng(n * 100 + b)
    frames = rng.integers(1, 256, (n + stack - 1, b, 6, 5), dtype=np.uint8)
    first = rng.random((n + stack - 1, b)) < p
    got = stack_frames(torch.from_numpy(frames), torch.from_numpy(first), stack)
    np.testing.assert_array_equal(got.numpy(), reference(frames, first, stack))


@pytest.mark.parametrize("stack,p", [(4, 0.0), (4, 0.3), (4, 0.7), (2, 0.5), (1, 0.5)])
def test_stack_newest_matches_reference(stack, p):
    rng = np.random.default_rng(int(p * 10) + stack)
    for _ in range(50):
        b = int(rng.integers(1, 9))
        frames = rng.integers(1, 256, (stack, b, 6, 5), dtype=np.uint8)
        first = rng.random((stack, b)) < p
        out = np.full((b, stack, 6, 5), 7, np.uint8)  # stale contents must be overwritten
        got = stack_newest(frames, first, out=out)
        assert got is out
        np.testing.assert_array_equal(got, reference(frames, first, stack)[0])
        np.testing.assert_array_equal(stack_newest(frames, first), got)


def test_episode_start_zeroes_older_frames():
    frames = torch.arange(1, 8, dtype=torch.uint8).view(7, 1, 1, 1).expand(7, 1, 2, 2)
    first = torch.zeros(7, 1, dtype=torch.bool)
    first[4] = True  # frame 4 starts an episode
    out = stack_frames(frames, first)[:, 0, :, 0, 0]  # [4, 4]
    assert out.tolist() == [[1, 2, 3, 4], [0, 0, 0, 5], [0, 0, 5, 6], [0, 5, 6, 7]]


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="first"):
        stack_frames(torch.zeros(6, 2, 3, 3), torch.zeros(6, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least 4"):
        stack_frames(torch.zeros(3, 2, 3, 3), torch.zeros(3, 2, dtype=torch.bool))
