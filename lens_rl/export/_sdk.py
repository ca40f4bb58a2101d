"""Every private name of OpenTelemetry (API, SDK, exporters) that lens_rl uses, in one place.

lens_rl requires OpenTelemetry as a range (every 1.x from :data:`FLOOR` on), so none of these names is pinned:
each is looked up on the installed release, adapted where a release changed it (:data:`ADAPTED` names each
change and the releases on either side), and falls back to a public path where it is missing (slower, or
less exact, but working): never a crash. ``tests/export/test_sdk.py`` checks, on the installed release, that
each name is where :data:`ADAPTED` says it is and that no fallback is in use that needs not be
(:func:`missing`); ``.ci/otel-range.sh`` runs it at both ends of the range.

Besides the names below, :class:`lens_rl.export.fastspan.FastSpan` is a ``ReadableSpan`` subclass: it fills
the fields ReadableSpan's own properties read, and the export thread's encoders read them back (the
properties make a read-only view per read). Those fields are :data:`READABLE_SPAN_FIELDS`, checked by the
same test against the installed SDK (the same from 1.33 to 1.45).

Example::

    span_key, baggage_key, context_type, invalid, runtime_context = context_keys()
"""

from __future__ import annotations

import os
import random
import types
from typing import Any

from lens_rl._errors import internal_error

# (the supported range and the installed release: lens_rl.export.otel_release; importable from here too)
from lens_rl.export.otel_release import DISTRIBUTIONS, FLOOR, installed_versions, version_of

__all__ = [
    "ADAPTED",
    "DISTRIBUTIONS",
    "FLOOR",
    "READABLE_SPAN_FIELDS",
    "attributes_dict",
    "context_keys",
    "encoders",
    "endpoint_of",
    "http_sender",
    "installed_versions",
    "is_proxy_meter_provider",
    "metric_preferences",
    "missing",
    "own_random",
    "present",
    "read_environment_once",
    "span_fan_out",
    "stop_metric_thread",
    "too_large",
    "version_of",
]

#: The private names that changed inside the supported range: (name, the releases that have it as
#: ``(first, first without)`` (major, minor), what serves on the others). Every other name this module reads
#: is the same from 1.33 to the newest 1.x.
ADAPTED: tuple[tuple[str, tuple[tuple[int, int], tuple[int, int]], str], ...] = (
    (
        "OTLPSpanExporter._client.export",
        ((1, 45), (2, 0)),
        "OTLPSpanExporter._export(data) -> requests.Response: one POST (1.33-1.44)",
    ),
    (
        "OTLPSpanExporter._export(data, timeout_sec)",
        ((1, 35), (1, 45)),
        "OTLPSpanExporter._export(data), the exporter's own timeout (1.33, 1.34); _client.export (1.45+)",
    ),
    (
        "OTLPSpanExporter._client._transport._session",
        ((1, 45), (2, 0)),
        "OTLPSpanExporter._session (1.33-1.44)",
    ),
    (
        "OTLPSpanExporter._max_request_size, http._common._is_request_too_large",
        ((1, 45), (2, 0)),
        "no size check before sending (1.33-1.44): a collector's 413 splits the batch",
    ),
)

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


def present() -> dict[str, bool]:
    """For each name of :data:`ADAPTED`, whether the installed OpenTelemetry has it (probed on its objects)."""
    import inspect

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    try:
        client = getattr(exporter, "_client", None)
        legacy = getattr(exporter, "_export", None)
        return {
            ADAPTED[0][0]: hasattr(client, "export"),
            ADAPTED[1][0]: legacy is not None and "timeout_sec" in inspect.signature(legacy).parameters,
            ADAPTED[2][0]: hasattr(getattr(client, "_transport", None), "_session"),
            ADAPTED[3][0]: hasattr(exporter, "_max_request_size") and "too_large" in encoders(),
        }
    finally:
        exporter.shutdown()


def missing() -> list[str]:
    """The private names this module reads that the installed OpenTelemetry lacks, so that a public fallback
    serves; [] on every supported release (a name :data:`ADAPTED` lists counts as found when its older
    form serves). Probed on OpenTelemetry's own objects, not on what a run met."""
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
    found = encoders()
    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    probes = {
        "the OTLP encoding helpers (proto.common._internal)": "resource" in found,
        "TracerProvider._active_span_processor": span_fan_out(TracerProvider()) is not None,
        "BoundedAttributes._dict": hasattr(BoundedAttributes(), "_dict"),
        "MetricExporter._preferred_temporality": hasattr(ConsoleMetricExporter(), "_preferred_temporality"),
        "PeriodicExportingMetricReader._shutdown_event": "_shutdown_event"
        in inspect.getsource(PeriodicExportingMetricReader.__init__),
        "OTLPSpanExporter: one send (_client.export or _export)": http_sender(exporter) is not None,
        "OTLPSpanExporter: its requests session": _session_of(exporter) is not None,
        "OTLPSpanExporter._shutdown, _endpoint": all(hasattr(exporter, name) for name in ("_shutdown", "_endpoint")),
    }
    exporter.shutdown()
    return gone + [name for name, ok in probes.items() if not ok]


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


# ---------------------------------------------------------------------- the OTLP exporters


def encoders() -> dict[str, Any]:
    """OpenTelemetry's OTLP encoding helpers (resource, scope, values, events, links, trace state, span kinds)
    and, from 1.45, its request-size check (``too_large``), by name: lens_rl's encoder hands them what it does
    not encode inline. Empty when the helpers are gone: then spans are encoded by the exporter's own public
    path."""
    if not _ENCODERS:
        try:
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
        except ImportError:
            return _ENCODERS
        _ENCODERS.update(
            resource=_encode_resource,
            scope=_encode_instrumentation_scope,
            value=_encode_value,
            events=_encode_events,
            links=_encode_links,
            trace_state=_encode_trace_state,
            kinds=_SPAN_KIND_MAP,
        )
        try:  # 1.45+: the exporter refuses a request over its max_request_size before sending
            from opentelemetry.exporter.otlp.proto.http._common import _is_request_too_large

            _ENCODERS["too_large"] = _is_request_too_large
        except ImportError:
            pass
    return _ENCODERS


_ENCODERS: dict[str, Any] = {}


def endpoint_of(exporter: Any) -> str | None:
    """Where an OTLP exporter sends (its endpoint URL), or None."""
    endpoint = getattr(exporter, "_endpoint", None)
    return endpoint if isinstance(endpoint, str) else None


def http_sender(exporter: Any) -> Any:
    """One send of an encoded OTLP/HTTP request for ``exporter``: a function ``send(data) -> (ok, status)``,
    the HTTP status code or None when none came back; None when neither private path exists (the exporter's
    public ``export`` then serves, and every failure is retried).

    1.45+: the exporter's ``_client.export`` (the client retries transient answers itself). 1.33-1.44: the
    exporter's ``_export`` (one POST, resent once on a connection error), which answers a
    ``requests.Response``; from 1.35 it takes a timeout, given the exporter's own.
    """
    client = getattr(exporter, "_client", None)
    export = getattr(client, "export", None)
    if export is not None:

        def send(data: bytes) -> tuple[bool, int | None]:
            result = export(data)
            return bool(result.success), getattr(result, "status_code", None)

        return send
    post = getattr(exporter, "_export", None)
    if post is None:
        return None
    import inspect

    try:
        takes_timeout = "timeout_sec" in inspect.signature(post).parameters
    except (TypeError, ValueError):
        return None

    def send_once(data: bytes) -> tuple[bool, int | None]:
        # no answer: requests raises its RequestException (an OSError) on a refused or timed-out connection
        try:
            response = post(data, getattr(exporter, "_timeout", None)) if takes_timeout else post(data)
        except OSError:
            return False, None
        return bool(response.ok), response.status_code

    return send_once


def too_large(data: bytes, max_size: int | None) -> bool:
    """Whether the exporter would refuse ``data`` as over its ``max_size`` (1.45+; never before)."""
    check = encoders().get("too_large")
    return bool(check(data, max_size)) if check is not None and max_size is not None else False


def own_random(exporter: Any) -> Any:
    """Make ``exporter`` (and its HTTP client) draw its retry jitter from lens_rl's own random stream.

    OpenTelemetry's exporters draw ``random.uniform`` from the *global* stream on every export (1.35+: at
    the top of each try, a successful one too; 1.45+: the HTTP client's ``_compute_backoff``): an exporter
    lens_rl made would shift the job's random numbers from its export thread. This instance's methods that
    read the module ``random`` get a copy that reads :data:`lens_rl.export.ids.STREAM` instead; the class,
    its module and other instances are untouched. A method that is not a plain function is left as it is.
    """
    from lens_rl.export.ids import STREAM

    for target in (exporter, getattr(exporter, "_client", None)):
        if target is None:
            continue
        for name in ("export", "_export", "_compute_backoff"):
            function = getattr(type(target), name, None)
            if not isinstance(function, types.FunctionType) or function.__globals__.get("random") is not random:
                continue
            try:
                copy = types.FunctionType(
                    function.__code__,
                    {**function.__globals__, "random": STREAM},
                    function.__name__,
                    function.__defaults__,
                    function.__closure__,
                )
                copy.__kwdefaults__ = function.__kwdefaults__
                setattr(target, name, types.MethodType(copy, target))
            except Exception as exc:  # the global stream is drawn, as before
                internal_error(exc, "exporter-random")
    return exporter


def _session_of(exporter: Any) -> Any:
    """The ``requests`` session an OTLP/HTTP exporter sends with (1.45+: its client's transport's; before:
    its own), or None."""
    transport = getattr(getattr(exporter, "_client", None), "_transport", None)
    if transport is not None:
        return getattr(transport, "_session", None)
    return getattr(exporter, "_session", None)


def read_environment_once(exporter: Any, url: str) -> Any:
    """Read the proxy, ``.netrc`` and CA-bundle settings for ``url`` once, not on every export.

    ``requests`` merges them from the environment on every request (``trust_env``): with a training job's
    environment (hundreds of variables) that is ~1 ms of CPU per batch, as much as encoding it. Here they
    are read when the exporter is made, with the same precedence (settings on the session win; so does an
    explicit certificate file over the environment's CA bundle), and the session stops reading them; a
    proxy variable changed later in the run is not seen. Without the exporter's session: unchanged (the
    environment is read per request, as requests does).
    """
    session: Any = _session_of(exporter)
    if session is None or not getattr(session, "trust_env", False):
        return exporter
    if url.startswith("https:") and getattr(exporter, "_client", None) is None:
        return exporter  # before 1.45 each request passes verify= itself, over the session's CA bundle
    try:
        _read_environment(session, url)
    except Exception as exc:  # the environment is still read per request, as before
        internal_error(exc, "otlp-session")
    return exporter


def _read_environment(session: Any, url: str) -> None:
    """The proxies, ``.netrc`` login and CA bundle requests would merge for ``url``, set on ``session`` where
    it has none of its own; then the session stops reading the environment."""
    from requests.utils import get_environ_proxies, get_netrc_auth

    for scheme, proxy in get_environ_proxies(url, no_proxy=session.proxies.get("no_proxy")).items():
        session.proxies.setdefault(scheme, proxy)
    if session.auth is None:
        session.auth = get_netrc_auth(url)
    if session.verify is True and url.startswith("https:"):  # (for plain HTTP a bundle is unused, but stat-ed)
        session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    session.trust_env = False
