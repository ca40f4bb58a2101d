"""OpenTelemetry's global providers, kept live: one proxy tracer provider and one proxy meter provider.

OpenTelemetry lets a process set its global providers once. lens_rl's handle can be
replaced (a lazily made one by an explicit init, a re-init after shutdown), so lens_rl
registers these proxies once instead of a handle's own providers: a third-party
library calling ``opentelemetry.trace.get_tracer(...)`` or ``metrics.get_meter(...)``
at any time records through whichever handle is current, with its identity. A
third-party span started outside every other span joins the job root, as phases do.
When a user already set their own global providers, lens_rl leaves them alone.

Example::

    from opentelemetry import trace
    tracer = trace.get_tracer("my.library")     # before or after lens_rl starts
    with tracer.start_as_current_span("fetch"):  # exported through the live handle
        ...
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api

from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME
from lens_rl.export._sdk import is_proxy_meter_provider
from lens_rl.propagation import root_unless_current

__all__ = ["LiveMeterProvider", "LiveTracerProvider", "register_once", "rebind"]

_NOOP_TRACER = trace_api.NoOpTracer()
_NOOP_METER = metrics_api.NoOpMeter("lens_rl")
_LOCK = threading.Lock()
_OBSERVABLES: list[_LiveObservable] = []  # re-created on every new handle's meter


def _live_handle() -> Any:
    handle = RUNTIME.handle
    if handle is None and RUNTIME.on:
        handle = RUNTIME.resolve()
    return handle


class _PerHandle:
    """Holds the real object made for the current handle (a tracer, a meter), remade when the handle changes."""

    _cached: tuple[Any, Any]
    _args: tuple[Any, ...]

    def _for_live_handle(self, provider_attr: str, getter: str, noop: Any) -> Any:
        handle = _live_handle()
        provider = getattr(handle, provider_attr, None)
        if provider is None:
            return noop
        cached_handle, real = self._cached
        if cached_handle is not handle:
            real = getattr(provider, getter)(*self._args)
            self._cached = (handle, real)
        return real


class LiveTracer(_PerHandle, trace_api.Tracer):
    """A tracer that forwards each span to the current handle's provider (made per handle, cached)."""

    def __init__(self, args: tuple[Any, ...]) -> None:
        self._args = args
        self._cached = (None, _NOOP_TRACER)

    def _real(self) -> Any:
        return self._for_live_handle("tracer_provider", "get_tracer", _NOOP_TRACER)

    def start_span(self, name: str, context: Any = None, *args: Any, **kwargs: Any) -> Any:
        if context is None:
            context = root_unless_current()
        return self._real().start_span(name, context, *args, **kwargs)

    def start_as_current_span(self, name: str, context: Any = None, *args: Any, **kwargs: Any) -> Any:
        if context is None:
            context = root_unless_current()
        return self._real().start_as_current_span(name, context, *args, **kwargs)


class LiveTracerProvider(trace_api.TracerProvider):
    """OpenTelemetry's global tracer provider while lens_rl runs the process."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace_api.Tracer:
        return LiveTracer((instrumenting_module_name, instrumenting_library_version, schema_url, attributes))


class _LiveInstrument:
    """A synchronous instrument that records on the current handle's meter."""

    def __init__(self, meter: LiveMeter, factory: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._meter = meter
        self._factory = factory
        self._args = args
        self._kwargs = kwargs
        self._cached: tuple[Any, Any] = (None, None)

    def _real(self) -> Any:
        meter = self._meter._real()
        cached_meter, instrument = self._cached
        if cached_meter is not meter:
            instrument = getattr(meter, self._factory)(*self._args, **self._kwargs)
            self._cached = (meter, instrument)
        return instrument

    def _forward(self, method: str, amount: Any, attributes: Any, context: Any) -> None:
        try:
            getattr(self._real(), method)(amount, attributes, context)
        except Exception as exc:
            internal_error(exc, "third-party-metric")

    def add(self, amount: Any, attributes: Any = None, context: Any = None) -> None:
        self._forward("add", amount, attributes, context)

    def record(self, amount: Any, attributes: Any = None, context: Any = None) -> None:
        self._forward("record", amount, attributes, context)

    def set(self, amount: Any, attributes: Any = None, context: Any = None) -> None:
        self._forward("set", amount, attributes, context)


class _LiveObservable:
    """An observable instrument: registered with the current handle's meter, and with each new one."""

    def __init__(self, meter: LiveMeter, factory: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._meter = meter
        self._factory = factory
        self._args = args
        self._kwargs = kwargs

    def bind(self) -> None:
        try:
            getattr(self._meter._real(), self._factory)(*self._args, **self._kwargs)
        except Exception as exc:
            internal_error(exc, "third-party-metric")


class LiveMeter(_PerHandle, metrics_api.Meter):
    """A meter whose instruments record on the current handle's meter."""

    def __init__(self, args: tuple[Any, ...]) -> None:
        metrics_api.Meter.__init__(self, *args[:3])
        self._args = args
        self._cached = (None, _NOOP_METER)

    def _real(self) -> Any:
        return self._for_live_handle("meter_provider", "get_meter", _NOOP_METER)

    def _sync(self, factory: str, *args: Any, **kwargs: Any) -> Any:
        return _LiveInstrument(self, factory, args, kwargs)

    def _observable(self, factory: str, *args: Any, **kwargs: Any) -> Any:
        observable = _LiveObservable(self, factory, args, kwargs)
        with _LOCK:
            _OBSERVABLES.append(observable)
        observable.bind()
        return observable

    def create_counter(self, *args: Any, **kwargs: Any) -> Any:
        return self._sync("create_counter", *args, **kwargs)

    def create_up_down_counter(self, *args: Any, **kwargs: Any) -> Any:
        return self._sync("create_up_down_counter", *args, **kwargs)

    def create_histogram(self, *args: Any, **kwargs: Any) -> Any:
        return self._sync("create_histogram", *args, **kwargs)

    def create_gauge(self, *args: Any, **kwargs: Any) -> Any:
        return self._sync("create_gauge", *args, **kwargs)

    def create_observable_counter(self, *args: Any, **kwargs: Any) -> Any:
        return self._observable("create_observable_counter", *args, **kwargs)

    def create_observable_gauge(self, *args: Any, **kwargs: Any) -> Any:
        return self._observable("create_observable_gauge", *args, **kwargs)

    def create_observable_up_down_counter(self, *args: Any, **kwargs: Any) -> Any:
        return self._observable("create_observable_up_down_counter", *args, **kwargs)


class LiveMeterProvider(metrics_api.MeterProvider):
    """OpenTelemetry's global meter provider while lens_rl runs the process."""

    def get_meter(
        self, name: str, version: str | None = None, schema_url: str | None = None, attributes: Any = None
    ) -> metrics_api.Meter:
        return LiveMeter((name, version, schema_url, attributes))


TRACER_PROVIDER = LiveTracerProvider()
METER_PROVIDER = LiveMeterProvider()


def register_once() -> None:
    """Make the live proxies OpenTelemetry's global providers, once per process, unless a user set theirs."""
    if "otel-globals" in RUNTIME.registered:
        return
    RUNTIME.registered.add("otel-globals")
    try:
        if isinstance(trace_api.get_tracer_provider(), trace_api.ProxyTracerProvider):
            trace_api.set_tracer_provider(TRACER_PROVIDER)
        if is_proxy_meter_provider(metrics_api.get_meter_provider()):
            metrics_api.set_meter_provider(METER_PROVIDER)
    except Exception as exc:
        internal_error(exc, "otel-globals")


def rebind() -> None:
    """Register every third-party observable instrument with the (new) current handle's meter."""
    with _LOCK:
        observables = list(_OBSERVABLES)
    for observable in observables:
        observable.bind()
