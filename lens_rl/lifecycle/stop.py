"""Stopping: flush and shutdown, each bounded by its budget whatever the collector does, and at exit.

Flush and shutdown run on pre-started helper threads and the caller only waits, so a call from a signal
handler that interrupted the very thread holding a lock they need returns within its budget too.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME
from lens_rl.export.bounded import DEFAULT_TIMEOUT_MS, Job, budget_ms, submit
from lens_rl.lifecycle.environ import forget_projection

__all__ = [
    "ATEXIT_TIMEOUT_MS",
    "DEFAULT_TIMEOUT_MS",
    "flush_telemetry",
    "record_crash",
    "shutdown_at_exit",
    "shutdown_telemetry",
]

ATEXIT_TIMEOUT_MS = 3000
_SLACK_S = 0.05
_IN_FLIGHT: list[Job | None] = [None]  # the flush or shutdown the helpers are running, if any
_CALLER = threading.local()  # depth of _within on this thread (a signal handler may nest a call)


def shutdown_telemetry(timeout_ms: float | None = 5000) -> bool:
    """End open lens_rl spans, flush and shut down, returning within ``timeout_ms``. Never raises.

    ``timeout_ms`` is read by ``budget_ms``: None, NaN or not a number means 5 s, negative 0, infinity ~24.8 days.

    True only when every span and metric recorded so far was exported. Idempotent
    (a second call returns the first call's answer at once). Runs at exit, bounded by 3 s.
    Called while an exception propagates (from a ``finally`` or ``except`` block), it records that
    exception on the job root first: the attempt ended in ``error``.
    """
    timeout_ms = budget_ms(timeout_ms)
    failure = sys.exc_info()[1]
    if failure is not None and not (isinstance(failure, SystemExit) and failure.code in (0, None)):
        record_crash(failure)
    if RUNTIME.handle is None:
        return True if RUNTIME.last_shutdown is None else RUNTIME.last_shutdown
    return _within(timeout_ms, lambda: _shutdown(timeout_ms))


def record_crash(failure: BaseException) -> None:
    """Record ``failure`` on the open job root ``rl.job`` (an ``exception`` event, status ERROR with its
    type and message): how the attempt ended. Nothing when no job root is open; never raises."""
    try:
        root = RUNTIME.root_span
        if root is not None and root.is_recording():
            from opentelemetry.trace import Status, StatusCode

            root.record_exception(failure, escaped=True)
            root.set_status(Status(StatusCode.ERROR, f"{type(failure).__name__}: {failure}"[:4096]))
    except Exception as exc:
        internal_error(exc, "record-crash")


def _shutdown(timeout_ms: int) -> bool:
    deadline = time.monotonic() + timeout_ms / 1000.0
    hooks_ok = True
    if RUNTIME.step_hook is not None:  # an open profiler window is written (and its span sent) first
        try:
            from lens_rl.devices.profile import uninstall

            uninstall()
        except Exception as exc:
            internal_error(exc, "profile-shutdown")
    for hook in RUNTIME.shutdown_hooks:  # e.g. Ray workers flushed before the driver closes
        try:
            hooks_ok = bool(hook(max(int((deadline - time.monotonic()) * 1000), 0))) and hooks_ok
        except Exception as exc:
            internal_error(exc, "shutdown-hook")
            hooks_ok = False
    timeout_ms = max(int((deadline - time.monotonic()) * 1000), 0)
    with RUNTIME.lock:
        handle = RUNTIME.handle
        if handle is None:
            return True if RUNTIME.last_shutdown is None else RUNTIME.last_shutdown
        RUNTIME.mark_off()
        RUNTIME.handle = None
        root, RUNTIME.root_span = RUNTIME.root_span, None
    try:
        RUNTIME.end_open_phases()
        if root is not None:
            root.end()
        _stop_devices(min(timeout_ms, 1000))
        timeout_ms = max(int((deadline - time.monotonic()) * 1000), 0)
        ok = bool(handle.shutdown(timeout_ms)) and hooks_ok
    except Exception as exc:
        internal_error(exc, "shutdown")
        ok = False
    with RUNTIME.lock:
        forget_projection()  # the environment is the user's again: a next init reads its own config
    RUNTIME.last_shutdown = ok
    return ok


def _stop_devices(timeout_ms: int) -> None:
    """Stop this process's GPU sampler, if it runs (bounded); its samples are on disk line by line."""
    gpu = sys.modules.get("lens_rl.devices.gpu")
    if gpu is not None:
        gpu.stop(timeout_ms / 1000.0)


def _within(timeout_ms: int, work: Any) -> bool:
    """``work()`` on a helper thread, waited for at most ``timeout_ms`` (plus a little slack); False on timeout.

    Flush and shutdown may be called from a signal handler that interrupted the very
    thread holding a lock they need: the helper may block there, the caller never does.
    One call at a time goes to the helpers: a call made while another is still running
    (a signal storm) first waits for that one, within its own budget, so work never piles up.
    """
    if getattr(_CALLER, "depth", 0):
        return False  # a signal handler interrupted this very wait: the outer call answers, this one at once
    _CALLER.depth = 1
    try:
        deadline = time.monotonic() + timeout_ms / 1000.0 + _SLACK_S
        previous = _IN_FLIGHT[0]
        if previous is not None and not previous.finished():
            previous.wait(deadline - time.monotonic())
            if not previous.finished():
                return False
        job = submit(work)
        _IN_FLIGHT[0] = job
        done, result = job.wait(deadline - time.monotonic())
        return bool(done and result)
    except Exception as exc:
        internal_error(exc, "flush")
        return False
    finally:
        _CALLER.depth = 0


def flush_telemetry(timeout_ms: float | None = 5000) -> bool:
    """Export everything recorded so far within ``timeout_ms``, without shutting down.

    Use at step boundaries and before ``ray.kill`` (which skips ``atexit``).
    True only when all of it was exported. Never raises; ``timeout_ms`` is read as by ``shutdown_telemetry``.
    """
    handle = RUNTIME.handle
    if handle is None:
        return True
    budget = budget_ms(timeout_ms)
    return _within(budget, lambda: handle.force_flush(budget))


def shutdown_at_exit() -> None:
    try:
        shutdown_telemetry(ATEXIT_TIMEOUT_MS)
    except Exception as exc:
        internal_error(exc, "atexit")
