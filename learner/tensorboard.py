"""The run's curves as TensorBoard scalars, with `--tensorboard`: RUN/tensorboard/, read by
`tensorboard --logdir RUN/tensorboard`.

Each record the learner makes (learner/telemetry.py) becomes one scalar per gauge that declares a
TensorBoard `tag` in common/metrics.py, at the run's env frames as the step, so that curves of
runs of different speeds line up. TensorBoard is an optional extra (`make install-tensorboard`):
imported only when the flag is on; a learner asked for it without the package refuses to start.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from common.metrics import Figure, LearnerMetrics

INSTALL = "pip install -e '.[tensorboard]' (or make install-tensorboard)"


def problems() -> list[str]:
    """Why TensorBoard scalars cannot be written here (empty: they can)."""
    try:
        import torch.utils.tensorboard  # noqa: F401  (needs the tensorboard package)
    except ImportError as exc:
        return [f"--tensorboard needs the tensorboard package ({exc}); install it: {INSTALL}"]
    return []


def scalars(numbers: dict[str, Figure]) -> dict[str, float]:
    """The numbers of a record (`LearnerMetrics.record`) as {tag: value}, under the tags their
    metrics declare; None is left out."""
    out = {}
    for m in LearnerMetrics.TABLE:
        if not m.tag or m.attr not in numbers:
            continue
        value = numbers[m.attr]
        if isinstance(value, Mapping):
            label = m.labels[0]
            out |= {m.tag.format(**{label: k}): float(v) for k, v in value.items() if v is not None}
        elif value is not None:
            out[m.tag] = float(value)
    return out


class ScalarLog:
    """Writes records as scalars under `directory` (created), step = the run's env frames."""

    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter  # the optional extra: only when asked

        directory.mkdir(parents=True, exist_ok=True)
        # flushed every 10 s for a TensorBoard watching the run, and on close
        self._writer = SummaryWriter(log_dir=str(directory), flush_secs=10)

    def write(self, numbers: dict[str, Figure], time_s: float) -> None:
        step = int(numbers["run_env_frames"])  # type: ignore[arg-type]
        for tag, value in scalars(numbers).items():
            self._writer.add_scalar(tag, value, global_step=step, walltime=time_s)

    def close(self) -> None:
        self._writer.close()
