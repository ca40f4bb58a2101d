"""The span twins: what a phase yields, the no-op span when off and the recording one when on.

Both have every method of :class:`SpanLike` with the same signatures, so user code never branches on
whether telemetry is on, and neither raises where the other would not: a fault recording is telemetry's
own (logged once). The recording twin cleans values and redacts secrets as they are set.

Example::

    with traced_phase("generation") as span:     # NoopSpan off, PhaseSpan on
        span.set_attribute("rl.num_prompts", 64)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from lens_rl._attributes import OPENING_KEYS, clean_attributes, clean_text, exception_event, safe_str, without
from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME

__all__ = ["NOOP_SPAN", "NoopSpan", "PhaseSpan", "SpanLike", "current_span", "record_exception", "safe_str"]


@runtime_checkable
class SpanLike(Protocol):
    """What a phase yields: the no-op span when off, the recording one when on. Same methods, same signatures.

    Neither raises on any argument: telemetry on never raises where off did not.
    """

    def set_attribute(self, key: str, value: Any) -> None: ...
    def set_attributes(self, attributes: Any) -> None: ...
    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None: ...
    def add_link(self, context: Any, attributes: Any = None) -> None: ...
    def record_exception(
        self, exception: Any, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None: ...
    def set_status(self, status: Any, description: str | None = None) -> None: ...
    def update_name(self, name: str) -> None: ...
    def is_recording(self) -> bool: ...
    def get_span_context(self) -> Any: ...


class NoopSpan:
    """What a phase yields when telemetry is off: every :class:`SpanLike` method, doing nothing."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Any) -> None:
        pass

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        pass

    def add_link(self, context: Any, attributes: Any = None) -> None:
        pass

    def record_exception(
        self, exception: Any, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None:
        pass

    def set_status(self, status: Any, description: str | None = None) -> None:
        pass

    def update_name(self, name: str) -> None:
        pass

    def is_recording(self) -> bool:
        return False

    def get_span_context(self) -> Any:
        """OpenTelemetry's invalid span context (imported only when asked for)."""
        from opentelemetry.trace import INVALID_SPAN_CONTEXT

        return INVALID_SPAN_CONTEXT

    def __bool__(self) -> bool:
        return False


NOOP_SPAN = NoopSpan()


def _pairs(attributes: Any) -> Mapping[str, Any] | None:
    """A mapping from what users pass as attributes: a mapping, or a sequence of pairs."""
    if attributes is None or isinstance(attributes, Mapping):
        return attributes
    if isinstance(attributes, Sequence) and not isinstance(attributes, (str, bytes)):
        out = {}
        for item in attributes:
            if isinstance(item, Sequence) and not isinstance(item, (str, bytes)) and len(item) == 2:
                out[str(item[0])] = item[1]
        return out
    return None


class PhaseSpan:
    """What a phase yields when on: every :class:`SpanLike` method, recording; values cleaned, secrets redacted.

    Never raises: a fault is telemetry's own (logged once), as off would have accepted the call. ``rl.bucket``
    and ``rl.step`` set here are dropped: the phase's bucket and step were decided when it opened.
    """

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set_attribute(self, key: str, value: Any) -> None:
        try:
            self._span.set_attributes(without(clean_attributes({str(key): value}), OPENING_KEYS))
        except Exception as exc:
            internal_error(exc, "span-api")

    def set_attributes(self, attributes: Any) -> None:
        try:
            self._span.set_attributes(without(clean_attributes(_pairs(attributes)), OPENING_KEYS))
        except Exception as exc:
            internal_error(exc, "span-api")

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        try:
            ts = timestamp if isinstance(timestamp, int) and not isinstance(timestamp, bool) else None
            self._span.add_event(clean_text(name), clean_attributes(_pairs(attributes)), ts)
        except Exception as exc:
            internal_error(exc, "span-api")

    def add_link(self, context: Any, attributes: Any = None) -> None:
        try:
            from opentelemetry.trace import SpanContext

            if isinstance(context, SpanContext):
                self._span.add_link(context, clean_attributes(_pairs(attributes)))
        except Exception as exc:
            internal_error(exc, "span-api")

    def record_exception(
        self, exception: Any, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None:
        try:
            attrs = clean_attributes(_pairs(attributes))
            if isinstance(exception, BaseException):
                record_exception(self._span, exception, attrs)
            else:
                attrs.setdefault("exception.message", clean_text(exception))
                self._span.add_event("exception", attrs)
        except Exception as exc:
            internal_error(exc, "span-api")

    def set_status(self, status: Any, description: str | None = None) -> None:
        try:
            from opentelemetry.trace import Status, StatusCode

            if isinstance(status, Status):
                self._span.set_status(status)
            elif isinstance(status, StatusCode):
                self._span.set_status(status, None if description is None else clean_text(description))
        except Exception as exc:
            internal_error(exc, "span-api")

    def update_name(self, name: str) -> None:
        try:
            if isinstance(name, str) and name.strip():
                self._span.update_name(clean_text(name))
        except Exception as exc:
            internal_error(exc, "span-api")

    def is_recording(self) -> bool:
        try:
            return bool(self._span.is_recording())
        except Exception as exc:
            internal_error(exc, "span-api")
            return False

    def get_span_context(self) -> Any:
        return self._span.get_span_context()

    def __bool__(self) -> bool:
        return True


def record_exception(span: Any, exc: BaseException, attributes: Mapping[str, Any] | None = None) -> None:
    """Add the exception event to ``span`` (any span: the SDK's or the fast one)."""
    span.add_event("exception", exception_event(exc, attributes))


def current_span() -> Any:
    """The current phase's span object (the same methods on and off), e.g. inside a decorated method.

    Example::

        @traced_phase("generation")
        def generate(self, prompts):
            outputs = self.llm.generate(prompts)
            lens_rl.current_span().set_attribute("rl.num_tokens", sum(len(o) for o in outputs))
    """
    if RUNTIME.handle is None:
        return NOOP_SPAN
    try:
        from opentelemetry import trace

        span = trace.get_current_span()
        return PhaseSpan(span) if span.is_recording() else NOOP_SPAN
    except Exception as exc:
        internal_error(exc, "current-span")
        return NOOP_SPAN
