"""`SpanRecorder`: finished spans and metrics recorded in memory, with small helpers for assertions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lens_rl._runtime import Handle

__all__ = ["SpanRecorder"]


class SpanRecorder:
    """Finished spans recorded in memory, with small helpers for assertions."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.metric_reader: Any = None
        self.handle: Handle | None = None

    @property
    def spans(self) -> list[Any]:
        """Finished spans (OpenTelemetry ``ReadableSpan``), in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def names(self) -> list[str]:
        return [s.name for s in self.spans]

    def find(self, name: str) -> Any:
        """The first finished span called ``name``; ``AssertionError`` listing what exists if none."""
        for span in self.spans:
            if span.name == name:
                return span
        raise AssertionError(f"no span named {name!r}; finished spans: {self.names()}")

    def find_all(self, name: str) -> list[Any]:
        return [s for s in self.spans if s.name == name]

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> data points, collected now (phase metrics drained first)."""
        if self.handle is not None and self.handle.phase_metrics is not None:
            self.handle.phase_metrics.drain()
        data = self.metric_reader.get_metrics_data() if self.metric_reader is not None else None
        out: dict[str, list[Any]] = {}
        for rm in getattr(data, "resource_metrics", []) or []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out

    def clear(self) -> None:
        self.exporter.clear()
