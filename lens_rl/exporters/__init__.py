"""The choice of exporter: ``file`` (embedded), ``otlp`` (HTTP or gRPC), ``console``, ``none``.

Spans and metrics always go to the same kind of destination. Exporter modules are
imported here, inside the functions, so ``import lens_rl`` stays light.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from lens_rl._errors import internal_error

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


def _environment_read_once(exporter: Any, url: str) -> Any:
    """Read the proxy, ``.netrc`` and CA-bundle settings for ``url`` once, not on every export.

    ``requests`` merges them from the environment on every request (``trust_env``): with
    a training job's environment (hundreds of variables) that is ~1 ms of CPU per batch,
    as much as encoding it. Here they are read when the exporter is made, with the same
    precedence (settings on the session win; so does an explicit certificate file over
    the environment's CA bundle, which requests would let the bundle override), and the
    session stops reading them; a proxy variable changed later in the run is not seen.
    Untouched without the exporter's pinned client internals.
    """
    session: Any = getattr(getattr(getattr(exporter, "_client", None), "_transport", None), "_session", None)
    if session is None or not getattr(session, "trust_env", False):
        return exporter
    try:
        from requests.utils import get_environ_proxies, get_netrc_auth

        for scheme, proxy in get_environ_proxies(url, no_proxy=session.proxies.get("no_proxy")).items():
            session.proxies.setdefault(scheme, proxy)
        if session.auth is None:
            session.auth = get_netrc_auth(url)
        if session.verify is True and url.startswith("https:"):  # (for plain HTTP a bundle is unused, but stat-ed per request)
            session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        session.trust_env = False
    except Exception as exc:  # the environment is still read per request, as before
        internal_error(exc, "otlp-session")
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
        url = config.resolved_endpoint + "/v1/traces"
        exporter = HTTPSpanExporter(endpoint=url, timeout=timeout_s, headers=headers)
        return _track_status(_environment_read_once(exporter, url))
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

        url = config.resolved_endpoint + "/v1/metrics"
        return _environment_read_once(OTLPMetricExporter(endpoint=url, timeout=timeout_s, headers=headers), url)
    return None
