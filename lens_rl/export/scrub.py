"""What the span pipeline does to a span besides queueing it: estimates the memory it holds while queued
(:func:`span_bytes`, what ``max_queue_bytes`` bounds) and scrubs it before it leaves the process
(:func:`scrub`: secrets redacted, strings repaired, whoever set them)."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from lens_rl._attributes import clean_text, scrub_attributes
from lens_rl.export._sdk import attributes_dict

__all__ = ["scrub", "span_bytes"]


def span_bytes(span: ReadableSpan) -> int:
    """A cheap estimate of what ``span`` holds in memory while queued (strings dominate)."""
    size = 400 + len(span.name)
    # The fields, not the properties (each read of which makes a read-only view); the SDK's
    # BoundedAttributes locks on every read, its plain dict (1.33+) does not.
    attrs = getattr(span, "_attributes", None)
    if attrs:
        for key, value in attributes_dict(attrs).items():
            size += 64 + len(key) + (len(value) if value.__class__ is str else 16)
    for event in getattr(span, "_events", None) or ():
        size += 128 + len(event.name)
        if event.attributes:
            for key, value in attributes_dict(event.attributes).items():
                size += 64 + len(key) + (len(value) if value.__class__ is str else 16)
    return size


def scrub(span: ReadableSpan) -> ReadableSpan:
    """``span`` with secrets redacted and strings repaired in its name, attributes, events and links.

    The same object when nothing needed a change (the common case). A lens_rl phase span
    (:class:`lens_rl.export.fastspan.FastSpan`) was cleaned as it was made and written (its name
    too: a phase's name is cleaned once, ``update_name`` cleans): nothing to do.
    """
    if getattr(span, "cleaned", False):
        return span
    name = clean_text(span.name)
    attrs = scrub_attributes(span.attributes)
    events = list(span.events)
    changed = name is not span.name or attrs is not span.attributes
    for i, event in enumerate(events):
        cleaned = scrub_attributes(event.attributes)
        event_name = clean_text(event.name)
        if cleaned is not event.attributes or event_name is not event.name:
            from opentelemetry.sdk.trace import Event

            events[i] = Event(event_name, cleaned, event.timestamp)
            changed = True
    links = list(span.links)
    for i, link in enumerate(links):
        cleaned = scrub_attributes(link.attributes)
        if cleaned is not link.attributes:
            from opentelemetry.trace import Link

            links[i] = Link(link.context, cleaned)
            changed = True
    if not changed:
        return span
    copy = ReadableSpan(
        name=name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attrs,
        events=events,
        links=links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
    copy._lens_thread = getattr(span, "_lens_thread", None)  # type: ignore[attr-defined]
    copy._lens_thread_name = getattr(span, "_lens_thread_name", None)  # type: ignore[attr-defined]
    return copy
