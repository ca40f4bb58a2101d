"""W3C trace-context carriers for every hop: actor calls, threads, HTTP, the environment.

Every top-level lens_rl span of a job is a child of the job root span unless given
another parent; workers find the root through ``TRACEPARENT`` in their environment.

Example::

    carrier = lens_rl.inject_context()           # on the driver, inside a step
    ref = actor.train.remote(batch, carrier)     # ship it with the call
    ...
    with lens_rl.attach_context(carrier):        # in the actor (or a thread)
        with lens_rl.traced_phase("policy_training"):
            ...
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from lens_rl._errors import internal_error
from lens_rl._runtime import AMBIENT, RUNTIME

__all__ = ["attach_context", "inject_context"]


class _LazyModules:
    """OpenTelemetry's API modules, imported on first use and then read as plain attributes: ``import
    lens_rl`` imports no OpenTelemetry, and a ``from opentelemetry import x`` inside a hot function costs
    about a microsecond per call (the import machinery runs each time)."""

    def __getattr__(self, name: str) -> Any:
        module = importlib.import_module(f"opentelemetry.{name}")
        setattr(self, name, module)  # later reads find it in the instance dict: no __getattr__
        return module


OTEL: Any = _LazyModules()

_TRACEPARENT = "traceparent"
_TRACESTATE = "tracestate"
_BAGGAGE = "baggage"
#: W3C baggage keys lens_rl carries: the caller's ambient bucket and its step.
BAGGAGE_BUCKET = "rl.bucket"
BAGGAGE_STEP = "rl.step"
_PROPAGATOR: list[Any] = []


def _propagator() -> Any:
    """W3C trace context and baggage (the bucket and step travel in baggage)."""
    if not _PROPAGATOR:
        from opentelemetry.baggage.propagation import W3CBaggagePropagator
        from opentelemetry.propagators.composite import CompositePropagator
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _PROPAGATOR.append(CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()]))
    return _PROPAGATOR[0]


def carried_in(entries: Mapping[str, Any] | None) -> tuple[str | None, int | None]:
    """The bucket and step in baggage ``entries``."""
    if not entries:
        return None, None
    bucket = entries.get(BAGGAGE_BUCKET)
    step: Any = entries.get(BAGGAGE_STEP)
    try:
        step = int(step) if step is not None else None
    except (TypeError, ValueError):
        step = None
    return (str(bucket) if bucket is not None else None), step


def with_baggage(ctx: Any, key: str, value: Any) -> Any:
    """``ctx`` with one lens_rl baggage entry set."""
    return OTEL.baggage.set_baggage(key, str(value), ctx)


def root_unless_current() -> Any:
    """The job root's context when no span is current here, else None (the current one serves).

    The one rule that makes a job one trace: a span started outside every other span,
    in any thread or process, is a child of the job root.
    """
    root = RUNTIME.root_context
    if root is None:
        return None
    return None if OTEL.trace.get_current_span().get_span_context().is_valid else root


def keys() -> tuple[Any, Any, Any, Any, Any]:
    """OpenTelemetry's context key for the current span and for the baggage, its ``Context`` type, the
    invalid span context and its runtime context (``attach`` / ``detach`` / ``get_current`` without the API's
    wrappers): read directly, they save a function call per lookup on the hot path. The export side hands
    them in with its first handle (:mod:`lens_rl.export._sdk` keeps OpenTelemetry's private names); until
    then, they are found through the public API."""
    found = RUNTIME.otel_keys
    if found is None:
        found = RUNTIME.otel_keys = public_keys()
    return found  # type: ignore[return-value]


def public_keys() -> tuple[Any, Any, Any, Any, Any]:
    """:func:`keys` through OpenTelemetry's public API alone (the keys are what its setters write)."""
    from opentelemetry import baggage, context, trace
    from opentelemetry.context.context import Context

    span_key = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))
    baggage_key = next(iter(baggage.set_baggage("k", "v", Context())))
    return span_key, baggage_key, Context, trace.INVALID_SPAN_CONTEXT, _PublicRuntimeContext(context)


class _PublicRuntimeContext:
    """The runtime context through the public functions (``opentelemetry.context.attach`` ...)."""

    def __init__(self, context: Any) -> None:
        self.attach, self.detach, self.get_current = context.attach, context.detach, context.get_current


def runtime_context() -> Any:
    """OpenTelemetry's runtime context (``attach``/``detach``/``get_current``): see :func:`keys`."""
    return keys()[4]


def phase_parent(explicit: Any = None) -> tuple[Any, Any, Mapping[str, Any] | None]:
    """Where a new phase goes, in one read of the current context: (the context it starts under, its parent span
    context, the baggage it inherits).

    ``explicit`` (a context from a carrier) wins; else the current span; else, outside
    every span, the job root with the current baggage (:func:`root_unless_current`).
    """
    span_key, baggage_key, context_type, invalid, runtime = keys()
    ctx = explicit if explicit is not None else runtime.get_current()
    span = ctx.get(span_key)
    parent = span.get_span_context() if span is not None else invalid
    if explicit is None and not (parent[0] and parent[1]) and RUNTIME.root_context is not None:  # (is_valid)
        root = RUNTIME.root_context
        bag = ctx.get(baggage_key)
        ctx = root if not bag else context_type({**root, baggage_key: {**(root.get(baggage_key) or {}), **bag}})
        span = ctx.get(span_key)
        parent = span.get_span_context() if span is not None else invalid
    return ctx, parent, ctx.get(baggage_key)


def under(ctx: Any, span: Any, step: Any = None, stepless: bool = False) -> Any:
    """``ctx`` with ``span`` current and, when given, ``step`` in its baggage (one copy of the context);
    ``stepless``: no step in its baggage at all (what runs inside a worker's start-up is in no step)."""
    span_key, baggage_key, context_type, _, _ = keys()
    new = context_type(ctx)  # Context refuses item assignment; a fresh copy is ours to fill
    dict.__setitem__(new, span_key, span)
    if step is not None:
        dict.__setitem__(new, baggage_key, {**(ctx.get(baggage_key) or {}), BAGGAGE_STEP: str(step)})
    elif stepless and BAGGAGE_STEP in (ctx.get(baggage_key) or {}):
        kept = {k: v for k, v in ctx.get(baggage_key).items() if k != BAGGAGE_STEP}
        dict.__setitem__(new, baggage_key, kept)
    return new


def inject_context() -> dict[str, str]:
    """A carrier (``{"traceparent": ..., "baggage": ...}``) for the active span, else the job root.

    Its W3C baggage carries the caller's ambient bucket (the innermost ``with_bucket``,
    else the bucket it was itself handed) and step, so a phase entered under it on
    another worker is bucketed and stepped like the caller. Empty when telemetry is
    off. Never raises.
    """
    if not RUNTIME.on or RUNTIME.resolve() is None:
        return {}
    try:
        ctx = phase_parent()[0]  # the current context with a span, else the job root's with the baggage
        ambient = AMBIENT.get()
        if ambient is not None:  # the innermost local with_bucket wins over what this caller was handed
            ctx = with_baggage(ctx, BAGGAGE_BUCKET, ambient[0].value)
        return carrier_for(ctx)
    except Exception as exc:
        internal_error(exc, "inject-context")
        return {}


def carrier_for(ctx: Any, *, env_names: bool = False) -> dict[str, str]:
    """The W3C carrier of ``ctx``; with ``env_names`` keyed ``TRACEPARENT``/``TRACESTATE``."""
    carrier: dict[str, str] = {}
    _propagator().inject(carrier, context=ctx)
    if env_names:
        return {k.upper(): v for k, v in carrier.items()}
    return carrier


def extract(carrier: Mapping[str, str] | None) -> Any:
    """The OTel context a carrier describes (case-insensitive keys); None when it has none."""
    if not carrier:
        return None
    lowered = {
        str(k).lower(): str(v) for k, v in carrier.items() if str(k).lower() in (_TRACEPARENT, _TRACESTATE, _BAGGAGE)
    }
    if _TRACEPARENT not in lowered:
        return None
    from opentelemetry import trace

    ctx = _propagator().extract(lowered)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def context_from_env(environ: Mapping[str, str] | None = None) -> Any:
    """The context in ``TRACEPARENT``/``TRACESTATE`` of the environment, or None."""
    env = os.environ if environ is None else environ
    return extract({k: env[k] for k in ("TRACEPARENT", "TRACESTATE") if k in env})


@contextlib.contextmanager
def attach_context(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make ``carrier``'s trace context current inside the block (a no-op when off or empty)."""
    token = None
    if carrier and RUNTIME.on and RUNTIME.resolve() is not None:
        try:
            ctx = extract(carrier)
            if ctx is not None:
                from opentelemetry import context

                token = context.attach(ctx)
        except Exception as exc:
            internal_error(exc, "attach-context")
            token = None
    try:
        yield
    finally:
        if token is not None:
            from opentelemetry import context

            context.detach(token)
