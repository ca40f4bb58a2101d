"""The one place that chooses between the C accelerator and pure Python.

``lens_rl._speedups`` (built from ``_speedups.c`` when a compiler is at hand; the build
is optional) answers the hot shapes of ``traced_phase`` without the kwargs dict a
Python ``**kwargs`` function always builds. Everything else, and every semantic
decision, stays in the Python implementation in :mod:`lens_rl.aspects`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from lens_rl import _speedups
except ImportError:  # no compiler at install time: the pure-Python path serves
    _speedups = None  # type: ignore[assignment]

#: True when the C accelerator is in use.
ACCELERATED = _speedups is not None


class _PyLazyBase:
    """Pure-Python storage for a lazily made phase (the C build provides ``LazyBase``)."""

    __slots__ = ("name", "kwargs", "phase")


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
    _speedups.configure(cache, python_impl, lazy_type, bucket_type, runtime, by_value)
    return _speedups.traced_phase  # type: ignore[no-any-return]
