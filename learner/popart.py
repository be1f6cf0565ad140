"""PopArt: adaptive normalisation of value targets that preserves the value head's outputs.

van Hasselt et al. 2016, "Learning values across many orders of magnitude" (Alg. 1), as the IMPALA
authors use it (Hessel et al. 2019, "Multi-task Deep RL with PopArt", Eq. 8-10). The value head
predicts a normalised value n(x); the value is V(x) = sigma n(x) + mu, where mu and nu are
exponential moving averages of the targets and their squares and sigma = sqrt(nu - mu^2). After
each change of (mu, sigma) the head's last layer is rescaled so that V(x) is unchanged ("Preserving
Outputs Precisely"); the value loss is taken on normalised targets ("Adaptively Rescaling
Targets"), so its scale no longer depends on the reward's.

Pure functions of tensors plus a small holder that the learner checkpoints.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

BETA = 3e-3  # each optimizer step moves the moments 0.3% of the way to its targets' moments


class Stats(NamedTuple):
    mean: Tensor  # [] mu, first moment of the value targets
    mean_sq: Tensor  # [] nu, second moment

    def sigma(self, min_sigma: float) -> Tensor:
        """[] sqrt(nu - mu^2), floored at min_sigma (targets that never vary)."""
        return (self.mean_sq - self.mean**2).clamp(min=min_sigma**2).sqrt()


def initial_stats(device: torch.device | str = "cpu") -> Stats:
    """mu = 0, sigma = 1: before any update the head's outputs are the values themselves."""
    return Stats(torch.zeros((), device=device), torch.ones((), device=device))


def update_stats(stats: Stats, targets: Tensor, beta: float) -> Stats:
    """Move (mu, nu) a step beta towards the batch's mean of targets and of their squares.

    Args:
        targets: [T, B] value targets (v-trace v_s), any shape.
        beta: step size in (0, 1].
    """
    if not 0 < beta <= 1:
        raise ValueError(f"beta must be in (0, 1], got {beta}")
    t = targets.detach().float()
    return Stats(
        (1 - beta) * stats.mean + beta * t.mean(), (1 - beta) * stats.mean_sq + beta * (t**2).mean()
    )


def preserve_outputs(
    weight: Tensor, bias: Tensor, old: Stats, new: Stats, min_sigma: float
) -> tuple[Tensor, Tensor]:
    """The value layer's (weight [1, F], bias [1]) rescaled so sigma n(x) + mu is unchanged:
    w' = sigma / sigma' w, b' = (sigma b + mu - mu') / sigma' (van Hasselt et al. 2016, Alg. 1)."""
    s_old, s_new = old.sigma(min_sigma), new.sigma(min_sigma)
    return weight * (s_old / s_new), (s_old * bias + old.mean - new.mean) / s_new


def normalize(values: Tensor, stats: Stats, min_sigma: float) -> Tensor:
    """(v - mu) / sigma."""
    return (values - stats.mean) / stats.sigma(min_sigma)


def denormalize(normalized: Tensor, stats: Stats, min_sigma: float) -> Tensor:
    """sigma n + mu."""
    return normalized * stats.sigma(min_sigma) + stats.mean


class PopArt:
    """The learner's running statistics and the value layer they rescale."""

    def __init__(
        self,
        layer: nn.Linear,
        beta: float = BETA,
        min_sigma: float = 1e-4,
        device: torch.device | str = "cpu",
    ):
        if layer.out_features != 1:
            raise ValueError(f"PopArt rescales a one-output value layer, got {layer.out_features}")
        if not 0 < beta <= 1:
            raise ValueError(f"popart beta must be in (0, 1], got {beta}")
        self.layer = layer
        self.beta = beta
        self.min_sigma = min_sigma
        self.stats = initial_stats(device)

    def denormalize(self, normalized: Tensor) -> Tensor:
        return denormalize(normalized, self.stats, self.min_sigma)

    def scale(self) -> float:
        """sigma: reward units per unit of the head's output."""
        return float(self.stats.sigma(self.min_sigma))

    def normalize(self, values: Tensor) -> Tensor:
        return normalize(values, self.stats, self.min_sigma)

    @torch.no_grad()
    def update(self, targets: Tensor) -> None:
        """New statistics from `targets`, and the value layer rescaled to keep its outputs."""
        new = update_stats(self.stats, targets, self.beta)
        w, b = preserve_outputs(self.layer.weight, self.layer.bias, self.stats, new, self.min_sigma)
        self.layer.weight.copy_(w)
        self.layer.bias.copy_(b)
        self.stats = new

    def state_dict(self) -> dict[str, float]:
        return {"mean": float(self.stats.mean), "mean_sq": float(self.stats.mean_sq)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        device = self.stats.mean.device
        self.stats = Stats(
            torch.tensor(float(state["mean"]), device=device),
            torch.tensor(float(state["mean_sq"]), device=device),
        )
