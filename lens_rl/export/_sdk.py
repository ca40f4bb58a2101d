"""Every private name of OpenTelemetry (API, SDK, exporters) that lens_rl uses, in one place.

Why lens_rl pins OpenTelemetry ``==``: these names are not part of its public API. Each is read here, with a
public fallback where one exists (slower, or less exact, but working), and ``tests/export/test_sdk.py``
names the pinned versions and fails loudly when they change or a name is gone (:func:`missing`).

Besides the names below, :class:`lens_rl.export.fastspan.FastSpan` is a ``ReadableSpan`` subclass: it fills
the fields ReadableSpan's own properties read, and the export thread's encoders read them back (the
properties make a read-only view per read). Those fields are :data:`READABLE_SPAN_FIELDS`, checked by the
same test against the pinned SDK.

Example::

    span_key, baggage_key, context_type, invalid, runtime_context = context_keys()
"""

from __future__ import annotations

import logging
import os
from importlib import metadata
from typing import Any

from lens_rl._errors import internal_error

__all__ = [
    "PINNED",
    "READABLE_SPAN_FIELDS",
    "attributes_dict",
    "context_keys",
    "encoders",
    "endpoint_of",
    "is_proxy_meter_provider",
    "metric_preferences",
    "missing",
    "quiet_sdk_limit_logs",
    "read_environment_once",
    "span_fan_out",
    "stop_metric_thread",
    "track_http_status",
]

#: The OpenTelemetry distributions these names were read from (core and contrib, one matched set).
PINNED = {
    "opentelemetry-api": "1.45.1",
    "opentelemetry-sdk": "1.45.1",
    "opentelemetry-exporter-otlp-proto-http": "1.45.1",
    "opentelemetry-exporter-otlp-proto-common": "1.45.1",
    "opentelemetry-proto": "1.45.1",
    "opentelemetry-semantic-conventions": "0.66b1",
}

#: ReadableSpan's fields, as its properties read them (FastSpan fills them; the encoders read them back).
READABLE_SPAN_FIELDS = (
    "_name",
    "_context",
    "_kind",
    "_instrumentation_info",
    "_instrumentation_scope",
    "_parent",
    "_start_time",
    "_end_time",
    "_attributes",
    "_events",
    "_links",
    "_resource",
    "_status",
)


def missing() -> list[str]:
    """The private names this module reads that the installed OpenTelemetry lacks (their fallbacks then
    serve); [] with the pinned versions. Probed on OpenTelemetry's own objects, not on what a run met."""
    import inspect

    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    gone = []
    try:
        from opentelemetry.baggage import _BAGGAGE_KEY  # noqa: F401
        from opentelemetry.context import _RUNTIME_CONTEXT  # noqa: F401
        from opentelemetry.metrics._internal import _ProxyMeterProvider  # noqa: F401
        from opentelemetry.trace.propagation import _SPAN_KEY  # noqa: F401
    except ImportError as exc:
        gone.append(str(exc))
    try:
        encoders()
    except ImportError as exc:
        gone.append(str(exc))
    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    client = getattr(exporter, "_client", None)
    probes = {
        "TracerProvider._active_span_processor": span_fan_out(TracerProvider()) is not None,
        "BoundedAttributes._dict": hasattr(BoundedAttributes(), "_dict"),
        "MetricExporter._preferred_temporality": hasattr(ConsoleMetricExporter(), "_preferred_temporality"),
        "PeriodicExportingMetricReader._shutdown_event": "_shutdown_event"
        in inspect.getsource(PeriodicExportingMetricReader.__init__),
        "OTLPSpanExporter._client.export": hasattr(client, "export"),
        "OTLPSpanExporter._client._transport._session": hasattr(getattr(client, "_transport", None), "_session"),
        "OTLPSpanExporter._shutdown, _max_request_size, _endpoint": all(
            hasattr(exporter, name) for name in ("_shutdown", "_max_request_size", "_endpoint")
        ),
    }
    exporter.shutdown()
    return gone + [name for name, found in probes.items() if not found]


# ---------------------------------------------------------------------- the API: context keys

_KEYS: list[Any] = []


def context_keys() -> tuple[Any, Any, Any, Any, Any]:
    """The context keys of the current span and the baggage, the ``Context`` type, the invalid span context
    and the runtime context, as OpenTelemetry's API keeps them (read directly, they save a function call
    per lookup on the hot path). Fallback: the same found through the public API."""
    if not _KEYS:
        try:
            from opentelemetry.baggage import _BAGGAGE_KEY
            from opentelemetry.context import _RUNTIME_CONTEXT
            from opentelemetry.context.context import Context
            from opentelemetry.trace import INVALID_SPAN_CONTEXT
            from opentelemetry.trace.propagation import _SPAN_KEY

            _KEYS.extend((_SPAN_KEY, _BAGGAGE_KEY, Context, INVALID_SPAN_CONTEXT, _RUNTIME_CONTEXT))
        except ImportError:
            from lens_rl.propagation import public_keys

            _KEYS.extend(public_keys())
    return _KEYS[0], _KEYS[1], _KEYS[2], _KEYS[3], _KEYS[4]


# ---------------------------------------------------------------------- the SDK


def span_fan_out(provider: Any) -> Any:
    """The tracer provider's fan-out to its span processors (its ``on_start`` / ``on_end`` call every one,
    those added later too), or None: then phases are recorded as SDK spans."""
    fan_out = getattr(provider, "_active_span_processor", None)
    return fan_out if fan_out is not None and hasattr(fan_out, "on_end") else None


def attributes_dict(attributes: Any) -> Any:
    """The plain dict inside the SDK's ``BoundedAttributes`` (which locks on every read), else ``attributes``."""
    return getattr(attributes, "_dict", attributes)


def metric_preferences(exporter: Any) -> dict[str, Any]:
    """A metric exporter's preferred temporality and aggregation (to wrap it faithfully); fallback: the defaults."""
    return {
        "preferred_temporality": getattr(exporter, "_preferred_temporality", None),
        "preferred_aggregation": getattr(exporter, "_preferred_aggregation", None),
    }


def is_proxy_meter_provider(provider: Any) -> bool:
    """Whether ``provider`` is the API's placeholder meter provider (no real one set yet)."""
    try:
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:
        return type(provider).__name__ == "_ProxyMeterProvider"
    return isinstance(provider, _ProxyMeterProvider)


def stop_metric_thread(reader: Any) -> None:
    """Stop a ``PeriodicExportingMetricReader``'s thread copied into a forked child (the SDK restarts it there)."""
    stop = getattr(reader, "_shutdown_event", None)
    if stop is not None:
        stop.set()


class _OncePerMessage(logging.Filter):
    """Lets the first record of each message template through, then drops repeats (the SDK's span-limit
    warnings would otherwise log once per dropped attribute: 9,900 lines for 10,000 attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_ONCE = _OncePerMessage()


def quiet_sdk_limit_logs() -> None:
    """Once per process: the SDK's attribute-limit loggers log each message once."""
    for name in ("opentelemetry.attributes", "opentelemetry.sdk.trace"):
        logger = logging.getLogger(name)
        if _ONCE not in logger.filters:
            logger.addFilter(_ONCE)


# ---------------------------------------------------------------------- the OTLP exporters


def encoders() -> dict[str, Any]:
    """OpenTelemetry's OTLP encoding helpers (resource, scope, values, events, links, trace state, span kinds)
    and its request-size check, by name: lens_rl's encoder hands them what it does not encode inline."""
    if not _ENCODERS:
        from opentelemetry.exporter.otlp.proto.common._internal import (
            _encode_instrumentation_scope,
            _encode_resource,
            _encode_value,
        )
        from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import (
            _SPAN_KIND_MAP,
            _encode_events,
            _encode_links,
            _encode_trace_state,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import _is_request_too_large

        _ENCODERS.update(
            resource=_encode_resource,
            scope=_encode_instrumentation_scope,
            value=_encode_value,
            events=_encode_events,
            links=_encode_links,
            trace_state=_encode_trace_state,
            kinds=_SPAN_KIND_MAP,
            too_large=_is_request_too_large,
        )
    return _ENCODERS


_ENCODERS: dict[str, Any] = {}


def endpoint_of(exporter: Any) -> str | None:
    """Where an OTLP exporter sends (its endpoint URL), or None."""
    endpoint = getattr(exporter, "_endpoint", None)
    return endpoint if isinstance(endpoint, str) else None


def http_exporter_state(exporter: Any) -> tuple[bool, int | None, Any]:
    """An OTLP/HTTP exporter's (shut down, largest request it sends, HTTP client): what a subclass that
    encodes its own request needs."""
    return bool(getattr(exporter, "_shutdown", False)), getattr(exporter, "_max_request_size", None), exporter._client


def track_http_status(exporter: Any) -> Any:
    """Record each OTLP/HTTP export's status code on ``exporter._lens_status``.

    The SDK exporter answers only SUCCESS or FAILURE; the span pipeline needs the status to tell a batch
    worth retrying (408, 429, 5xx, no answer) from one to split (413) or drop (other 4xx). The exporter's
    HTTP client is wrapped; without that client nothing is tracked and every failure retries (the fallback).
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


def read_environment_once(exporter: Any, url: str) -> Any:
    """Read the proxy, ``.netrc`` and CA-bundle settings for ``url`` once, not on every export.

    ``requests`` merges them from the environment on every request (``trust_env``): with a training job's
    environment (hundreds of variables) that is ~1 ms of CPU per batch, as much as encoding it. Here they
    are read when the exporter is made, with the same precedence (settings on the session win; so does an
    explicit certificate file over the environment's CA bundle), and the session stops reading them; a
    proxy variable changed later in the run is not seen. Without the exporter's session: unchanged (the
    environment is read per request, as requests does).
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
        if session.verify is True and url.startswith("https:"):  # (for plain HTTP a bundle is unused, but stat-ed)
            session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        session.trust_env = False
    except Exception as exc:  # the environment is still read per request, as before
        internal_error(exc, "otlp-session")
    return exporter


def installed_versions() -> dict[str, str | None]:
    """The installed versions of the :data:`PINNED` distributions (None where one is missing)."""
    out: dict[str, str | None] = {}
    for name in PINNED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
