"""Replay's pass over the files: every stored row of a run rebuilt as the OpenTelemetry span it was
(:mod:`lens_rl.offline.show.replay` sends them).

Example::

    stats = ReadStats()
    for span in stored_spans(span_files(run_dir), stats):
        ...                          # a ReadableSpan; rows OTLP cannot carry are counted in stats.skipped
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lens_rl._attributes import clean_attributes
from lens_rl.store import OWN_SCOPE, Head, ReadStats, Row, iter_rows, span_files, trace_time_ns

__all__ = ["ReadStats", "row_to_span", "span_files", "stored_spans"]


def row_to_span(head: Head, row: Row, resources: dict[int, Any]) -> Any:
    """An OpenTelemetry ``ReadableSpan`` rebuilt from one stored row (under its header's resource).

    ``ValueError`` (or ``KeyError`` for an unknown kind or status) where the row holds no span OTLP can
    carry: ids that are not hex of their width. Attribute values are made OTLP-legal as when recorded (an
    integer past 64 bits as text); bad times read as 0.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    trace_id = _hex_id(row.t, 128)
    sampled = TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(trace_id, _hex_id(row.s, 64), is_remote=False, trace_flags=sampled)
    parent_ctx = (
        SpanContext(trace_id, _hex_id(row.p, 64), is_remote=bool(row.pr), trace_flags=sampled) if row.p else None
    )
    resource = resources.get(id(head))
    if resource is None:
        resource = resources[id(head)] = Resource(clean_attributes(head.resource))
    events = [Event(str(e.get("n") or ""), _attributes(e.get("a")), trace_time_ns(e.get("ts"))) for e in row.ev or ()]
    links = [
        Link(
            SpanContext(_hex_id(link.get("t"), 128), _hex_id(link.get("s"), 64), is_remote=True),
            _attributes(link.get("a")),
        )
        for link in row.ln or ()
    ]
    return ReadableSpan(
        name=str(row.n),
        context=context,
        parent=parent_ctx,
        resource=resource,
        attributes=_attributes(row.a),
        events=events,
        links=links,
        kind=SpanKind[row.k or "INTERNAL"],
        status=Status(StatusCode[row.st or "UNSET"], row.sm),
        start_time=trace_time_ns(row.b),
        end_time=trace_time_ns(row.e),
        instrumentation_scope=InstrumentationScope(row.sc or OWN_SCOPE),
    )


def _hex_id(value: Any, bits: int) -> int:
    """A trace (128 bits) or span (64) id from its hex text; ``ValueError`` for anything else, or zero."""
    number = int(value, 16) if type(value) is str else -1
    if not 0 < number < 1 << bits:
        raise ValueError(f"no {bits}-bit hex id: {value!r}")
    return number


def _attributes(value: Any) -> dict[str, Any]:
    return clean_attributes(value) if type(value) is dict else {}


def stored_spans(files: Sequence[str | Path], stats: ReadStats) -> Iterator[Any]:
    """Every row of ``files`` in order, as a ``ReadableSpan`` (one resource per header); a row that holds no
    span OTLP can carry (ids that are no hex of their width, an unknown kind or status) is counted in
    ``stats.skipped`` and left out, as are the lines the reader skips."""
    resources: dict[int, Any] = {}
    for head, row in (pair for file in files for pair in iter_rows(file, stats)):
        try:
            yield row_to_span(head, row, resources)
        except (ValueError, KeyError):
            stats.skipped += 1
