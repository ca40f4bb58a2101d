"""What the framework modules of veRL, NeMo-RL, SkyRL and OpenRLHF share: a timer's label as the phase name,
and the step counter of the trainer whose loop opened a step timer.

Example::

    logged_name("timing_s/gen")           # 'gen'
    caller_counter("global_steps")        # in a woven timer: the calling trainer's counter, or None
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from lens_rl._errors import internal_error, warn_once

__all__ = ["called_from", "caller_counter", "logged_name"]

#: The prefixes the frameworks log their timers under (veRL ``timing_s/``, NeMo-RL, SkyRL and OpenRLHF
#: ``timing/``): dropped, so a phase is named as the timer is (``timing_s/gen`` -> ``gen``).
_LOGGED_PREFIXES = ("timing_s/", "timing/")

#: How many frames above the woven timer a trainer's loop may be (the timer's own frames, a
#: ``contextlib`` frame, lens_rl's wrapper): enough for every path read, and a bound on the cost.
_MAX_DEPTH = 8


def logged_name(label: Any) -> str:
    """The phase name of a timer's label: its text without the prefix the framework logs it under."""
    name = label if isinstance(label, str) else str(label)
    for prefix in _LOGGED_PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    return name


def caller_counter(attribute: str) -> int | None:
    """The int ``self.<attribute>`` of the nearest calling method (up to a few frames above the woven call)
    that has one: the step counter of the trainer whose loop opened the timer, read where it runs (a Ray
    actor's loop too, woven at any time). None when no caller has one. Reads only; about a microsecond. A
    caller whose attribute lookup raises (anything: a ``dict`` subclass whose ``__getattr__`` raises
    ``KeyError``, a property that fails) has none (one warning); a fault of the frame walk is the error
    boundary's. Never raises."""
    try:
        for obj in _callers(sys._getframe(2)):
            value = _read(obj, attribute)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    except Exception as exc:
        internal_error(exc, "framework-caller")
    return None


def called_from(attribute: str) -> bool:
    """Whether a calling method (up to a few frames above the woven call) belongs to an object that has
    ``attribute`` (a trainer's loop, told from a generation worker's by a method only the trainer has). A
    lookup that raises is a caller without it, as in :func:`caller_counter`. Never raises."""
    try:
        return any(_read(obj, attribute) is not _MISSING for obj in _callers(sys._getframe(2)))
    except Exception as exc:
        internal_error(exc, "framework-caller")
        return False


_MISSING = object()


def _read(obj: Any, attribute: str) -> Any:
    """``obj.<attribute>``, or :data:`_MISSING` when it has none or its lookup raises (anything else than
    ``AttributeError`` is one warning per attribute and process)."""
    try:
        return getattr(obj, attribute)
    except AttributeError:  # (the usual caller without it: a worker's method, a helper's)
        return _MISSING
    except Exception as exc:  # (the caller's own class, not a telemetry fault: one line says what was read)
        warn_once(
            f"caller-{attribute}",
            "lens_rl: reading %r of a calling %s raised %r: read as a caller without it",
            attribute,
            type(obj).__name__,
            exc,
        )
        return _MISSING


def _callers(frame: Any) -> Iterator[Any]:
    """The ``self`` of each method among ``frame`` and the few frames above it."""
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            yield frame.f_locals.get("self")
        frame = frame.f_back
