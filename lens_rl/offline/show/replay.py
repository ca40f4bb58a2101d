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

from lens_rl.offline.run.replay import ReadStats, span_files, stored_spans

__all__ = ["replay"]


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

    from lens_rl._attributes import hide_header_entries, mask_url

    hide_header_entries()  # (the exporter reads OTEL_EXPORTER_OTLP_HEADERS: a bad entry's text is never said)
    stats = ReadStats()
    files = span_files(path) if paths is None else paths
    with _muted() as outcome:
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=timeout_ms / 1000.0)
        sent = 0
        pending: list[Any] = []

        def flush() -> None:
            nonlocal sent, pending
            if exporter.export(pending) is not SpanExportResult.SUCCESS:
                said = f" ({outcome.last})" if outcome.last else ""
                said = f"the collector at {endpoint} did not accept the spans{said}; {sent} sent before"
                raise RuntimeError(mask_url(said))  # (the URL's password, here and in the exporter's words: never said)
            sent += len(pending)
            pending = []

        try:
            for span in stored_spans(files, stats):
                pending.append(span)
                if len(pending) >= batch:
                    flush()
            if pending:
                flush()
        finally:
            exporter.shutdown()
    return sent, stats.skipped
