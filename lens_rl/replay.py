"""Send a run's stored spans (the file store) to an OTLP/HTTP collector, after the fact.

For a job that ran with the embedded file store, or whose collector was down for
longer than the retry window: ``lens-rl replay TRACE_DIR --otlp http://collector:4318``.
Trace, span and parent ids, times, attributes, events and resources are preserved,
so the collector sees the same trace the job made.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lens_rl._attributes import clean_attributes
from lens_rl.store import trace_time_ns

__all__ = ["record_to_span", "replay"]


def record_to_span(rec: Mapping[str, Any], resources: dict[Any, Any]) -> Any:
    """An OpenTelemetry ``ReadableSpan`` rebuilt from one file-store record.

    ``ValueError`` (or ``KeyError`` for an unknown kind or status) where the record holds
    no span OTLP can carry: ids that are not hex of their width. Attribute values are made
    OTLP-legal as when recorded (an integer past 64 bits as text); bad times read as 0.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    trace_id = _hex_id(rec["trace_id"], 128)
    sampled = TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(trace_id, _hex_id(rec["span_id"], 64), is_remote=False, trace_flags=sampled)
    parent = rec.get("parent_span_id")
    parent_ctx = SpanContext(trace_id, _hex_id(parent, 64), is_remote=False, trace_flags=sampled) if parent else None
    res_attrs = rec.get("resource") or {}
    key = tuple(sorted((k, str(v)) for k, v in res_attrs.items()))
    resource = resources.get(key)
    if resource is None:
        resource = resources[key] = Resource(clean_attributes(res_attrs))
    events = [Event(str(e.get("name") or ""), _attributes(e.get("attributes")), trace_time_ns(e.get("time_ns")))
              for e in rec.get("events") or []]  # fmt: skip
    links = [
        Link(SpanContext(_hex_id(link["trace_id"], 128), _hex_id(link["span_id"], 64), is_remote=True),
             _attributes(link.get("attributes")))  # fmt: skip
        for link in rec.get("links") or []
    ]
    return ReadableSpan(
        name=str(rec.get("name")),
        context=context,
        parent=parent_ctx,
        resource=resource,
        attributes=_attributes(rec.get("attributes")),
        events=events,
        links=links,
        kind=SpanKind[rec.get("kind") or "INTERNAL"],
        status=Status(StatusCode[rec.get("status") or "UNSET"], rec.get("status_message")),
        start_time=trace_time_ns(rec.get("start_ns")),
        end_time=trace_time_ns(rec.get("end_ns")),
        instrumentation_scope=InstrumentationScope(rec.get("scope") or "lens_rl"),
    )


def _hex_id(value: Any, bits: int) -> int:
    """A trace (128 bits) or span (64) id from its hex text; ``ValueError`` for anything else, or zero."""
    number = int(value, 16) if type(value) is str else -1
    if not 0 < number < 1 << bits:
        raise ValueError(f"no {bits}-bit hex id: {value!r}")
    return number


def _attributes(value: Any) -> dict[str, Any]:
    return clean_attributes(value) if type(value) is dict else {}


def replay(path: str | Path, endpoint: str, *, timeout_ms: int = 30_000, batch: int = 512) -> tuple[int, int]:
    """Export every span under ``path`` to ``endpoint``; returns (spans sent, bad lines skipped).

    Raises ``RuntimeError`` when the collector does not take them.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from lens_rl.store import ReadStats, iter_span_records

    stats = ReadStats()
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=timeout_ms / 1000.0)
    resources: dict[Any, Any] = {}
    sent = 0
    pending: list[Any] = []
    try:
        for rec in iter_span_records(path, stats):
            try:
                span = record_to_span(rec, resources)
            except (ValueError, KeyError):  # ids that are no hex of their width, an unknown kind or status: no span
                stats.skipped += 1
                continue
            pending.append(span)
            if len(pending) >= batch:
                if exporter.export(pending) is not SpanExportResult.SUCCESS:
                    raise RuntimeError(f"the collector at {endpoint} did not accept the spans")
                sent += len(pending)
                pending = []
        if pending:
            if exporter.export(pending) is not SpanExportResult.SUCCESS:
                raise RuntimeError(f"the collector at {endpoint} did not accept the spans")
            sent += len(pending)
    finally:
        exporter.shutdown()
    return sent, stats.skipped
