"""The enabled path of phases: the open-phase stack, starting and ending spans.

Each open phase is a :class:`_Node` on a contextvar stack (so threads and asyncio tasks
never see each other's), and in a process-wide table so shutdown can end what is
still open. Ending a phase records its exception, detaches its context, and credits
its time to its bucket exclusively: a bucketed phase's time is taken away from its
nearest bucketed ancestor. Telemetry's own faults stop at :func:`_internal_error`.
This module imports OpenTelemetry only inside the functions that run while on.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lens_rl import _state
from lens_rl._attributes import clean_attributes
from lens_rl.buckets import _AMBIENT, Bucket
from lens_rl.propagation import root_unless_current

if TYPE_CHECKING:
    from lens_rl.aspects import Phase

_log = logging.getLogger("lens_rl")
_WARNED = False


def _internal_error(exc: BaseException) -> None:
    """The one boundary for telemetry's own faults: log once, never raise into user code."""
    global _WARNED
    if not _WARNED:
        _WARNED = True
        _log.warning("lens_rl: telemetry error ignored (further ones are logged at debug): %r", exc, exc_info=exc)
    else:
        _log.debug("lens_rl: telemetry error ignored: %r", exc, exc_info=exc)


class _NoopSpan:
    """What a phase yields when telemetry is off: the span methods, doing nothing."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        pass

    def record_exception(self, exception: BaseException, attributes: Mapping[str, Any] | None = None) -> None:
        pass

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        pass

    def is_recording(self) -> bool:
        return False

    def get_span_context(self) -> Any:
        """OpenTelemetry's invalid span context (imported only when asked for)."""
        from opentelemetry.trace import INVALID_SPAN_CONTEXT

        return INVALID_SPAN_CONTEXT

    def __bool__(self) -> bool:
        return False


NOOP_SPAN = _NoopSpan()


class PhaseSpan(_NoopSpan):
    """What a phase yields when on: the span methods, with attribute values coerced and secrets redacted."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attributes(clean_attributes({key: value}))

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes(clean_attributes(attributes))

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        self.span.add_event(str(name), clean_attributes(attributes), timestamp)

    def record_exception(self, exception: BaseException, attributes: Mapping[str, Any] | None = None) -> None:
        self.span.record_exception(exception, clean_attributes(attributes))

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        self.span.set_status(*args, **kwargs)

    def is_recording(self) -> bool:
        return bool(self.span.is_recording())

    def get_span_context(self) -> Any:
        return self.span.get_span_context()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.span, name)  # the rest of the OpenTelemetry span API

    def __bool__(self) -> bool:
        return True


class _Node:
    """One open phase: the entry on this context's phase stack."""

    __slots__ = ("phase", "span", "token", "bucket", "t0", "child_s", "prev", "__weakref__")

    def __init__(self, phase: Phase, span: Any, token: Any, bucket: Bucket | None, prev: _Node | None) -> None:
        self.phase = phase
        self.span = span
        self.token = token
        self.bucket = bucket
        self.prev = prev
        self.child_s = 0.0
        self.t0 = time.perf_counter()


_ACTIVE: contextvars.ContextVar[_Node | None] = contextvars.ContextVar("lens_rl_phase", default=None)
_OPEN: dict[int, _Node] = {}  # every open phase in the process, so shutdown can end them


def _start(phase: Phase, make_current: bool = True) -> _Node | None:
    """Open ``phase``'s span; None when telemetry turns out to be off. Never raises."""
    try:
        handle = _state.HANDLE or _state.resolve()
        if handle is None:
            return None
        from opentelemetry import context, trace

        bucket = phase.bucket
        if bucket is None:
            ambient = _AMBIENT.get()
            bucket = ambient[0] if ambient is not None else phase._default
        prev = _ACTIVE.get()
        parent_ctx = None
        if phase.parent is not None:
            parent_ctx = phase._parent()
        if parent_ctx is None and prev is None:
            parent_ctx = root_unless_current()
        span = handle.tracer.start_span(phase.name, context=parent_ctx, attributes=phase._attributes(bucket))
        token = context.attach(trace.set_span_in_context(span, parent_ctx)) if make_current else None
        node = _Node(phase, span, token, bucket, prev)
        _ACTIVE.set(node)
        _OPEN[id(node)] = node
        return node
    except Exception as exc:
        _internal_error(exc)
        return None


def _enter(phase: Phase) -> Any:
    node = _start(phase)
    return NOOP_SPAN if node is None else PhaseSpan(node.span)


def _exit(phase: Phase, exc_type: Any, exc: Any) -> None:
    node = _ACTIVE.get()
    if node is None:
        return
    if node.phase is not phase:
        # Not the innermost entry: a generator interleaved its phases with ours, or this
        # phase was entered while telemetry was off. Look further down, else nothing to do.
        while node is not None and node.phase is not phase:
            node = node.prev
        if node is None or id(node) not in _OPEN:
            return
    _stop(node, exc)


def _stop(node: _Node, exc: BaseException | None) -> None:
    """Close ``node``: record the exception, detach, end, count the bucket time. Never raises."""
    try:
        duration_s = time.perf_counter() - node.t0
        if _ACTIVE.get() is node:
            _ACTIVE.set(node.prev)
        if _OPEN.pop(id(node), None) is None:
            return  # already ended (shutdown got there first)
        span = node.span
        if exc is not None:
            if isinstance(exc, Exception):
                from opentelemetry.trace import Status, StatusCode

                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:1024]))
            else:
                span.add_event("rl.interrupted", {"exception.type": type(exc).__name__})
        if node.token is not None:
            from opentelemetry import context

            try:
                context.detach(node.token)
            except Exception:
                pass
        span.end()
        bucket = node.bucket
        exclusive_s = duration_s
        if bucket is not None:
            exclusive_s = duration_s - node.child_s
            outer = node.prev
            while outer is not None and outer.bucket is None:
                outer = outer.prev
            if outer is not None:
                outer.child_s += duration_s
        handle = _state.HANDLE
        if handle is not None:
            if handle.phase_metrics is not None:
                handle.phase_metrics.record(node.phase.name, bucket.value if bucket else None, duration_s, exclusive_s)
            if handle.config.flush_on_step and bucket is None and node.phase.rl_attributes and "step" in node.phase.rl_attributes:
                handle.force_flush(handle.config.export_timeout_ms)
    except Exception as exc:
        _internal_error(exc)


def _end_open_spans() -> None:
    """End every open lens_rl span (shutdown): they are exported with their time so far."""
    for node in list(_OPEN.values()):
        if _OPEN.pop(id(node), None) is not None:
            try:
                node.span.set_attribute("rl.ended_by_shutdown", True)
                node.span.end()
            except Exception as exc:
                _internal_error(exc)


def _forget_open_spans() -> None:
    _OPEN.clear()
    _ACTIVE.set(None)
