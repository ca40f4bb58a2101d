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

import random
from typing import Any

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
    "installed_versions",
    "is_proxy_meter_provider",
    "jitter_from_own_stream",
    "metric_preferences",
    "missing",
    "present",
    "span_fan_out",
    "stop_metric_thread",
    "version_of",
]

#: The private names that changed inside the supported range: (name, the releases that have it as
#: ``(first, first without)`` (major, minor), what serves on the others). Every other name this module reads
#: is the same from 1.33 to the newest 1.x. (The OTLP/HTTP send path is public: lens_rl POSTs the bytes it
#: encodes on a session of its own, and gives OpenTelemetry's metric exporter such a session through its
#: public ``session=``.)
ADAPTED: tuple[tuple[str, tuple[tuple[int, int], tuple[int, int]], str], ...] = (
    (
        "opentelemetry.exporter.otlp.common.http.random",
        ((1, 45), (2, 0)),
        "each OTLP exporter module's own `random` (gRPC, HTTP metrics: 1.35-1.44); no jitter drawn (1.33, 1.34)",
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
    """For each name of :data:`ADAPTED`, whether the installed OpenTelemetry has it."""
    import importlib

    try:
        client = importlib.import_module("opentelemetry.exporter.otlp.common.http")
    except ImportError:
        client = None
    return {ADAPTED[0][0]: getattr(client, "random", None) is not None}


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
        "OTLPSpanExporter._endpoint": endpoint_of(exporter) is not None,
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
    """OpenTelemetry's OTLP encoding helpers (resource, scope, values, events, links, trace state, span kinds),
    by name: lens_rl's encoder hands them what it does not encode inline. Empty when the helpers are gone: then spans are encoded by the exporter's own public
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
    return _ENCODERS


_ENCODERS: dict[str, Any] = {}


def endpoint_of(exporter: Any) -> str | None:
    """Where an OTLP exporter sends (its endpoint URL: lens_rl's ``endpoint``, OpenTelemetry's ``_endpoint``),
    or None."""
    endpoint = getattr(exporter, "endpoint", None) or getattr(exporter, "_endpoint", None)
    return endpoint if isinstance(endpoint, str) else None


#: The OTLP exporter modules that draw their retry jitter from the module ``random`` (on a failed try), on
#: one release or another of the range (see :data:`ADAPTED`).
JITTER_MODULES = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)


def jitter_from_own_stream() -> list[str]:
    """Make OpenTelemetry's OTLP exporters draw their retry jitter from :data:`lens_rl.export.ids.STREAM`, not
    from the global ``random`` (which a job seeds and draws from: an exporter's retry would shift it).

    Each of :data:`JITTER_MODULES` already imported (none is imported here: gRPC's is heavy) that reads the
    ``random`` module gets lens_rl's stream as
    its ``random`` instead (one name set in the module, nothing copied: what patches the module later still
    applies); the jitter of every exporter of those modules in the process, the job's own too, comes from it.
    Answers the modules changed (idempotent: [] the second time)."""
    import sys

    from lens_rl.export.ids import STREAM

    changed = []
    for name in JITTER_MODULES:
        module: Any = sys.modules.get(name)
        if getattr(module, "random", None) is random:
            module.random = STREAM
            changed.append(name)
    return changed
