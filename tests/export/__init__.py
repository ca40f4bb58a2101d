"""Helpers the export tests share: the slack for bounded calls, an OTLP config, a burst of SDK spans, a real
OTLP/gRPC trace receiver."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

# Scheduling slack on a shared, busy 2-core machine. An unbounded call would take the
# 30 s export timeout (or forever), so this still fails on a real bound violation.
SLACK_S = 0.75


def otlp_config(endpoint: str, **extra: object) -> dict:
    """A driver config exporting over OTLP/HTTP to ``endpoint`` (``extra``: more telemetry fields)."""
    return {
        "telemetry": {"enabled": True, "exporter": "otlp", "endpoint": endpoint, **extra},
        "policy": {"model_name": "tiny-model"},
    }


def burst(handle: object, n: int) -> float:
    """Seconds to start and end ``n`` spans on ``handle``'s tracer."""
    tracer = handle.tracer  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(n):
        tracer.start_span("burst").end()
    return time.perf_counter() - t0


@contextlib.contextmanager
def grpc_trace_server() -> Iterator[tuple[int, list[tuple[str, dict[str, str]]]]]:
    """A real OTLP/gRPC trace server on loopback (the test skips without grpc): its port, and each span it
    received as (name, the request's metadata)."""
    import pytest

    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    received: list[tuple[str, dict[str, str]]] = []

    class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # type: ignore[no-untyped-def]  # (the gRPC service names it)
            metadata = dict(context.invocation_metadata())
            received.extend(
                (s.name, metadata) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
            )
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, received
    finally:
        server.stop(0)
