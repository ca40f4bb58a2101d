"""The choice of exporter: ``file`` (embedded), ``otlp`` (HTTP or gRPC), ``console``, ``none``.

Spans and metrics always go to the same kind of destination, made together (OTLP headers, which a
``headers_file`` may hold, are read once for both). Exporter modules are imported inside the functions,
so ``import lens_rl`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lens_rl._errors import require
from lens_rl.export._sdk import jitter_from_own_stream

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.trace.export import SpanExporter

    from lens_rl.config import TelemetryConfig

__all__ = ["make_exporters"]


def _grpc_module(signal: str) -> Any:
    name = "trace_exporter" if signal == "traces" else "metric_exporter"
    return require(f"opentelemetry.exporter.otlp.proto.grpc.{name}", "grpc", "telemetry.protocol 'grpc'")


def make_exporters(
    config: TelemetryConfig, attributes: dict[str, Any], role: str = "worker"
) -> tuple[SpanExporter | None, MetricExporter | None]:
    """The span and metric exporters ``config`` asks for (None for ``none``, or a signal turned off)."""
    timeout_s = config.export_timeout_ms / 1000.0
    headers = config.headers() if config.exporter == "otlp" else None
    spans = _span_exporter(config, attributes, role, timeout_s, headers) if config.traces_enabled else None
    metrics = _metric_exporter(config, attributes, role, timeout_s, headers) if config.metrics_enabled else None
    return spans, metrics


def _span_exporter(
    config: TelemetryConfig, attributes: dict[str, Any], role: str, timeout_s: float, headers: dict[str, str] | None
) -> SpanExporter | None:
    if config.exporter == "file":
        from lens_rl.export.file import FileSpanExporter

        return FileSpanExporter(config.trace_dir, config.run_id or "run", attributes, role)
    if config.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if config.exporter == "otlp":
        from lens_rl.export.otlp import HTTPSpanExporter, grpc_exporter_class

        if config.protocol == "grpc":
            exporter = grpc_exporter_class(_grpc_module("traces").OTLPSpanExporter)(
                endpoint=config.resolved_endpoint,
                insecure=config.resolved_endpoint.startswith("http://"),
                timeout=timeout_s,
                headers=headers,
            )
            jitter_from_own_stream()
            return exporter  # type: ignore[no-any-return]
        return HTTPSpanExporter(endpoint=config.resolved_endpoint + "/v1/traces", timeout=timeout_s, headers=headers)
    return None


def _metric_exporter(
    config: TelemetryConfig, attributes: dict[str, Any], role: str, timeout_s: float, headers: dict[str, str] | None
) -> MetricExporter | None:
    if config.exporter == "file":
        from lens_rl.export.file import FileMetricExporter

        return FileMetricExporter(config.trace_dir, config.run_id or "run", attributes, role)
    if config.exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if config.exporter == "otlp":
        if config.protocol == "grpc":
            exporter = _grpc_module("metrics").OTLPMetricExporter(
                endpoint=config.resolved_endpoint,
                insecure=config.resolved_endpoint.startswith("http://"),
                timeout=timeout_s,
                headers=headers,
            )
        else:  # OpenTelemetry's, with its public arguments: a session of lens_rl's (the environment read once)
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            from lens_rl.export.http_post import session_for

            url = config.resolved_endpoint + "/v1/metrics"
            session = session_for(url, "metrics")
            # (before 1.45 each request passes verify=certificate_file itself: the CA bundle resolved, given)
            bundle = session.verify if isinstance(session.verify, str) else None
            exporter = OTLPMetricExporter(
                endpoint=url, timeout=timeout_s, headers=headers, session=session, certificate_file=bundle
            )
        jitter_from_own_stream()  # (its retry jitter: lens_rl's random stream, not the job's)
        return exporter  # type: ignore[no-any-return]
    return None
