"""Shared by the benchmarks: a clean environment and a provider with a no-op export pipeline."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


def clean_environment() -> None:
    """Drop LENS_RL_* and OTEL_* variables so the benchmark measures defaults."""
    for key in [k for k in os.environ if k.startswith(("LENS_RL_", "OTEL_"))]:
        del os.environ[key]


@contextlib.contextmanager
def null_pipeline(**config: Any) -> Iterator[Any]:
    """Telemetry on, its provider feeding lens_rl's span pipeline into an exporter that does nothing.

    Yields the recording (``.handle.tracer`` is the tracer raw OpenTelemetry is timed with).
    """
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from lens_rl import testing
    from lens_rl.export.pipeline import SpanPipeline

    class NullExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    with testing.recording(**config) as rec:
        provider = rec.handle.tracer_provider
        provider._active_span_processor._span_processors = ()  # drop the in-memory recorder
        provider.add_span_processor(SpanPipeline(NullExporter()))
        yield rec
