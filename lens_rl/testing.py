"""Testing helpers and the pytest plugin (entry point ``pytest11: lens_rl``).

* ``lens_spans`` fixture: telemetry on, in memory, for one test; returns a
  :class:`SpanRecorder` of finished spans; resets lens_rl's global state afterwards.
* :func:`recording` — the same as a context manager, outside pytest.
* :func:`reset` — forget all lens_rl global state (shuts a live handle down, bounded).
* :class:`OTLPReceiver` — a real OTLP/HTTP receiver on loopback.

Example::

    def test_my_step_is_traced(lens_spans):
        run_step()
        span = lens_spans.find("generation")
        assert span.attributes["rl.bucket"] == "productive"
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from lens_rl._receiver import OTLPReceiver, hung_endpoint, refused_endpoint

__all__ = ["OTLPReceiver", "SpanRecorder", "hung_endpoint", "recording", "refused_endpoint", "reset"]


def reset(timeout_ms: int = 500) -> None:
    """Shut down any live telemetry (bounded) and forget every piece of global state."""
    from lens_rl._runtime import RUNTIME
    from lens_rl.integrations.aiohttp import uninstrument_aiohttp_client
    from lens_rl.lifecycle import shutdown_telemetry

    if RUNTIME.handle is not None:
        shutdown_telemetry(timeout_ms)
    uninstrument_aiohttp_client()
    RUNTIME.reset()


class SpanRecorder:
    """Finished spans recorded in memory, with small helpers for assertions."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.metric_reader: Any = None
        self.handle: Any = None

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


@contextlib.contextmanager
def recording(
    *, worker_group: str = "test", rank: int = 0, world_size: int = 1, **config: Any
) -> Iterator[SpanRecorder]:
    """Telemetry on, in memory, inside the block; global state reset on the way out."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from lens_rl.config import TelemetryConfig
    from lens_rl.handle import TelemetryHandle
    from lens_rl.identity import worker_attributes
    from lens_rl.lifecycle import activate

    reset()
    recorder = SpanRecorder()
    settings: dict[str, Any] = {"enabled": True, "exporter": "none", "run_id": "test"}
    settings.update(config)
    cfg = TelemetryConfig(**settings)
    attrs, _ = worker_attributes(
        service_name=cfg.service_name, rank=rank, world_size=world_size, worker_group=worker_group
    )
    recorder.metric_reader = InMemoryMetricReader()
    handle = TelemetryHandle(cfg, attrs, metric_readers=[recorder.metric_reader])
    if handle.tracer_provider is not None:
        handle.tracer_provider.add_span_processor(SimpleSpanProcessor(recorder.exporter))
    recorder.handle = handle
    activate(handle)
    try:
        yield recorder
    finally:
        reset()


try:
    import pytest
except ImportError:  # pragma: no cover - the helpers work without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def lens_spans() -> Iterator[SpanRecorder]:
        """Telemetry on, in memory, for this test: the finished spans it records."""
        with recording() as recorder:
            yield recorder
