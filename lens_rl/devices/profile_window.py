"""One profiler window: its capture's name (never one taken), its record while open, the watcher that cuts it at
``max_bytes``, and its span.

A window is one step of one process (:mod:`lens_rl.devices.profile` opens and closes it). Its span
``rl.profile`` covers it, in bucket ``overhead`` with its ``rl.step``, ``rl.profile.path``,
``rl.profile.backend`` and ``rl.profile.reason``; the capture's own time (starting; stopping and writing) is its
children ``rl.profile.start`` / ``rl.profile.stop``, also ``overhead``. The window itself is the step's phases'
time: the reads count only those children as the capture's (:mod:`lens_rl.offline.read.tree`), so the step's
phases keep their buckets and nothing is counted twice.

Example::

    window = Window(step, "torch", free_name(profiles, "trainer-0-step3"), "config", [], parent)
    stop = watch(window, max_bytes)        # marks window.cut = "max_bytes" when the process grew that much
    window_span(window, files, "step end", stop_ns, end_ns, None)
"""

from __future__ import annotations

import glob
import os
import threading
from pathlib import Path
from typing import Any

from lens_rl._runtime import RUNTIME

__all__ = ["ALWAYS", "Window", "free_name", "watch", "window_span"]

#: How often the watcher reads the process's memory while a window is open.
WATCH_EVERY_S = 0.1


class _Always:
    """A step equal to none: while a window is open the engine calls the hook at every phase (cut checks)."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


ALWAYS = _Always()


class Window:
    """One open capture."""

    __slots__ = (
        "step",
        "backend",
        "name",
        "reason",
        "requests",
        "start_ns",
        "started_ns",
        "thread",
        "parent",
        "cut",
        "rss0",
        "device",
    )

    def __init__(self, step: int, backend: str, name: str, reason: str, requests: list[str], parent: Any) -> None:
        self.step = step
        self.backend = backend
        self.name = name
        self.reason = reason
        self.requests = requests  # (the ids of the requests it answers)
        self.parent = parent
        self.start_ns = self.started_ns = 0
        self.thread = threading.get_ident()
        self.cut: str | None = None
        self.rss0 = _rss()
        self.device: list[Path] = []  # (the device locks it holds)


def window_span(window: Window, files: list[str], why: str, stop_ns: int, end_ns: int, error: str | None) -> None:
    """``rl.profile`` over the window (``overhead``, its ``rl.step``: its time, to the reads, is only its
    children's), under the umbrella where the step has one; the capture's own time (starting; stopping and
    writing) as ``rl.profile.start`` / ``rl.profile.stop`` in bucket ``overhead``."""
    handle = RUNTIME.handle
    if handle is None:
        return
    from opentelemetry import trace

    attributes: dict[str, Any] = {
        "rl.bucket": "overhead",
        "rl.step": window.step,
        "rl.profile.step": window.step,
        "rl.profile.backend": window.backend,
        "rl.profile.reason": window.reason,
        "rl.profile.ended_by": why,
    }
    if files:
        attributes["rl.profile.path"] = files[0]
    if error:
        attributes["rl.profile.error"] = error[:1024]
    parent = window.parent
    if parent is not None and hasattr(parent, "get_span_context"):
        parent = trace.set_span_in_context(parent)
    tracer = handle.tracer
    span = tracer.start_span("rl.profile", context=parent, attributes=attributes, start_time=window.start_ns)
    inner = trace.set_span_in_context(span)
    cost: dict[str, Any] = {"rl.bucket": "overhead", "rl.step": window.step}
    for name, lo, hi in (
        ("rl.profile.start", window.start_ns, window.started_ns),
        ("rl.profile.stop", stop_ns, end_ns),
    ):
        if hi > lo:
            tracer.start_span(name, context=inner, attributes=cost, start_time=lo).end(hi)
    span.end(end_ns)


def _rss() -> int:
    """The process's resident memory in bytes (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def watch(window: Window, max_bytes: int) -> threading.Event:
    """A thread that marks ``window`` cut once the process grew by ``max_bytes`` (the capture's estimate):
    the next phase boundary on the window's thread stops it (a profiler stops on the thread that started it)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(WATCH_EVERY_S):
            if window.rss0 and _rss() - window.rss0 > max_bytes:
                window.cut = "max_bytes"
                return

    threading.Thread(target=run, name="lens_rl-profile-watch", daemon=True).start()
    return stop


def free_name(folder: Path, name: str) -> str:
    """``name``, or ``name-2``, ``name-3`` ... where a capture of that name is in ``folder`` already (an earlier
    attempt's of the same step, or another process's of the same group and rank): a capture is never written
    over, each window's span names its own file."""
    candidate, n = name, 1
    while any(folder.glob(glob.escape(candidate) + ".*")):
        n += 1
        candidate = f"{name}-{n}"
    return candidate
