"""aiohttp, real: a server and a client on 127.0.0.1; the trace crosses the hop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import lens_rl
from lens_rl import traced_phase
from lens_rl.integrations.aiohttp import tracing_middleware
from lens_rl.testing import SpanRecorder

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402


async def _serve(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application(middlewares=[tracing_middleware()])
    app.router.add_post("/rollout/{env}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def test_instrument_is_false_when_off() -> None:
    """With telemetry off, instrumenting returns False and raises nothing."""
    assert lens_rl.instrument_aiohttp_client() is False


def test_request_carries_traceparent_and_server_continues_the_trace(lens_spans: SpanRecorder) -> None:
    """The server sees the caller's trace id; its span and phases join the caller's trace."""
    assert lens_rl.instrument_aiohttp_client() is True
    assert lens_rl.instrument_aiohttp_client() is True  # idempotent
    seen: dict[str, str] = {}

    async def handler(request: web.Request) -> web.Response:
        seen["traceparent"] = request.headers.get("traceparent", "")
        with traced_phase("reward"):
            pass
        return web.json_response({"ok": True})

    async def main() -> None:
        runner, url = await _serve(handler)
        try:
            async with aiohttp.ClientSession() as session:
                with traced_phase("generation"):
                    async with session.post(url + "/rollout/math", json={"p": 1}) as resp:
                        assert resp.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())
    gen = lens_spans.find("generation")
    trace_hex = format(gen.context.trace_id, "032x")
    assert seen["traceparent"].split("-")[1] == trace_hex
    server = lens_spans.find("POST /rollout/{env}")
    assert server.kind.name == "SERVER" and server.context.trace_id == gen.context.trace_id
    assert server.attributes["http.response.status_code"] == 200
    client = next(s for s in lens_spans.spans if s.kind.name == "CLIENT")
    assert client.parent.span_id == gen.context.span_id and server.parent.span_id == client.context.span_id
    assert lens_spans.find("reward").parent.span_id == server.context.span_id


def test_server_error_is_recorded_and_raised(lens_spans: SpanRecorder) -> None:
    """A failing handler still answers 500 and its server span has status ERROR."""

    async def handler(request: web.Request) -> web.Response:
        raise RuntimeError("reward model down")

    async def main() -> int:
        runner, url = await _serve(handler)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/rollout/x") as resp:
                    return resp.status
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == 500
    server = lens_spans.find("POST /rollout/{env}")
    assert server.status.status_code.name == "ERROR"


def test_warns_when_a_session_already_exists(lens_spans: SpanRecorder, caplog: pytest.LogCaptureFixture) -> None:
    """A ClientSession built before instrumenting gets a warning: it sends no traceparent."""

    async def main() -> None:
        session = aiohttp.ClientSession()
        try:
            assert lens_rl.instrument_aiohttp_client() is True
        finally:
            await session.close()

    asyncio.run(main())
    assert any("already exists" in r.getMessage() for r in caplog.records)


def test_request_outside_any_phase_joins_the_job_trace(lens_spans: SpanRecorder) -> None:
    """A request made with no span current is a child of the job root, not a new trace."""
    from opentelemetry import trace

    from lens_rl._runtime import RUNTIME

    root = lens_spans.handle.tracer.start_span("rl.job")
    RUNTIME.root_context = trace.set_span_in_context(root)
    assert lens_rl.instrument_aiohttp_client() is True

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    async def main() -> None:
        runner, url = await _serve(handler)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/rollout/a") as resp:
                    assert resp.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())
    client = next(s for s in lens_spans.spans if s.kind.name == "CLIENT")
    assert client.parent.span_id == root.get_span_context().span_id
    server = lens_spans.find("POST /rollout/{env}")
    assert server.context.trace_id == root.get_span_context().trace_id
