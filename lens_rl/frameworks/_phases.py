"""Timers to phases: the helpers a framework module's ``on_call`` uses (part of the contract in ``_base``).

A phase opened here is made current (its children nest under it), bucketed by the default table unless a
bucket is given, and closed by its token; nothing here raises into the framework (faults go to the one error
boundary). ``StepUmbrella`` is a framework's step: phase ``step`` with ``rl.step`` and no bucket.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any

from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME
from lens_rl.buckets import Bucket, coerce_bucket
from lens_rl.record.engine import Node, close_node, open_node
from lens_rl.record.phases import Phase

__all__ = ["OpenPhases", "StepUmbrella", "call_in_phase", "close_phase", "open_phase", "record_interval"]

_RT = RUNTIME

_PHASES: dict[tuple[Any, ...], Phase] = {}
_PHASES_MAX = 4096


def _phase(name: str, bucket: Bucket | str | None, rl_attributes: Mapping[str, Any]) -> Phase:
    key = (name, bucket, *sorted(rl_attributes.items()))
    try:
        phase = _PHASES.get(key)
    except TypeError:  # an unhashable value
        return Phase(name, coerce_bucket(bucket), None, None, dict(rl_attributes))
    if phase is None:
        if len(_PHASES) >= _PHASES_MAX:
            _PHASES.clear()
        phase = _PHASES[key] = Phase(name, coerce_bucket(bucket), None, None, dict(rl_attributes))
    return phase


def open_phase(name: str, *, bucket: Bucket | str | None = None, **rl_attributes: Any) -> Node | None:
    """Open phase ``name`` (made current; ``rl_attributes`` recorded as ``rl.<key>``); its token, or None
    while telemetry is off. Never raises."""
    try:
        return open_node(_phase(name, bucket, rl_attributes))
    except Exception as exc:
        internal_error(exc, "framework-phase")
        return None


def close_phase(node: Node | None, exc: BaseException | None = None) -> None:
    """Close what :func:`open_phase` opened (None: nothing). Never raises."""
    if node is not None:
        close_node(node, exc)


def call_in_phase(name: str, **rl_attributes: Any) -> Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]:
    """An ``on_call`` for ``weaver.around`` that runs the original inside phase ``name`` (a user exception
    is recorded on it and re-raised unchanged)."""

    def on_call(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        node = open_phase(name, **rl_attributes)
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            close_phase(node, exc)
            raise
        close_phase(node)
        return result

    return on_call


class OpenPhases:
    """Phases opened by one call and closed by another (a timer's start/stop, enter/exit), by key.

    Entries under one key stack: a key entered twice before it ends closes the inner one first.
    """

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[Any, list[Node]] = {}

    def start(self, key: Any, name: str, *, bucket: Bucket | str | None = None, **rl_attributes: Any) -> None:
        node = open_phase(name, bucket=bucket, **rl_attributes)
        if node is not None:
            self._open.setdefault(key, []).append(node)

    def stop(self, key: Any, exc: BaseException | None = None) -> bool:
        """Close the innermost phase open under ``key``; False when none was."""
        stack = self._open.get(key)
        if not stack:
            return False
        node = stack.pop()
        if not stack:
            self._open.pop(key, None)
        close_phase(node, exc)
        return True

    def is_open(self, key: Any) -> bool:
        return bool(self._open.get(key))

    def clear(self) -> None:
        """Close everything still open (an unweave; a framework reset)."""
        for key in list(self._open):
            while self.stop(key):
                pass


class StepUmbrella:
    """A framework's step: phase ``name`` with ``rl.step`` and no bucket, opened by one call, closed by another."""

    __slots__ = ("name", "first", "_counter", "_node", "number")

    def __init__(self, name: str = "step", *, first: int = 1) -> None:
        self.name = name
        self.first = first
        self._counter = itertools.count(first)
        self._node: Node | None = None
        #: the number of the open step (or the last one), None before any
        self.number: Any = None

    def begin(self, number: Any = None) -> None:
        """Open the umbrella for step ``number`` (None: the next of a per-process count). Never raises."""
        try:
            if self._node is not None:
                self.end()
            if number is None:
                number = next(self._counter)
            self.number = number
            self._node = open_phase(self.name, **{"step": number})
        except Exception as exc:
            internal_error(exc, "framework-step")

    def end(self, exc: BaseException | None = None) -> None:
        """Close the open umbrella (none: nothing)."""
        node, self._node = self._node, None
        close_phase(node, exc)

    @property
    def is_open(self) -> bool:
        return self._node is not None

    def reset(self) -> None:
        self.end()
        self._counter = itertools.count(self.first)
        self.number = None


def record_interval(
    name: str, start_ns: int, end_ns: int | None = None, *, bucket: Bucket | str | None = None, **rl_attributes: Any
) -> None:
    """Write phase ``name`` that ran from ``start_ns`` to ``end_ns`` (default now; ``time.time_ns`` clock) under
    the current context: a back-dated span (a timer's ``record(name, seconds)``). Never raises."""
    try:
        handle = _RT.handle or _RT.resolve()
        if handle is None:
            return
        phase = _phase(name, bucket, rl_attributes)
        chosen = phase.bucket or phase._default
        attributes = phase._attributes(chosen)
        span = handle.tracer.start_span(phase.name, attributes=attributes, start_time=start_ns)
        span.end(end_ns if end_ns is not None else time.time_ns())
    except Exception as exc:
        internal_error(exc, "framework-record")
