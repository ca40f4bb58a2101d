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


def _track_status(exporter: Any) -> Any:
    """Record each OTLP/HTTP export's status code on ``exporter._lens_status``.

    The SDK exporter answers only SUCCESS or FAILURE; the span pipeline needs the
    status to tell a batch worth retrying (408, 429, 5xx, no answer) from one to split
    (413) or drop (other 4xx). The exporter's HTTP client is wrapped (OpenTelemetry is
    pinned as one set; without that client nothing is tracked and every failure retries).
    """
    client: Any = getattr(exporter, "_client", None)
    send = getattr(client, "export", None)
    if send is None:
        return exporter
    exporter._lens_status = None

    def export(*args: Any, **kwargs: Any) -> Any:
        result = send(*args, **kwargs)
        exporter._lens_status = getattr(result, "status_code", None)
        return result

    client.export = export
    return exporter


def span_exporter(config: TelemetryConfig, resource: Resource) -> SpanExporter | None:
    """The span exporter ``config`` asks for, or None for ``none``."""
    timeout_s = config.export_timeout_ms / 1000.0
    headers = config.headers()
    if config.exporter == "file":
        from lens_rl.exporters.file import FileSpanExporter

        return FileSpanExporter(config.trace_dir, config.run_id or "run", resource)
    if config.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if config.exporter == "otlp":
        from lens_rl.exporters.otlp import HTTPSpanExporter, grpc_exporter_class

        if config.protocol == "grpc":
            return grpc_exporter_class(_grpc_module("traces").OTLPSpanExporter)(  # type: ignore[no-any-return]
                endpoint=config.resolved_endpoint,
                insecure=config.resolved_endpoint.startswith("http://"),
                timeout=timeout_s,
                headers=headers,
            )
        return _track_status(  # type: ignore[no-any-return]
            HTTPSpanExporter(endpoint=config.resolved_endpoint + "/v1/traces", timeout=timeout_s, headers=headers)
        )
    return None


def metric_exporter(config: TelemetryConfig, resource: Resource) -> MetricExporter | None:
    """The metric exporter ``config`` asks for, or None for ``none``."""
    timeout_s = config.export_timeout_ms / 1000.0
    headers = config.headers()
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
                headers=headers,
            )
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=config.resolved_endpoint + "/v1/metrics", timeout=timeout_s, headers=headers)
    return None
