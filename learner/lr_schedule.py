"""The learning rate over a run: constant, or annealed linearly over a planned number of env frames
(IMPALA's schedule, there to zero over the whole run). Pure; the train loop applies it before each
update from the run's env frames so far, which a resumed run carries on from its checkpoint.
"""

from __future__ import annotations


def learning_rate(base: float, env_frames: int, anneal_frames: int, final_fraction: float) -> float:
    """The rate after `env_frames` frames: `base` at frame 0, falling linearly to
    `base * final_fraction` at `anneal_frames` and held there; `base` throughout when
    `anneal_frames` is 0."""
    if anneal_frames <= 0:
        return base
    done = min(max(env_frames, 0) / anneal_frames, 1.0)
    return base * (1.0 - done * (1.0 - final_fraction))
