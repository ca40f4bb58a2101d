"""Send a run's stored spans (the file store) to an OTLP/HTTP collector, after the fact.

For a job that ran with the embedded file store, or whose collector was down for
longer than the retry window: ``lens-rl replay TRACE_DIR --otlp http://collector:4318``.
Trace, span and parent ids, times, attributes, events and resources are preserved,
so the collector sees the same trace the job made.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lens_rl._attributes import clean_attributes
from lens_rl.store import OWN_SCOPE, Head, ReadStats, Row, iter_rows, span_files, trace_time_ns

__all__ = ["replay", "row_to_span"]


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


_ERRNO = re.compile(r"\[Errno -?\d+\] [^\"')]+")


class _Outcome(logging.Handler):
    """Keeps why the OpenTelemetry exporter failed, from its first log line (said once by :func:`replay`):
    an OS error's own words where it names one (``[Errno 111] Connection refused``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.last is not None:
            return
        with contextlib.suppress(Exception):
            message = record.getMessage()
            cause = _ERRNO.search(message)
            self.last = cause.group(0).strip() if cause else message.splitlines()[0][:200]


@contextlib.contextmanager
def _muted() -> Iterator[_Outcome]:
    """The exporter's log lines (OpenTelemetry's, and its HTTP stack's) kept from the terminal: replay prints
    only its own lines, and says the exporter's last one in its error."""
    outcome = _Outcome()
    loggers = [logging.getLogger(name) for name in ("opentelemetry", "urllib3")]
    saved = [(lg.handlers, lg.propagate, lg.level) for lg in loggers]
    for lg in loggers:
        lg.handlers, lg.propagate = [outcome], False
        lg.setLevel(logging.WARNING)
    try:
        yield outcome
    finally:
        for lg, (handlers, propagate, level) in zip(loggers, saved, strict=True):
            lg.handlers, lg.propagate = handlers, propagate
            lg.setLevel(level)


def replay(
    path: str | Path,
    endpoint: str,
    *,
    timeout_ms: int = 30_000,
    batch: int = 512,
    paths: Sequence[Path] | None = None,
) -> tuple[int, int]:
    """Export every span under ``path`` (of the span files ``paths``, when given) to ``endpoint``; returns
    (spans sent, bad lines skipped).

    Raises ``RuntimeError`` when the collector does not take them, saying the exporter's last word (its own
    log lines are not shown).
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    stats = ReadStats()
    files = span_files(path) if paths is None else paths
    with _muted() as outcome:
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=timeout_ms / 1000.0)
        resources: dict[Any, Any] = {}
        sent = 0
        pending: list[Any] = []

        def flush() -> None:
            nonlocal sent, pending
            if exporter.export(pending) is not SpanExportResult.SUCCESS:
                said = f" ({outcome.last})" if outcome.last else ""
                raise RuntimeError(f"the collector at {endpoint} did not accept the spans{said}; {sent} sent before")
            sent += len(pending)
            pending = []

        try:
            for head, row in (pair for file in files for pair in iter_rows(file, stats)):
                try:
                    span = row_to_span(head, row, resources)
                except (ValueError, KeyError):  # ids that are no hex of their width, an unknown kind or status
                    stats.skipped += 1
                    continue
                pending.append(span)
                if len(pending) >= batch:
                    flush()
            if pending:
                flush()
        finally:
            exporter.shutdown()
    return sent, stats.skipped
