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
        spent: Callable[[float], object] = lambda cpu_seconds: None,
    ):
        """`spent(s)` is told the CPU seconds this thread took to prepare each message."""
        self.send = send  # Ingest.publish: the frames of one message
        self.spent = spent
        self.model_spec = model_spec
        self._slot: tuple[int, int, dict[str, torch.Tensor]] | None = None
        self._cond = threading.Condition()
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self.thread.start()

    def offer(self, version: int, model: torch.nn.Module, env_frames: int) -> None:
        """Publish `model` as policy `version`, which the run reached at `env_frames`."""
        snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}  # on-device copy
        with self._cond:
            self._slot = (version, env_frames, snapshot)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._slot is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                version, env_frames, snapshot = self._slot
                self._slot = None
            t0 = time.thread_time()
            tensors = {
                k: v.cpu().numpy().astype(np.float32, copy=False) for k, v in snapshot.items()
            }
            msg = wire.Weights(
                policy_version=version, env_frames=env_frames, tensors=tensors,
                model_spec=self.model_spec,
            )  # fmt: skip
            frames = wire.encode(msg)
            self.spent(time.thread_time() - t0)
            self.send(frames)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self.thread.join(timeout=5)
