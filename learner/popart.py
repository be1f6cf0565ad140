"""PopArt: adaptive normalisation of value targets that preserves the value head's outputs, one
normalisation per level when the value head has one output per level (multi-task PopArt).

van Hasselt et al. 2016, "Learning values across many orders of magnitude" (Alg. 1), as the IMPALA
authors use it (Hessel et al. 2019, "Multi-task Deep RL with PopArt", Eq. 8-10). The value head
predicts a normalised value n_l(x) for each of its L outputs; the value of a step of level l is
V(x) = sigma_l n_l(x) + mu_l, where mu_l and nu_l are exponential moving averages of the level's
targets and their squares and sigma_l = sqrt(nu_l - mu_l^2). After each change of (mu, sigma) the
head's rows are rescaled so that every V(x) is unchanged ("Preserving Outputs Precisely"); the
value loss is taken on normalised targets ("Adaptively Rescaling Targets"), so its scale no longer
depends on the reward's, and with a head per level no level's returns set another level's scale
(Hessel et al.'s reason for one normalisation per task). L = 1 is the single PopArt of the paper.

A step's level is its index in the run's set, `level` [same shape as the values], 0 for L = 1.
Pure functions of tensors plus a small holder that the learner checkpoints.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

BETA = 3e-3  # each optimizer step moves the moments 0.3% of the way to its targets' moments


class Stats(NamedTuple):
    mean: Tensor  # [L] mu, first moment of each level's value targets
    mean_sq: Tensor  # [L] nu, second moment

    def sigma(self, min_sigma: float) -> Tensor:
        """[L] sqrt(nu - mu^2), floored at min_sigma (targets that never vary)."""
        return (self.mean_sq - self.mean**2).clamp(min=min_sigma**2).sqrt()


def initial_stats(levels: int = 1, device: torch.device | str = "cpu") -> Stats:
    """mu = 0, sigma = 1: before any update the head's outputs are the values themselves."""
    return Stats(torch.zeros(levels, device=device), torch.ones(levels, device=device))


def update_stats(stats: Stats, targets: Tensor, level: Tensor | None, beta: float) -> Stats:
    """Move each level's (mu, nu) a step beta towards the mean of its targets in the batch and of
    their squares; a level without a target in the batch keeps its moments.

    Args:
        targets: value targets (v-trace v_s), any shape, e.g. [T, B].
        level: the level index of each target, targets' shape (None: all level 0).
        beta: step size in (0, 1].
    """
    if not 0 < beta <= 1:
        raise ValueError(f"beta must be in (0, 1], got {beta}")
    t = targets.detach().float().reshape(-1)  # [n]
    index = torch.zeros_like(t, dtype=torch.long) if level is None else level.reshape(-1).long()
    L = stats.mean.shape[0]
    count = torch.zeros(L, device=t.device).index_add(0, index, torch.ones_like(t))  # [L]
    sums = torch.zeros(L, device=t.device).index_add(0, index, t)
    squares = torch.zeros(L, device=t.device).index_add(0, index, t * t)
    step = beta * (count > 0).float()  # [L]: no step for a level the batch does not hold
    n = count.clamp(min=1.0)
    return Stats(
        (1 - step) * stats.mean + step * sums / n, (1 - step) * stats.mean_sq + step * squares / n
    )


def preserve_outputs(
    weight: Tensor, bias: Tensor, old: Stats, new: Stats, min_sigma: float
) -> tuple[Tensor, Tensor]:
    """The value layer's (weight [L, F], bias [L]) rescaled row by row so that sigma_l n_l(x) +
    mu_l is unchanged: w' = sigma / sigma' w, b' = (sigma b + mu - mu') / sigma' (van Hasselt et
    al. 2016, Alg. 1)."""
    s_old, s_new = old.sigma(min_sigma), new.sigma(min_sigma)  # [L]
    return weight * (s_old / s_new)[:, None], (s_old * bias + old.mean - new.mean) / s_new


def _at(values: Tensor, level: Tensor | None) -> Tensor:
    """values [L] at each element's level (level 0 everywhere for None or L = 1: one
    normalisation for a whole set)."""
    return values[0] if level is None or values.shape[0] == 1 else values[level]


def normalize(
    values: Tensor, stats: Stats, min_sigma: float, level: Tensor | None = None
) -> Tensor:
    """(v - mu_l) / sigma_l at each element's level."""
    return (values - _at(stats.mean, level)) / _at(stats.sigma(min_sigma), level)


def denormalize(
    normalized: Tensor, stats: Stats, min_sigma: float, level: Tensor | None = None
) -> Tensor:
    """sigma_l n + mu_l at each element's level."""
    return normalized * _at(stats.sigma(min_sigma), level) + _at(stats.mean, level)


class PopArt:
    """The learner's running statistics and the value layer they rescale: one normalisation per
    output of the layer (per level, or one for the whole set)."""

    def __init__(
        self,
        layer: nn.Linear,
        beta: float = BETA,
        min_sigma: float = 1e-4,
        device: torch.device | str = "cpu",
    ):
        if not 0 < beta <= 1:
            raise ValueError(f"popart beta must be in (0, 1], got {beta}")
        self.layer = layer
        self.beta = beta
        self.min_sigma = min_sigma
        self.stats = initial_stats(layer.out_features, device)

    @property
    def levels(self) -> int:
        """L: the normalisations, one per output of the value layer."""
        return self.stats.mean.shape[0]

    def denormalize(self, normalized: Tensor, level: Tensor | None = None) -> Tensor:
        return denormalize(normalized, self.stats, self.min_sigma, level)

    def normalize(self, values: Tensor, level: Tensor | None = None) -> Tensor:
        return normalize(values, self.stats, self.min_sigma, level)

    def scale(self) -> float:
        """sigma (the mean over the levels with a normalisation each): reward units per unit of
        the head's output."""
        return float(self.stats.sigma(self.min_sigma).mean())

    @torch.no_grad()
    def update(self, targets: Tensor, level: Tensor | None = None) -> None:
        """New statistics from `targets` (at their `level`s), and the value layer rescaled to keep
        its outputs."""
        new = update_stats(self.stats, targets, level if self.levels > 1 else None, self.beta)
        w, b = preserve_outputs(self.layer.weight, self.layer.bias, self.stats, new, self.min_sigma)
        self.layer.weight.copy_(w)
        self.layer.bias.copy_(b)
        self.stats = new

    def state_dict(self) -> dict[str, float | list[float]]:
        """Floats for one normalisation (as checkpoints have always held it), lists for several."""
        mean, mean_sq = self.stats.mean.tolist(), self.stats.mean_sq.tolist()
        if self.levels == 1:
            return {"mean": mean[0], "mean_sq": mean_sq[0]}
        return {"mean": mean, "mean_sq": mean_sq}

    def load_state_dict(self, state: dict[str, float | list[float]]) -> None:
        device = self.stats.mean.device
        mean = torch.tensor(state["mean"], dtype=torch.float32, device=device).reshape(-1)
        mean_sq = torch.tensor(state["mean_sq"], dtype=torch.float32, device=device).reshape(-1)
        if mean.shape[0] != self.levels or mean_sq.shape[0] != self.levels:
            raise ValueError(
                f"the saved PopArt has {mean.shape[0]} normalisations, this value head "
                f"{self.levels}: resume with the network the checkpoint was trained with"
            )
        self.stats = Stats(mean, mean_sq)
