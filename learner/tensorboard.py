"""The run's curves as TensorBoard scalars, with `--tensorboard`: RUN/tensorboard/, read by
`tensorboard --logdir RUN/tensorboard`.

Each row the learner appends to RUN/metrics.jsonl (every ~2 s, learner/telemetry.py) becomes one
scalar per figure below, at the run's env frames as the step, so that curves of runs of different
speeds line up (TensorBoard's "relative" and "wall" axes give the time):

    level/<level>/progress       mean progress of the level's newest --level-window episodes
    level/<level>/flag_rate      their flag rate
    level/<level>/weight         the probability that actors draw the level
    level/<level>/advantage_std  the std of its advantages in the last update, before normalising
    level/<level>/entropy        the policy's mean entropy on its steps in the last update
    levels/mean_progress         the mean over the set's levels, each alike (those with a figure)
    levels/mean_flag_rate
    episodes/mean_max_x          over the episodes of the last record, all levels together
    episodes/mean_return, episodes/flag_rate
    throughput/agent_steps_per_s
    loss/total, loss/policy, loss/baseline, policy/entropy
    optimizer/learning_rate      the rate of the last update (falls with --lr-anneal-frames)

TensorBoard is an optional extra (`pip install -e '.[tensorboard]'`, `make install-tensorboard`):
`tensorboard` is imported only when the flag is on, and a learner asked for it without the package
refuses to start (`problems`). The writer is torch's `SummaryWriter`, which needs that package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

INSTALL = "pip install -e '.[tensorboard]' (or make install-tensorboard)"

# metrics.jsonl key -> TensorBoard tag, for the figures that are one number per row
ROW_TAGS = {
    "mean_max_x": "episodes/mean_max_x",
    "mean_return": "episodes/mean_return",
    "flag_rate": "episodes/flag_rate",
    "agent_steps_per_s": "throughput/agent_steps_per_s",
    "total_loss": "loss/total",
    "pg_loss": "loss/policy",
    "baseline_loss": "loss/baseline",
    "entropy": "policy/entropy",
    "learning_rate": "optimizer/learning_rate",
}
LEVEL_TAGS = {
    "progress": "progress",
    "flag_rate": "flag_rate",
    "weight": "weight",
    "advantage_std": "advantage_std",
    "entropy": "entropy",
}


def problems() -> list[str]:
    """Why TensorBoard scalars cannot be written here (empty: they can)."""
    try:
        import torch.utils.tensorboard  # noqa: F401  (needs the tensorboard package)
    except ImportError as exc:
        return [f"--tensorboard needs the tensorboard package ({exc}); install it: {INSTALL}"]
    return []


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """A metrics.jsonl row's figures as {tag: value}; figures that are null (no episode yet, a
    level of unknown length) are left out."""
    out = {tag: float(row[key]) for key, tag in ROW_TAGS.items() if _number(row.get(key))}
    levels: dict[str, dict[str, Any]] = row.get("levels") or {}
    for level, figures in levels.items():
        for key, tag in LEVEL_TAGS.items():
            if _number(figures.get(key)):
                out[f"level/{level}/{tag}"] = float(figures[key])
    for key in ("progress", "flag_rate"):
        values = [float(f[key]) for f in levels.values() if _number(f.get(key))]
        if values:
            out[f"levels/mean_{key}"] = sum(values) / len(values)
    return out


class ScalarLog:
    """Writes metrics.jsonl rows as scalars under `directory` (created), step = env frames."""

    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter  # the optional extra: only when asked

        directory.mkdir(parents=True, exist_ok=True)
        # flushed every 10 s for a TensorBoard watching the run, and on close
        self._writer = SummaryWriter(log_dir=str(directory), flush_secs=10)

    def write(self, row: dict[str, Any]) -> None:
        step, wall = int(row["env_frames"]), row.get("time")
        for tag, value in scalars(row).items():
            self._writer.add_scalar(tag, value, global_step=step, walltime=wall)

    def close(self) -> None:
        self._writer.close()
