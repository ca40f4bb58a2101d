"""The one place that chooses between the C accelerator and pure Python.

``lens_rl.record._speedups`` (built from ``_speedups.c`` when a compiler is at hand; the build is optional)
answers the hot shapes of ``traced_phase`` without the kwargs dict a Python ``**kwargs`` function always
builds, and the ``with`` protocol of phases while telemetry is off without a Python frame. Everything else,
and every semantic decision, stays in the Python implementation in :mod:`lens_rl.record.phases`. Both read
the on/off flags from the one runtime object.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from lens_rl._runtime import RUNTIME
from lens_rl.record.spans import NOOP_SPAN

try:
    from lens_rl.record import _speedups  # type: ignore[attr-defined]
except ImportError:  # no compiler at install time: the pure-Python path serves
    _speedups = None  # type: ignore[assignment]

#: True when the C accelerator is in use.
ACCELERATED = _speedups is not None


class _PyScopeBase:
    """The ``with`` protocol of phases in pure Python (the C build provides ``ScopeBase``).

    Off, ``__enter__`` yields the no-op span and ``__exit__`` does nothing; otherwise they call the
    subclass's ``_enter_on()`` / ``_exit_on(exc)``. ``__exit__`` looks at ``RUNTIME.stacked`` (set once
    anything was entered while on), not ``on``, so a phase entered while on is closed even if telemetry
    stopped inside it.
    """

    __slots__ = ()

    def __enter__(self) -> Any:
        if RUNTIME.on:
            return self._enter_on()  # type: ignore[attr-defined]
        return NOOP_SPAN

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if RUNTIME.stacked:
            self._exit_on(exc)  # type: ignore[attr-defined]


class _PyLazyBase(_PyScopeBase):
    """Pure-Python storage for a lazily made phase (the C build provides ``LazyBase``)."""

    __slots__ = ("name", "kwargs", "phase")


ScopeBase: type = _speedups.ScopeBase if _speedups is not None else _PyScopeBase
LazyBase: type = _speedups.LazyBase if _speedups is not None else _PyLazyBase


def traced_phase_entry(
    python_impl: Callable[..., Any],
    cache: dict[Any, Any],
    lazy_type: type,
    bucket_type: type,
    runtime: Any,
    key_marker: object,
) -> Callable[..., Any]:
    """The public ``traced_phase``: the C entry point when built, else ``python_impl`` itself.

    The C entry point reads the on/off flag from ``runtime.on``, takes canonical bucket strings
    (``"productive"``) as their :class:`~lens_rl.buckets.Bucket` member, and keys keyword phases in
    ``cache`` with ``key_marker`` exactly as the Python implementation does.
    """
    if _speedups is None:
        return python_impl
    by_value = {member.value: member for member in bucket_type}  # type: ignore[attr-defined]
    _speedups.configure(cache, python_impl, lazy_type, bucket_type, runtime, by_value, NOOP_SPAN, key_marker)
    if hasattr(_speedups, "set_doc"):  # the C entry point shows python_impl's docstring (one text, not two)
        _speedups.set_doc(f"traced_phase{_TEXT_SIGNATURE}\n--\n\n{inspect.cleandoc(python_impl.__doc__ or '')}")
    return _speedups.traced_phase  # type: ignore[no-any-return]


#: ``traced_phase``'s signature as a C function's docstring states it (``inspect.signature`` reads it).
_TEXT_SIGNATURE = "(name, /, *, bucket=None, parent=None, attributes=None, **rl_attributes)"
