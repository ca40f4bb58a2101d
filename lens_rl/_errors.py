"""The one boundary for telemetry's own faults: logged once per kind, never raised into user code.

Every broad ``except`` in lens_rl ends here (the shape of logfire's
``handle_internal_errors``). The first fault of a kind is a warning with its
traceback; later ones of that kind are logged at debug level. User exceptions never
pass through here: they are re-raised unchanged where they occur.

Example::

    with handle_internal_errors("metrics"):
        meter.record(...)          # a fault here is logged once, never raised
"""

from __future__ import annotations

import collections
import importlib
import logging
from types import ModuleType
from typing import Any

_log = logging.getLogger("lens_rl")

#: Kinds (and message keys) already warned about in this process; cleared by the runtime's reset.
WARNED: set[str] = set()
#: Every fault recorded in this process, counted per kind (never cleared: the test suite's
#: tripwire compares it before and after a test), and the last few as ``(kind, repr)``.
FAULTS: collections.Counter[str] = collections.Counter()
RECENT: collections.deque[tuple[str, str]] = collections.deque(maxlen=8)


def warn_once(key: str, message: str, *args: Any) -> bool:
    """Log ``message`` as a warning the first time ``key`` is seen; True when it was logged."""
    if key in WARNED:
        _log.debug(message, *args)
        return False
    WARNED.add(key)
    _log.warning(message, *args)
    return True


def internal_error(exc: BaseException, kind: str = "internal") -> None:
    """Record one of telemetry's own faults: a warning the first time per ``kind``, then debug."""
    try:
        FAULTS[kind] += 1
        RECENT.append((kind, repr(exc)))
        if kind in WARNED:
            _log.debug("lens_rl: telemetry error ignored (%s): %r", kind, exc, exc_info=exc)
            return
        WARNED.add(kind)
        _log.warning(
            "lens_rl: telemetry error ignored (%s; further ones are logged at debug): %r", kind, exc, exc_info=exc
        )
    except Exception:  # a broken log handler must not turn into a fault of the job
        pass


class handle_internal_errors:  # noqa: N801 - used like a function, as in logfire
    """A context manager that swallows telemetry's own ``Exception`` s through :func:`internal_error`."""

    __slots__ = ("kind",)

    def __init__(self, kind: str = "internal") -> None:
        self.kind = kind

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc is not None and isinstance(exc, Exception):
            internal_error(exc, self.kind)
            return True
        return False


def forget() -> None:
    """Forget which kinds were warned about (a forked child, ``lens_rl.testing.reset``)."""
    WARNED.clear()


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def require(module: str, extra: str, what: str = "lens-rl") -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError`: ``<what> needs <module>: pip install 'lens-rl[extra]'``.

    Example::

        go = require("plotly.graph_objects", "report", "lens-rl report")
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(f"{what} needs {module}: pip install 'lens-rl[{extra}]'") from exc
