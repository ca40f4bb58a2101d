"""The one place that chooses between the C accelerator and pure Python.

``lens_rl._speedups`` (built from ``_speedups.c`` when a compiler is at hand; the build
is optional) answers the hot shapes of ``traced_phase`` without the kwargs dict a
Python ``**kwargs`` function always builds, and the ``with`` protocol of phases while
telemetry is off without a Python frame. Everything else, and every semantic
decision, stays in the Python implementation in :mod:`lens_rl.aspects`. Both read the
on/off flags from the one runtime object.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from lens_rl._runtime import RUNTIME
from lens_rl._spans import NOOP_SPAN

try:
    from lens_rl import _speedups
except ImportError:  # no compiler at install time: the pure-Python path serves
    _speedups = None  # type: ignore[assignment]

#: True when the C accelerator is in use.
ACCELERATED = _speedups is not None


class _PyScopeBase:
    """The ``with`` protocol of phases in pure Python (the C build provides ``ScopeBase``).

    Off, ``__enter__`` yields the no-op span and ``__exit__`` does nothing; otherwise they
    call the subclass's ``_enter_on()`` / ``_exit_on(exc)``. ``__exit__`` looks at
    ``RUNTIME.stacked`` (set once anything was entered while on), not ``on``, so a phase
    entered while on is closed even if telemetry stopped inside it. While telemetry is
    off (and nothing was ever entered on), :func:`_follow_flag` swaps both for builtins
    that do the same without a Python frame.
    """

    __slots__ = ()

    def __enter__(self) -> Any:
        if RUNTIME.on:
            return self._enter_on()  # type: ignore[attr-defined]
        return NOOP_SPAN

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if RUNTIME.stacked:
            self._exit_on(exc)  # type: ignore[attr-defined]


class _Inert:
    """Its instances' bound ``__init__`` is ``object.__init__``, which accepts any arguments and
    returns None when the class defines ``__new__`` but no ``__init__``."""

    __slots__ = ()

    def __new__(cls) -> _Inert:
        return object.__new__(cls)


_PY_ENTER, _PY_EXIT = _PyScopeBase.__enter__, _PyScopeBase.__exit__
# The off ``with`` protocol as builtins. A ``with`` looks ``__enter__`` / ``__exit__`` up on the
# type and binds them only if they are descriptors; these bound builtins are not, so they are
# called as they are: one returns the no-op span, the other takes the three exit arguments and
# returns None (the exception propagates). ~90 ns less per ``with`` than two Python frames.
_OFF_ENTER: Any = itertools.repeat(NOOP_SPAN).__next__
_OFF_EXIT: Any = _Inert().__init__  # type: ignore[misc]


def _follow_flag() -> None:
    """Give ``_PyScopeBase`` the builtin ``__enter__`` while off, the builtin ``__exit__`` while off
    and never stacked, its Python methods otherwise. A ``with`` reads both when it enters (at once,
    under the GIL); ``async with`` (``__aexit__``) looks ``__exit__`` up when it leaves, so the real
    one stays once anything was entered on."""
    _PyScopeBase.__enter__ = _PY_ENTER if RUNTIME.on else _OFF_ENTER  # type: ignore[method-assign]
    _PyScopeBase.__exit__ = _PY_EXIT if RUNTIME.on or RUNTIME.stacked else _OFF_EXIT  # type: ignore[method-assign]


def _builtins_serve() -> bool:
    """Whether this interpreter calls the off builtins as the ``with`` protocol (checked once)."""

    class Probe:
        __slots__ = ()
        __enter__ = _OFF_ENTER
        __exit__ = _OFF_EXIT

    try:
        with Probe() as span:
            raise LookupError(span)  # must come through: the exit returned None
    except LookupError as exc:
        return exc.args[0] is NOOP_SPAN
    except TypeError:  # bound after all: called with the instance
        return False


class _PyLazyBase(_PyScopeBase):
    """Pure-Python storage for a lazily made phase (the C build provides ``LazyBase``)."""

    __slots__ = ("name", "kwargs", "phase")


if _speedups is None and _builtins_serve():
    RUNTIME.flag_hooks.append(_follow_flag)
    _follow_flag()

ScopeBase: type = _speedups.ScopeBase if _speedups is not None else _PyScopeBase
LazyBase: type = _speedups.LazyBase if _speedups is not None else _PyLazyBase


def traced_phase_entry(
    python_impl: Callable[..., Any], cache: dict[str, Any], lazy_type: type, bucket_type: type, runtime: Any
) -> Callable[..., Any]:
    """The public ``traced_phase``: the C entry point when built, else ``python_impl`` itself.

    The C entry point reads the on/off flag from ``runtime.on`` and takes canonical
    bucket strings (``"productive"``) as their :class:`~lens_rl.buckets.Bucket` member.
    """
    if _speedups is None:
        return python_impl
    by_value = {member.value: member for member in bucket_type}  # type: ignore[attr-defined]
    _speedups.configure(cache, python_impl, lazy_type, bucket_type, runtime, by_value, NOOP_SPAN)
    return _speedups.traced_phase  # type: ignore[no-any-return]
