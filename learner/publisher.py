"""Weight broadcasts off the train loop: the loop offers a snapshot after an update, a thread
serialises it and hands the message to the IO thread (`Ingest.publish`).

Only the newest snapshot matters to the actors: one offered while the thread is still busy with
the previous one replaces any that is waiting, so a slow serialisation never queues stale
weights nor holds up training.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import torch

from common import wire


class Publisher:
    def __init__(
        self,
        send: Callable[[list[bytes]], None],
        model_spec: dict,
        dtype: str,
        level_weights: Callable[[], dict[str, float]] = dict,
        spent: Callable[[float], object] = lambda cpu_seconds: None,
    ):
        """`level_weights()` gives the level schedule's weights sent with each version;
        `spent(s)` is told the CPU seconds this thread took to prepare each message."""
        self.send = send  # Ingest.publish: the frames of one message
        self.level_weights = level_weights
        self.spent = spent
        self.model_spec = model_spec
        self.dtype = np.float16 if dtype == "float16" else np.float32
        self._slot: tuple[int, dict[str, torch.Tensor], set[str]] | None = None
        self._cond = threading.Condition()
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self.thread.start()

    def offer(self, version: int, model: torch.nn.Module) -> None:
        snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}  # on-device copy
        # buffers (the input normaliser's moments and frame count) stay float32 on any wire dtype:
        # a count past 65,504 is inf in float16
        buffers = {name for name, _ in model.named_buffers()}
        with self._cond:
            self._slot = (version, snapshot, buffers)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._slot is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                version, snapshot, buffers = self._slot
                self._slot = None
            t0 = time.thread_time()
            tensors = {
                k: v.cpu().numpy().astype(np.float32 if k in buffers else self.dtype, copy=False)
                for k, v in snapshot.items()
            }
            msg = wire.Weights(
                policy_version=version,
                tensors=tensors,
                model_spec=self.model_spec,
                level_weights=self.level_weights(),
            )
            frames = wire.encode(msg)
            self.spent(time.thread_time() - t0)
            self.send(frames)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self.thread.join(timeout=5)
