"""Return normalisation: value targets standardised by the running mean and variance of every
target seen so far, as Sample Factory's APPO does (`normalize_returns`, after rl_games).

The value head predicts a normalised value n(x); the value is V(x) = sigma clip(n(x)) + mu. Unlike
PopArt (learner/popart.py) the head is not rescaled when (mu, sigma) move, so V(x) drifts with
them; the statistics are all-history moments (Chan et al.'s pairwise merge, starting from one
pseudo-target of mean 0 and variance 1), which move less and less as the count grows. Normalised
targets are clipped to +-`clip` standard deviations, and so are the head's outputs before they are
turned back into reward units.

The update folds in the targets of each optimizer step, as it moves PopArt's moments, so a
batch's targets (recomputed with the current values at each pass) count once per pass.

The same interface as PopArt (`normalize`, `denormalize`, `update`, `scale`, state dicts), so the
update treats the two alike.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from common.model import Moments, merge_moments


def initial_moments(device: torch.device | str = "cpu") -> Moments:
    """mu = 0, variance 1, count 1 (float64): before any target, values pass through unchanged."""
    one = torch.ones((), dtype=torch.float64, device=device)
    return Moments(one.clone(), torch.zeros_like(one), one)


def merge(moments: Moments, targets: Tensor) -> Moments:
    """The moments of everything seen so far and `targets` (any shape) together: the input
    normalisation's pairwise merge (common.model.merge_moments), never capped."""
    t = targets.detach().to(torch.float64).flatten()
    if t.numel() == 0:
        return moments
    batch = Moments(t.new_tensor(float(t.numel())), t.mean(), t.var(unbiased=False))
    return merge_moments(moments, batch, max_count=math.inf)


class ReturnNorm:
    """The learner's running moments of the value targets."""

    KEY = "return_norm"  # of its state in a checkpoint
    NAME = "return normalisation"
    FLAGS = "--no-popart --return-norm"  # that ask for it

    def __init__(self, clip: float = 5.0, eps: float = 1e-5, device: torch.device | str = "cpu"):
        if clip <= 0:
            raise ValueError(f"clip must be > 0, got {clip}")
        self.clip = clip
        self.eps = eps
        self.moments = initial_moments(device)

    def _mean_sigma(self) -> tuple[Tensor, Tensor]:
        m = self.moments
        return m.mean.float(), (m.var + self.eps).sqrt().float()

    def scale(self) -> float:
        """sigma: reward units per unit of the head's output."""
        return float(self._mean_sigma()[1])

    def normalize(self, values: Tensor) -> Tensor:
        """clip((v - mu) / sigma) to +-clip."""
        mean, sigma = self._mean_sigma()
        return ((values - mean) / sigma).clamp(-self.clip, self.clip)

    def denormalize(self, normalized: Tensor) -> Tensor:
        """sigma clip(n) + mu."""
        mean, sigma = self._mean_sigma()
        return normalized.clamp(-self.clip, self.clip) * sigma + mean

    @torch.no_grad()
    def update(self, targets: Tensor) -> None:
        """Fold `targets` into the moments; the value head is left as it is."""
        self.moments = merge(self.moments, targets)

    def state_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.moments._asdict().items()}

    def load_state_dict(self, state: dict[str, float]) -> None:
        device = self.moments.mean.device
        self.moments = Moments(
            *(
                torch.tensor(float(state[k]), dtype=torch.float64, device=device)
                for k in Moments._fields
            )
        )
