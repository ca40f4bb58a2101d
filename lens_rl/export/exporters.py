"""The choice of exporter: ``file`` (embedded), ``otlp`` (HTTP or gRPC), ``console``, ``none``.

Spans and metrics always go to the same kind of destination, made together (OTLP headers, which a
``headers_file`` may hold, are read once for both, by lens_rl, and given to every OTLP exporter). Exporter
modules are imported inside the functions, so ``import lens_rl`` stays light.

Credentials stay out of logs:

* gRPC has no place for a URL's userinfo: the gRPC exporters get the endpoint without it, and
  ``http://user:pw@collector:4317`` becomes an ``authorization: Basic ...`` header, as HTTP sends it (unless
  the headers already hold an ``authorization``). Credentials belong in headers (``OTEL_EXPORTER_OTLP_HEADERS``
  or ``headers_file``); the URL form is for a collector's basic auth.
* Some OpenTelemetry releases read ``OTEL_EXPORTER_OTLP_HEADERS`` again whatever headers they are given, and
  log a badly formed entry whole (``x-team: KEY``, value included): that warning is kept, its entry left out
  (lens_rl's own parse names the entry by its position).
"""

from __future__ import annotations

import base64
import urllib.parse
from typing import TYPE_CHECKING, Any

from lens_rl._attributes import hide_header_entries, strip_userinfo
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


def grpc_target(endpoint: str, headers: dict[str, str] | None) -> tuple[str, dict[str, str] | None]:
    """The endpoint a gRPC exporter is given (its userinfo left out: a gRPC target cannot hold one, and the
    exporter says its target in its logs) and the headers, with the userinfo as basic auth as HTTP sends it."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.username is None:
        return endpoint, headers
    out = dict(headers or {})
    if "authorization" not in out:
        login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        out["authorization"] = "Basic " + base64.b64encode(login.encode("utf-8")).decode("ascii")
    return strip_userinfo(endpoint), out


def make_exporters(
    config: TelemetryConfig, attributes: dict[str, Any], role: str = "worker"
) -> tuple[SpanExporter | None, MetricExporter | None]:
    """The span and metric exporters ``config`` asks for (None for ``none``, or a signal turned off)."""
    timeout_s = config.export_timeout_ms / 1000.0
    headers = None
    if config.exporter == "otlp":
        hide_header_entries()
        headers = config.headers()
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
            endpoint, grpc_headers = grpc_target(config.resolved_endpoint, headers)
            exporter = grpc_exporter_class(_grpc_module("traces").OTLPSpanExporter)(
                endpoint=endpoint,
                insecure=endpoint.startswith("http://"),
                timeout=timeout_s,
                headers=grpc_headers,
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
            endpoint, grpc_headers = grpc_target(config.resolved_endpoint, headers)
            exporter = _grpc_module("metrics").OTLPMetricExporter(
                endpoint=endpoint,
                insecure=endpoint.startswith("http://"),
                timeout=timeout_s,
                headers=grpc_headers,
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
