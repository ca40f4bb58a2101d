"""aiohttp: ``traceparent`` on every outgoing request, and a server middleware that continues it.

Example (a rollout server)::

    lens_rl.init_telemetry_worker(worker_group="rollout_server")
    app = web.Application(middlewares=[tracing_middleware()])

and on the caller::

    lens_rl.instrument_aiohttp_client()         # before any ClientSession exists
    async with aiohttp.ClientSession() as session: ...
"""

from __future__ import annotations

import gc
import logging
import sys
from typing import Any

from lens_rl._errors import MissingExtraError, internal_error, require
from lens_rl._runtime import RUNTIME

__all__ = ["instrument_aiohttp_client", "tracing_middleware", "uninstrument_aiohttp_client"]

_log = logging.getLogger("lens_rl")


def _sessions_exist() -> bool:
    aiohttp = sys.modules.get("aiohttp")
    session_type = getattr(aiohttp, "ClientSession", None)
    if session_type is None:
        return False
    return any(isinstance(obj, session_type) for obj in gc.get_objects())


def instrument_aiohttp_client() -> bool:
    """Make every aiohttp request made afterwards carry the ambient ``traceparent``.

    Uses lens_rl's providers. False, not an exception, when telemetry is off or the
    ``aiohttp`` extra is missing. Idempotent. Call it before any ``ClientSession``
    exists: the instrumentation patches ``ClientSession.__init__``, so sessions built
    earlier send no ``traceparent`` (a warning says so).
    """
    if not RUNTIME.on:
        return False
    handle = RUNTIME.resolve()
    if handle is None:
        return False
    try:
        client = require("opentelemetry.instrumentation.aiohttp_client", "aiohttp", "aiohttp client tracing")
    except MissingExtraError as exc:
        _log.warning("lens_rl: %s", exc)
        return False
    AioHttpClientInstrumentor = client.AioHttpClientInstrumentor  # noqa: N806 - a class
    try:
        instrumentor = AioHttpClientInstrumentor()
        if not instrumentor.is_instrumented_by_opentelemetry:
            if _sessions_exist():
                _log.warning(
                    "lens_rl: an aiohttp ClientSession already exists; sessions built before "
                    "instrument_aiohttp_client() send no traceparent"
                )
            from lens_rl.export import providers

            # The live providers: a replaced handle keeps receiving the client spans, and a
            # request made outside every phase joins the job root.
            instrumentor.instrument(tracer_provider=providers.TRACER_PROVIDER, meter_provider=providers.METER_PROVIDER)
        return True
    except Exception as exc:
        internal_error(exc, "aiohttp-instrument")
        return False


def uninstrument_aiohttp_client() -> None:
    """Undo :func:`instrument_aiohttp_client` (sessions built afterwards send no traceparent)."""
    if "opentelemetry.instrumentation.aiohttp_client" not in sys.modules:
        return
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

    instrumentor = AioHttpClientInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


def tracing_middleware() -> Any:
    """An ``aiohttp.web`` middleware: each request continues the caller's trace in a SERVER span.

    The span is named ``"<METHOD> <route>"`` and is current while the handler runs, so
    phases inside it are its children. Decided per request: cheap pass-through while
    telemetry is off. Raises ``ImportError`` naming the extra when aiohttp is missing.
    """
    web = require("aiohttp.web", "aiohttp", "tracing_middleware")

    @web.middleware
    async def lens_rl_tracing(request: Any, handler: Any) -> Any:
        if not RUNTIME.on or RUNTIME.resolve() is None:
            return await handler(request)
        from lens_rl._errors import internal_error

        try:
            span, token = _start_server_span(request)
        except Exception as exc:
            internal_error(exc, "aiohttp-server")
            return await handler(request)
        try:
            response = await handler(request)
        except BaseException as exc:
            status = getattr(exc, "status", None)
            _end_server_span(span, token, status if isinstance(status, int) else 500, exc)
            raise
        _end_server_span(span, token, getattr(response, "status", 200), None)
        return response

    return lens_rl_tracing


def _start_server_span(request: Any) -> tuple[Any, Any]:
    from opentelemetry import context, trace

    from lens_rl.propagation import extract, root_unless_current

    handle = RUNTIME.handle
    if handle is None:
        raise RuntimeError("telemetry stopped")
    parent = extract(dict(request.headers))
    if parent is None:
        parent = root_unless_current()
    resource = getattr(request.match_info, "route", None)
    route = getattr(getattr(resource, "resource", None), "canonical", None) or request.path
    span = handle.tracer.start_span(
        f"{request.method} {route}",
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": request.method, "http.route": route, "url.path": request.path},
    )
    token = context.attach(trace.set_span_in_context(span, parent))
    return span, token


def _end_server_span(span: Any, token: Any, status: int, exc: BaseException | None) -> None:
    from opentelemetry import context
    from opentelemetry.trace import Status, StatusCode

    try:
        context.detach(token)
    except Exception as err:
        internal_error(err, "context-detach")
    try:
        span.set_attribute("http.response.status_code", int(status))
        if exc is not None and isinstance(exc, Exception) and status >= 500:
            span.record_exception(exc)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
    except Exception as err:
        internal_error(err, "aiohttp-server")
    finally:
        span.end()
