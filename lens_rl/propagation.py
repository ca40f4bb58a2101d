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
import os
from collections.abc import Iterator, Mapping
from typing import Any

from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME

__all__ = ["attach_context", "inject_context"]

_TRACEPARENT = "traceparent"
_TRACESTATE = "tracestate"


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def root_unless_current() -> Any:
    """The job root's context when no span is current here, else None (the current one serves).

    The one rule that makes a job one trace: a span started outside every other span,
    in any thread or process, is a child of the job root.
    """
    root = RUNTIME.root_context
    if root is None:
        return None
    from opentelemetry import trace

    return None if trace.get_current_span().get_span_context().is_valid else root


def _current_or_root() -> Any:
    """The current context when a span is active in it, else the job root's context."""
    root = root_unless_current()
    if root is not None:
        return root
    from opentelemetry import context

    return context.get_current()


def inject_context() -> dict[str, str]:
    """A carrier (``{"traceparent": ...}``) for the active span, else the job root.

    Empty when telemetry is off. Never raises.
    """
    if not RUNTIME.on or RUNTIME.resolve() is None:
        return {}
    try:
        return carrier_for(_current_or_root())
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
    lowered = {str(k).lower(): str(v) for k, v in carrier.items() if str(k).lower() in (_TRACEPARENT, _TRACESTATE)}
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
