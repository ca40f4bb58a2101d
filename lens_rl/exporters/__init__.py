"""The choice of exporter: ``file`` (embedded), ``otlp`` (HTTP or gRPC), ``console``, ``none``.

Spans and metrics always go to the same kind of destination. Exporter modules are
imported here, inside the functions, so ``import lens_rl`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SpanExporter

    from lens_rl.config import TelemetryConfig


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def _grpc_module(signal: str) -> Any:
    try:
        import importlib

        name = "trace_exporter" if signal == "traces" else "metric_exporter"
        module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.grpc.{name}")
    except ImportError as exc:
        raise MissingExtraError(
            "telemetry.protocol 'grpc' needs the OTLP gRPC exporter: pip install 'lens-rl[grpc]'"
        ) from exc
    return module


def span_exporter(config: TelemetryConfig, resource: Resource) -> SpanExporter | None:
    """The span exporter ``config`` asks for, or None for ``none``."""
    timeout_s = config.export_timeout_ms / 1000.0
    if config.exporter == "file":
        from lens_rl.exporters.file import FileSpanExporter

        return FileSpanExporter(config.trace_dir, config.run_id or "run", resource)
    if config.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if config.exporter == "otlp":
        if config.protocol == "grpc":
            return _grpc_module("traces").OTLPSpanExporter(  # type: ignore[no-any-return]
                endpoint=config.resolved_endpoint,
                insecure=config.resolved_endpoint.startswith("http://"),
                timeout=timeout_s,
            )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=config.resolved_endpoint + "/v1/traces", timeout=timeout_s)
    return None


def metric_exporter(config: TelemetryConfig, resource: Resource) -> MetricExporter | None:
    """The metric exporter ``config`` asks for, or None for ``none``."""
    timeout_s = config.export_timeout_ms / 1000.0
    if config.exporter == "file":
        from lens_rl.exporters.file import FileMetricExporter

        return FileMetricExporter(config.trace_dir, config.run_id or "run", resource)
    if config.exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if config.exporter == "otlp":
        if config.protocol == "grpc":
            return _grpc_module("metrics").OTLPMetricExporter(  # type: ignore[no-any-return]
                endpoint=config.resolved_endpoint,
                insecure=config.resolved_endpoint.startswith("http://"),
                timeout=timeout_s,
            )
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=config.resolved_endpoint + "/v1/metrics", timeout=timeout_s)
    return None
