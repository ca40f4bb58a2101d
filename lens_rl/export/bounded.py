"""Calls that may block, run on a pool of helper threads and waited for with a deadline.

Why a pool started ahead: flush and shutdown may be called from a signal handler that
interrupted the very thread holding a lock they need (the SDK's span lock, the span
queue, even ``threading``'s own lock inside ``Thread.start``). Starting a thread there
can deadlock; posting to a ``SimpleQueue`` (re-entrant, made for this) and waiting on a
fresh ``Event`` cannot. A helper may block on such a lock; the caller never does: it
gets ``(False, None)`` when the deadline passes. The pool grows only when every helper
is busy (a hung exporter keeps one), and is forgotten in a forked child.

This module imports nothing of lens_rl but the error boundary.

Example::

    done, result = run_bounded(lambda: exporter.shutdown(), timeout_s=0.5)
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from typing import Any

from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME

__all__ = ["DEFAULT_TIMEOUT_MS", "MAX_TIMEOUT_MS", "Job", "budget_ms", "run_bounded", "start_helpers", "submit"]

DEFAULT_TIMEOUT_MS = 5000
MAX_TIMEOUT_MS = 2**31 - 1  # ~24.8 days: the longest budget a flush or shutdown takes (infinity means this)

_QUEUE: queue.SimpleQueue[Any] = queue.SimpleQueue()
_HELPERS: list[object] = []  # list.append / set.add / discard are atomic under the GIL: no lock to re-enter
_BUSY: set[object] = set()
_MIN_HELPERS = 2


def budget_ms(timeout_ms: object) -> int:
    """A caller's ``timeout_ms`` as a bounded budget in ms, never raising (every public flush and shutdown uses it).

    None, NaN or not a number (a string, a list) means the default (5 s), never "forever"; a negative number
    means 0 (try once, do not wait); infinity or anything above ``MAX_TIMEOUT_MS`` means ``MAX_TIMEOUT_MS``.
    """
    if timeout_ms is None or isinstance(timeout_ms, (str, bytes)):
        return DEFAULT_TIMEOUT_MS
    if isinstance(timeout_ms, int):  # exact, however large (float() would overflow)
        return min(max(timeout_ms, 0), MAX_TIMEOUT_MS)
    try:
        value = float(timeout_ms)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return DEFAULT_TIMEOUT_MS
    if math.isnan(value):
        return DEFAULT_TIMEOUT_MS
    return int(min(max(value, 0.0), float(MAX_TIMEOUT_MS)))


def _run_item(item: tuple[Any, ...]) -> None:
    fn, box, done, claimed = item
    claimed.append(True)
    if len(claimed) > 1:
        return  # already run by its caller (interpreter shutdown)
    try:
        box.append(fn())
    except Exception as exc:
        internal_error(exc, "bounded-call")
    finally:
        done.set()


def _helper(token: object) -> None:
    while True:
        item = _QUEUE.get()
        _BUSY.add(token)
        try:
            _run_item(item)
        finally:
            _BUSY.discard(token)


def _spawn() -> None:
    token = object()
    _HELPERS.append(token)
    try:
        threading.Thread(target=_helper, args=(token,), name="lens_rl-helper", daemon=True).start()
    except RuntimeError:
        _HELPERS.remove(token)
        raise


def start_helpers() -> None:
    """Start the pool ahead of need (telemetry start-up), outside any signal handler."""
    try:
        for _ in range(max(_MIN_HELPERS - len(_HELPERS), 0)):
            _spawn()
    except RuntimeError as exc:  # no new threads at interpreter shutdown
        internal_error(exc, "bounded-call")


class Job:
    """A call handed to the helpers: ``wait(timeout_s)`` gives (True, its result) or (False, None)."""

    __slots__ = ("item",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.item: tuple[Any, list[Any], threading.Event, list[bool]] = (fn, [], threading.Event(), [])

    def finished(self) -> bool:
        return bool(self.item[2].is_set())

    def wait(self, timeout_s: float) -> tuple[bool, Any]:
        _, box, done, _ = self.item
        if not done.wait(max(timeout_s, 0.0)):
            return False, None
        return (True, box[0]) if box else (False, None)


def submit(fn: Callable[[], Any]) -> Job:
    """Hand ``fn`` to a helper. Grows the pool when every helper is busy, except on the main thread
    (where signal handlers run, and starting a thread could deadlock): there the job waits its turn."""
    job = Job(fn)
    _QUEUE.put(job.item)
    if len(_BUSY) >= len(_HELPERS) and threading.current_thread() is not threading.main_thread():
        try:
            _spawn()
        except RuntimeError:  # at interpreter shutdown: run it here (unbounded, but never lost)
            _run_item(job.item)
    elif not _HELPERS:  # no helper at all (telemetry never started them): run it here
        _run_item(job.item)
    return job


def run_bounded(fn: Callable[[], Any], timeout_s: float) -> tuple[bool, Any]:
    """``fn()`` on a helper, waited for at most ``timeout_s``: (True, its result) or (False, None)."""
    return submit(fn).wait(timeout_s)


def _forget_after_fork(after_fork: bool) -> None:
    global _QUEUE
    if after_fork:  # the helpers did not survive the fork
        _QUEUE = queue.SimpleQueue()
        _HELPERS.clear()
        _BUSY.clear()


RUNTIME.reset_hooks.append(_forget_after_fork)
