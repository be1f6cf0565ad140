"""Events per second over a sliding window: the *_per_second gauges' arithmetic (learner and
actor), kept apart from the metric declarations that export it."""

from __future__ import annotations

import time
from collections import deque


class RateWindow:
    """Events per second over the last `window_s` seconds (less, just after construction).

    Counts added within `window_s / 100` of each other share one slot, so memory stays bounded
    however often `add` is called; the rate is off by at most that much of the window's edge.
    """

    def __init__(self, window_s: float = 30.0, *, now: float | None = None):
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self._slot_s = window_s / 100
        self._start = time.monotonic() if now is None else now
        self._slots: deque[list[float]] = deque()  # [slot start time, count], oldest first

    def add(self, count: float, now: float | None = None) -> None:
        """Record `count` events that happened up to `now` (time.monotonic() by default)."""
        now = time.monotonic() if now is None else now
        if self._slots and now - self._slots[-1][0] < self._slot_s:
            self._slots[-1][1] += count
        else:
            self._slots.append([now, count])
        self._expire(now)

    def rate(self, now: float | None = None) -> float:
        """Events per second over the window ending at `now`; 0.0 before any time has passed."""
        now = time.monotonic() if now is None else now
        self._expire(now)
        span = min(self.window_s, now - self._start)
        return sum(c for _, c in self._slots) / span if span > 0 else 0.0

    def _expire(self, now: float) -> None:
        while self._slots and self._slots[0][0] <= now - self.window_s:
            self._slots.popleft()
