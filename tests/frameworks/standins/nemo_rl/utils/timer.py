"""Stand-in for ``nemo_rl.utils.timer``: ``Timer`` and ``ThreadSafeTimer`` with NeMo-RL's method names and
signatures (labels timed with ``time.perf_counter``; durations kept per label)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Timer:
    def __init__(self, context: dict[str, object] | None = None) -> None:
        self._timers: dict[str, list[float]] = {}
        self._start_times: dict[str, float] = {}
        self._context = dict(context or {})

    def start(self, label: str, should_log: bool = True) -> None:
        if label in self._start_times:
            raise ValueError(f"Timer {label!r} is already running")
        self._start_times[label] = time.perf_counter()

    def stop(self, label: str, should_log: bool = True) -> float:
        if label not in self._start_times:
            raise ValueError(f"Timer {label!r} is not running")
        elapsed = time.perf_counter() - self._start_times.pop(label)
        self._timers.setdefault(label, []).append(elapsed)
        return elapsed

    def record(self, label: str, elapsed: float) -> None:
        self._timers.setdefault(label, []).append(elapsed)

    @contextmanager
    def time(self, label: str, should_log: bool = True) -> Iterator[None]:
        self.start(label, should_log)
        try:
            yield
        finally:
            self.stop(label, should_log)

    def get_timing_metrics(self, reduction_op: str = "mean") -> dict[str, float]:
        reduce = {"sum": sum, "mean": lambda xs: sum(xs) / len(xs), "count": len}[reduction_op]
        return {label: float(reduce(values)) for label, values in self._timers.items()}

    def reset(self, label: str | None = None) -> None:
        if label:
            self._timers.pop(label, None)
            self._start_times.pop(label, None)
        else:
            self._timers, self._start_times = {}, {}


class ThreadSafeTimer(Timer):
    def __init__(self, context: dict[str, object] | None = None) -> None:
        super().__init__(context=context)
        self._lock = threading.RLock()

    def start(self, label: str, should_log: bool = True) -> None:
        with self._lock:
            super().start(label, should_log)

    def stop(self, label: str, should_log: bool = True) -> float:
        with self._lock:
            return super().stop(label, should_log)

    def record(self, label: str, elapsed: float) -> None:
        with self._lock:
            super().record(label, elapsed)

    @contextmanager
    def time(self, label: str, should_log: bool = True) -> Iterator[None]:
        # (its own: start and stop are each locked, the block itself is not)
        self.start(label, should_log)
        try:
            yield
        finally:
            self.stop(label, should_log)

    def reset(self, label: str | None = None) -> None:
        with self._lock:
            super().reset(label)
