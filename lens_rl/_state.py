"""Process-global telemetry state: the handle, set once under a lock, and the hot-path flag.

``ON`` is the single check every disabled path makes. It is True while telemetry
runs *and* while the environment has not been consulted yet (the first call then
resolves it, lazily initialising worker telemetry when the environment says so);
it is False once telemetry is known to be off or has been shut down.

Generated wrappers read ``_state.ON`` through this module object, never a copy, so a
wrapper pickled by value (cloudpickle) still sees the live flag after the trip.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lens_rl.handle import TelemetryHandle

ON: bool = True
HANDLE: TelemetryHandle | None = None
#: The job root span's context (driver: the live span; worker: from TRACEPARENT).
ROOT_CONTEXT: Any = None
#: Set once the environment has been consulted (or telemetry shut down): no lazy init after.
RESOLVED: bool = False
LOCK = threading.RLock()

# Modules that keep a copy of ON as a module global, for the few nanoseconds a
# global read saves over a module-attribute read on the hottest paths.
_MIRRORS: list[ModuleType] = []


def set_on(value: bool) -> None:
    """Flip the hot-path flag here and in every mirror."""
    global ON
    ON = value
    for module in _MIRRORS:
        module._ON = value  # type: ignore[attr-defined]


def mirror(module: ModuleType) -> None:
    """Keep ``module._ON`` equal to ``ON`` from now on."""
    _MIRRORS.append(module)
    module._ON = ON  # type: ignore[attr-defined]


def resolve() -> TelemetryHandle | None:
    """The handle, initialising worker telemetry lazily the first time the env says enabled.

    Never raises. Once resolved to "off", ``ON`` is False and this is not called again.
    """
    handle = HANDLE
    if handle is not None or RESOLVED:
        return handle
    with LOCK:
        if HANDLE is not None or RESOLVED:
            return HANDLE
        from lens_rl import lifecycle

        handle = lifecycle._lazy_init()
        if handle is None:
            _mark_off()
        return handle


def _mark_off() -> None:
    global RESOLVED
    RESOLVED = True
    set_on(False)


def reset() -> None:
    """Forget everything (tests, forked children): the next use resolves from the env again."""
    global HANDLE, ROOT_CONTEXT, RESOLVED
    HANDLE = None
    ROOT_CONTEXT = None
    RESOLVED = False
    set_on(True)
