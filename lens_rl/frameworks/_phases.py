"""Timers to phases: the helpers a framework module's ``on_call`` uses (part of the contract in ``_base``).

A phase opened here is bucketed by the default table unless a bucket is given and closed by its token;
nothing here raises into the framework (faults go to the one error boundary). ``StepUmbrella`` is a
framework's step: phase ``step`` with ``rl.step`` and no bucket.

Scoped and loose phases. A phase of a lexically scoped timer (a ``with`` block, enter/exit on one thread) is
made current, as ``traced_phase`` is: what runs inside nests under it. A phase of a start/stop timer
(``loose=True``: NeMo-RL's ``Timer.start`` / ``stop``, a ``ThreadSafeTimer`` stopped on another thread, stops
out of order, an optimizer step between two callbacks) is never made current: it opens under the phase
current where ``start`` ran, passed explicitly, and holds no context token, so its ``stop`` closes that span
whichever thread calls it and restores nothing; no later phase is its child. A step umbrella
(:class:`StepUmbrella`, opened by one call and closed by another) is loose too, but the framework's phases
opened on its thread while it is open, with no phase made current since, are its children (passed
explicitly); once it closes it is forgotten, so no later phase is parented under it. A phase the job opens
itself (``traced_phase``) directly inside an umbrella is its child too, with its step: the rule is the
engine's (:mod:`lens_rl.record.umbrellas`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any

from lens_rl._errors import internal_error, warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.buckets import Bucket, coerce_bucket
from lens_rl.propagation import phase_parent, under
from lens_rl.record.engine import Node, close_node, open_node, started
from lens_rl.record.phases import Phase
from lens_rl.record.umbrellas import UMBRELLAS, forget_umbrella, keep_umbrella, umbrella_parent

__all__ = ["OpenPhases", "StepUmbrella", "call_in_phase", "close_phase", "open_phase", "phase_for", "record_interval"]

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


def phase_for(name: str, *, bucket: Bucket | str | None = None, **rl_attributes: Any) -> Phase:
    """The phase :func:`open_phase` opens for these arguments, made now (and cached): call it before a
    framework's clock starts, so the phase's first-use cost falls outside the interval both measure."""
    return _phase(name, bucket, rl_attributes)


def open_phase(
    name: str,
    *,
    bucket: Bucket | str | None = None,
    start_ns: int | None = None,
    loose: bool = False,
    **rl_attributes: Any,
) -> Node | None:
    """Open phase ``name`` (``rl_attributes`` recorded as ``rl.<key>``); its token, or None while telemetry is
    off. Made current, unless ``loose`` (a start/stop timer's: see the module docstring). ``start_ns``
    (``time.time_ns()``): when it began, read right beside the framework's own clock (default: now). Never
    raises."""
    return _open(_phase(name, bucket, rl_attributes), start_ns, loose, False)


def _open(phase: Phase, start_ns: int | None, loose: bool, umbrella: bool) -> Node | None:
    try:
        if not loose:  # (its parent: the current context, or the umbrella open on this thread: the engine's rule)
            return open_node(phase, start_ns)
        if started(phase) is None:  # (first: a lazy start or the driver's claim sets the job root read next)
            return None
        context = phase_parent(umbrella_parent() if UMBRELLAS else None)[0]
        node = open_node(phase, start_ns, context, False)
        if node is not None and umbrella:
            keep_umbrella(node, under(context, node.span, node.step))
        return node
    except Exception as exc:
        internal_error(exc, "framework-phase")
        return None


def close_phase(node: Node | None, exc: BaseException | None = None, *, end_ns: int | None = None) -> None:
    """Close what :func:`open_phase` opened (None: nothing), from any thread; ``end_ns`` as ``start_ns``
    there. Never raises."""
    if node is not None:
        if node.otel_token is None and UMBRELLAS:  # a loose phase: an umbrella is forgotten at once
            try:
                forget_umbrella(node)
            except Exception as err:
                internal_error(err, "framework-phase")
        close_node(node, exc, end_ns)


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

    Entries under one key stack: a key entered twice before it ends closes the inner one first. ``loose``: a
    start/stop timer's, never made current (see the module docstring); an enter/exit timer's are.
    """

    __slots__ = ("_open", "loose")

    def __init__(self, *, loose: bool = False) -> None:
        self._open: dict[Any, list[Node]] = {}
        self.loose = loose

    def start(
        self,
        key: Any,
        name: str,
        *,
        bucket: Bucket | str | None = None,
        start_ns: int | None = None,
        **rl_attributes: Any,
    ) -> None:
        node = open_phase(name, bucket=bucket, start_ns=start_ns, loose=self.loose, **rl_attributes)
        if node is not None:
            self._open.setdefault(key, []).append(node)

    def stop(self, key: Any, exc: BaseException | None = None, *, end_ns: int | None = None) -> bool:
        """Close the innermost phase open under ``key`` (from any thread); False when none was."""
        stack = self._open.get(key)
        if not stack:
            return False
        try:
            node = stack.pop()
        except IndexError:  # another thread took the last one
            return False
        if not stack:
            self._open.pop(key, None)
        close_phase(node, exc, end_ns=end_ns)
        return True

    def is_open(self, key: Any) -> bool:
        return bool(self._open.get(key))

    def clear(self) -> None:
        """Close everything still open (an unweave; a framework reset)."""
        for key in list(self._open):
            while self.stop(key):
                pass


class StepUmbrella:
    """A framework's step: phase ``name`` with ``rl.step`` and no bucket, opened by one call, closed by another
    (``loose``: never made current, the framework's phases on its thread its children; see the module
    docstring).

    Step series. A training that starts again in the same process (a second ``trainer.train()``; SFT then
    GRPO) numbers its steps from the start again; recorded as they are, they would be merged into the first
    training's steps. A number at or below the last one given while the same telemetry runs opens a new
    series instead: its steps are recorded after every step this process recorded (``rl.step`` = the
    framework's number + an offset), the framework's own number kept as ``rl.framework_step``, and one
    warning names the overlap.
    """

    __slots__ = ("name", "first", "loose", "_counter", "_node", "number", "_series")

    def __init__(self, name: str = "step", *, first: int = 1, loose: bool = False) -> None:
        self.name = name
        self.first = first
        self.loose = loose
        self._counter = itertools.count(first)
        self._node: Node | None = None
        #: the number of the open step (or the last one) as the framework gave it, None before any
        self.number: Any = None
        #: (the handle they belong to, the last number given, the highest recorded, the offset): the series
        self._series: tuple[Any, int | None, int | None, int] = (None, None, None, 0)

    def begin(self, number: Any = None) -> None:
        """Open the umbrella for step ``number`` (None: the next of a per-process count). Never raises."""
        try:
            if self._node is not None:
                self.end()
            given = number is not None
            if number is None:
                number = next(self._counter)
            self.number = number
            attributes: dict[str, Any] = {"step": number}
            if given and type(number) is int:
                recorded = self._recorded(number)
                if recorded != number:
                    attributes = {"step": recorded, "framework_step": number}
            self._node = _open(_phase(self.name, None, attributes), None, self.loose, self.loose)
        except Exception as exc:
            internal_error(exc, "framework-step")

    def _recorded(self, number: int) -> int:
        """The ``rl.step`` of the framework's step ``number``: itself, or after a restart an offset one."""
        handle, last, top, offset = self._series
        if handle is not RUNTIME.handle:  # other telemetry (a new run, a test's recording): a fresh start
            handle, last, top, offset = RUNTIME.handle, None, None, 0
        if last is not None and top is not None and number <= last:
            offset = top + 1 - number
            warn_once(
                f"step-series-{self.name}-{top}",
                "lens_rl: a new training in this process numbers its %r steps from %s again (the last was %s): "
                "recorded as steps %s on (rl.framework_step keeps its own number), after this process's %s",
                self.name,
                number,
                last,
                number + offset,
                top,
            )
        recorded = number + offset
        self._series = (handle, number, recorded if top is None else max(top, recorded), offset)
        return recorded

    def end(self, exc: BaseException | None = None) -> None:
        """Close the open umbrella (none: nothing)."""
        node, self._node = self._node, None
        close_phase(node, exc)

    @property
    def is_open(self) -> bool:
        return self._node is not None

    def reset(self) -> None:
        """Close the open umbrella and restart the per-process count (an unweave). The step series stays: a
        training after a new weave is still not merged into the steps already recorded."""
        self.end()
        self._counter = itertools.count(self.first)
        self.number = None


def record_interval(
    name: str, start_ns: int, end_ns: int | None = None, *, bucket: Bucket | str | None = None, **rl_attributes: Any
) -> None:
    """Write phase ``name`` that ran from ``start_ns`` to ``end_ns`` (default now; ``time.time_ns`` clock) under
    the current context: a back-dated phase (a timer's ``record(name, seconds)``), its time credited to its
    bucket like any other. Never raises."""
    end = time.time_ns() if end_ns is None else end_ns
    close_phase(open_phase(name, bucket=bucket, start_ns=start_ns, **rl_attributes), end_ns=end)
