"""Phase spans without the SDK's per-span machinery: what a phase records while telemetry is on.

The OpenTelemetry SDK spends ~23 µs making, filling and ending one span (a sampler
call, an id generator, a lock per span, a ``BoundedAttributes`` that validates and
locks on every write, processor fan-out on start and end). A phase needs none of that
on the thread that runs it: :class:`FastSpan` *is* a ``ReadableSpan`` (so every span
processor, exporter and test that reads SDK spans reads it unchanged) and an
OpenTelemetry API ``Span`` (so it can be current: child spans of any library, and
``traceparent`` injection, see its context). It is filled in place with plain dicts,
applies the SDK's span limits itself, and on ``end()`` hands itself to the provider's
span processors, lens_rl's export pipeline among them. Encoding happens later, in the
export thread (:mod:`lens_rl.export.otlp`, or the file store's line writer).

Sampling is the one rule of :mod:`lens_rl.export.sampling`. A phase not kept is a non-recording span that
still carries its context, so its children follow it. Every span processor's ``on_start`` sees a phase as
it starts, ``on_end`` as it ends.

Example (what :func:`lens_rl.record.engine.open_node` does)::

    span = factory.start(name, parent_span_context, attributes, start_ns)
    ...
    span.end(end_ns)      # now queued for export
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from lens_rl._attributes import clean_attributes, clean_text, exception_event
from lens_rl.export._sdk import span_fan_out
from lens_rl.export.ids import getrandbits
from lens_rl.export.sampling import keep

__all__ = ["FastSpan", "FastSpanFactory", "remember"]

_log = logging.getLogger("lens_rl")

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
UNSET_STATUS = Status(
    StatusCode.UNSET
)  # one object: "is UNSET_STATUS" tells an untouched status (exporters rely on it)
_INTERNAL = SpanKind.INTERNAL
_getrandbits = getrandbits  # lens_rl's own stream, never the job's random
_new_context = tuple.__new__
_NO_STATE = trace_api.DEFAULT_TRACE_STATE


class FastSpan(trace_api.Span, ReadableSpan):  # type: ignore[misc]
    """A recording phase span: an API span while open, the ``ReadableSpan`` processors get once ended.

    Writes after ``end()`` are ignored (as the SDK's are). Values are cleaned as lens_rl
    cleans every attribute (strings repaired, unsupported types as text); secrets are
    redacted in the export thread, whoever set them.
    """

    #: every attribute, event and link went through lens_rl's cleaning and redaction as it was set
    cleaned = True
    #: what the span is a function of but for its ids and times (hashable), while nothing else was written
    #: since the start: exporters encode a shape once; None once the span's name, attributes, events, links
    #: or status are written
    shape: Any = None
    _kind = _INTERNAL
    _instrumentation_info = None
    _end_time: int | None = None
    _events: Sequence[Event] = ()
    _links: Sequence[Link] = ()
    _status = UNSET_STATUS
    _dropped = (0, 0, 0)  # attributes, events, links over the span limits (a list once one is)

    def __init__(
        self,
        factory: FastSpanFactory,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        start_ns: int,
    ) -> None:
        # ReadableSpan's fields, set directly (its __init__ would make a Resource per span when given none);
        # those every phase starts with alike are class attributes until written
        self._name = name
        self._context = context
        self._instrumentation_scope = factory.scope
        self._parent = parent
        self._start_time = start_ns
        self._attributes = self._attrs = attributes  # the same dict: ReadableSpan's field, and ours to write
        self._resource = factory.resource
        self._factory = factory
        if len(attributes) > factory.max_attributes or factory.max_length is not None:
            self._attributes = self._attrs = {}
            self.set_attributes(attributes)

    # ------------------------------------------------------------------ the API span

    def get_span_context(self) -> SpanContext:
        return self._context  # type: ignore[return-value]  # always set here

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attribute(self, key: str, value: Any) -> None:
        self.set_attributes({key: value})

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._end_time is not None or not attributes:
            return
        self.shape = None
        attrs = self._attrs
        factory = self._factory
        limit, length = factory.max_attributes, factory.max_length
        for key, value in clean_attributes(attributes).items():
            if key not in attrs and len(attrs) >= limit:
                self._drop(0)
                continue
            if length is not None:
                value = _truncated(value, length)
            attrs[key] = value

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if self._end_time is not None:
            return
        self.shape = None
        factory = self._factory
        if len(self._events) >= factory.max_events:
            self._drop(1)
            return
        if not isinstance(self._events, list):
            self._events = []
        attrs = clean_attributes(attributes) if attributes else {}
        if len(attrs) > factory.max_event_attributes:
            attrs = dict(list(attrs.items())[: factory.max_event_attributes])
        self._events.append(Event(clean_text(name), attrs, timestamp if timestamp is not None else time.time_ns()))

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        if self._end_time is not None or not isinstance(context, SpanContext) or not context.is_valid:
            return
        self.shape = None
        if len(self._links) >= self._factory.max_links:
            self._drop(2)
            return
        if not isinstance(self._links, list):
            self._links = []
        self._links.append(Link(context, clean_attributes(attributes) if attributes else None))

    def _drop(self, which: int) -> None:
        dropped = list(self._dropped)
        dropped[which] += 1
        self._dropped = tuple(dropped)  # type: ignore[assignment]

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = clean_text(name)
            self.shape = None

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end_time is not None or self._status.status_code is StatusCode.OK:
            return  # OK is final, as in the SDK
        self.shape = None
        if isinstance(status, Status):
            self._status = status
        elif isinstance(status, StatusCode):
            self._status = Status(status, description if status is StatusCode.ERROR else None)

    def record_exception(
        self, exception: BaseException, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None:
        self.add_event("exception", exception_event(exception, attributes, escaped), timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            return
        self._end_time = end_time if end_time is not None else time.time_ns()
        self._factory.on_end(self)

    # ------------------------------------------------------------------ the readable span

    @property
    def dropped_attributes(self) -> int:
        return self._dropped[0]

    @property
    def dropped_events(self) -> int:
        return self._dropped[1]

    @property
    def dropped_links(self) -> int:
        return self._dropped[2]

    def __repr__(self) -> str:
        return f'FastSpan(name="{self._name}", context={self._context})'


def _truncated(value: Any, length: int) -> Any:
    if isinstance(value, str):
        return value[:length]
    if isinstance(value, tuple):
        return tuple(v[:length] if isinstance(v, str) else v for v in value)
    return value


class FastSpanFactory:
    """Starts :class:`FastSpan` s for one handle: its resource, scope, limits, sampling and processors."""

    def __init__(self, fan_out: Any, resource: Any, version: str, sample_rate: float, root_span_id: Any) -> None:
        self.resource = resource
        self.scope = InstrumentationScope("lens_rl", version)
        self._fan_out = fan_out  # the provider's fan-out to its span processors (those added later too)
        limits = SpanLimits()  # the SDK's defaults and OTEL_SPAN_*_LIMIT variables, as the provider applies them
        self.max_attributes = _limit(limits.max_span_attributes)
        self.max_length = limits.max_span_attribute_length
        self.max_events = _limit(limits.max_events)
        self.max_links = _limit(limits.max_links)
        self.max_event_attributes = _limit(limits.max_event_attributes)
        self.sample_rate = sample_rate
        self._root_span_id = root_span_id  # () -> the job root's span id, or None
        self.on_end = fan_out.on_end  # every processor's on_end, in the order the provider calls them

    @classmethod
    def for_provider(
        cls, provider: Any, resource: Any, version: str, sample_rate: float, root_span_id: Any
    ) -> FastSpanFactory | None:
        """The factory for ``provider``'s processors; None when its fan-out cannot be reached (phases are then
        the SDK's own spans, through the same sampling rule)."""
        fan_out = span_fan_out(provider)
        return None if fan_out is None else cls(fan_out, resource, version, sample_rate, root_span_id)

    def start(
        self,
        name: str,
        parent: SpanContext,
        attributes: dict[str, Any],
        start_ns: int,
        shape: Any = None,
        parent_context: Any = None,
    ) -> trace_api.Span:
        """A new span under ``parent`` (an invalid context: a new trace), recording unless sampled out; every
        span processor's ``on_start`` sees it (``parent_context``: the context it starts in)."""
        valid = parent[0] and parent[1]  # is_valid (a SpanContext is a tuple; its properties are Python calls)
        sampled = keep(name, parent, self._root_span_id(), self.sample_rate)
        span_id = _getrandbits(64) or 1
        trace_id = parent[0] if valid else _getrandbits(128) or 1
        # SpanContext's own fields (a tuple), its validation skipped: these ids are valid by construction
        context = _new_context(
            SpanContext,
            (trace_id, span_id, False, SAMPLED if sampled else NOT_SAMPLED, parent[4] if valid else _NO_STATE, True),
        )
        if not sampled:
            return NonRecordingSpan(context)
        span = FastSpan(self, name, context, parent if valid else None, attributes, start_ns)
        if shape is not None:
            span.shape = shape
        self._fan_out.on_start(span, parent_context)
        return span


#: How many shapes the exporters' per-shape caches hold (a run has a few dozen phases x buckets x steps in flight).
SHAPE_CACHE_MAX = 1024


def remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    """``value``, stored under ``key`` in one of the exporters' per-shape caches. A full cache is emptied
    (what is still in use is made again once), so memory stays bounded however many shapes a run makes."""
    if len(cache) >= SHAPE_CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


def _limit(value: int | None) -> int:
    return value if value is not None else 2**62
