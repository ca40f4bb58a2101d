"""Live metrics: phases' bucket seconds, counts and durations recorded off the hot path; drops and metric export errors reported, muted in an outage."""

from __future__ import annotations

import time
from typing import Any

import pytest

import lens_rl
from lens_rl.testing import OTLPReceiver


def _otlp(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": endpoint, "metrics_enabled": False, **extra}}


def test_metric_export_errors_are_muted_during_an_outage(caplog: pytest.LogCaptureFixture) -> None:
    """A collector that is down: one lens_rl warning for metrics, then quiet, like spans."""
    from lens_rl.testing import refused_endpoint

    lens_rl.init_telemetry_driver(
        {
            "telemetry": {
                "enabled": True,
                "exporter": "otlp",
                "endpoint": refused_endpoint(),
                "metrics_interval_ms": 100,
                "export_timeout_ms": 200,
            }
        },
        "grpo",
    )
    for _ in range(3):
        lens_rl.flush_telemetry(300)
    time.sleep(0.5)
    ours = [r.getMessage() for r in caplog.records if r.name == "lens_rl" and "metric export" in r.getMessage()]
    theirs = [r for r in caplog.records if "metric_exporter" in r.name]
    assert sum("failing" in m for m in ours) == 1
    assert len(theirs) <= 3


def test_drops_past_the_bound_are_reported_as_a_metric(receiver: OTLPReceiver) -> None:
    """Dropped spans show up as the lens_rl.spans.dropped metric at the collector."""
    handle = lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": receiver.endpoint, "max_queue_spans": 50}},
        "grpo",
    )
    tracer = handle.tracer
    for _ in range(3000):
        tracer.start_span("burst").end()
    lens_rl.flush_telemetry(10_000)
    assert "lens_rl.spans.dropped" in receiver.metric_names()
    dropped = [
        dp.as_int
        for req in receiver.metric_requests
        for rm in req.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "lens_rl.spans.dropped"
        for dp in m.sum.data_points
    ]
    assert max(dropped) == handle.stats()["dropped"] > 0


def test_an_exporter_that_raises_on_a_refused_connection_is_a_failed_export_not_a_fault() -> None:
    """An exporter that raises when the collector is unreachable (OpenTelemetry 1.33's HTTP metric exporter
    does) is a failed export in an outage, not telemetry's own fault; so is one that raises after shutdown."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    from lens_rl import _errors
    from lens_rl.export.live_metrics import TrackingMetricExporter

    class Raising(MetricExporter):
        error: Exception = ConnectionRefusedError(111, "Connection refused")

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
            raise self.error

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            self.error = ValueError("Cannot invoke RPC on closed channel!")

    faults = dict(_errors.FAULTS)
    tracker = TrackingMetricExporter(Raising())
    assert tracker.export(None) is MetricExportResult.FAILURE  # type: ignore[arg-type]
    assert (tracker.failures, tracker.last_ok, dict(_errors.FAULTS)) == (1, False, faults)
    tracker.shutdown()
    assert tracker.export(None) is MetricExportResult.FAILURE  # type: ignore[arg-type]
    assert dict(_errors.FAULTS) == faults
