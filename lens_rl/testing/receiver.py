"""A real OTLP/HTTP receiver on loopback that decodes what exporters send.

For tests (lens_rl's and its users'): it listens on ``127.0.0.1``, accepts
``POST /v1/traces`` and ``/v1/metrics`` (protobuf, plain or gzip), decodes them with
``opentelemetry-proto`` and keeps the spans as plain dicts. It can also answer
slowly (``delay_s``) or with an error status (``fail_status``) to play a sick collector.

Example::

    with OTLPReceiver() as rx:
        ... export to rx.endpoint ...
        rx.wait_for_spans(10, timeout_s=5)
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lens_rl.integrations.otlp_proto import attributes, trace_spans

__all__ = ["OTLPReceiver", "hung_endpoint", "refused_endpoint"]


class _Server(ThreadingHTTPServer):
    """The receiver's HTTP server: a thread per connection, each a daemon; ``receiver`` is whom it serves."""

    daemon_threads = True
    receiver: OTLPReceiver


class _Handler(BaseHTTPRequestHandler):
    """One connection to the receiver: its POSTs answered as the receiver says, the connection tracked (so a
    test can drop them all)."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        receiver = self.server.receiver
        with receiver._cond:
            receiver._connections.add(self.connection)

    def finish(self) -> None:
        receiver = self.server.receiver
        with receiver._cond:
            receiver._connections.discard(self.connection)
        super().finish()

    def do_POST(self) -> None:
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding", "").lower() == "gzip":  # what collectors send by default
            body = gzip.decompress(body)
        status = receiver._status_for(self.path, body)
        if status == 200:
            receiver._handle(self.path, body, dict(self.headers))
        if receiver.delay_s:
            time.sleep(receiver.delay_s)
        with receiver._cond:
            receiver.statuses.append(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


class OTLPReceiver:
    """OTLP/HTTP protobuf receiver on ``127.0.0.1`` (``port=0`` picks a free port)."""

    def __init__(
        self,
        port: int = 0,
        *,
        delay_s: float = 0.0,
        fail_status: int | None = None,
        max_body_bytes: int | None = None,
        reject: Any = None,
    ) -> None:
        self.delay_s = delay_s
        self.fail_status = fail_status
        #: A trace request larger than this is answered 413 (as collectors with a size limit do).
        self.max_body_bytes = max_body_bytes
        #: ``reject(body) -> status or None``: answer a trace request with that status instead (poison batches).
        self.reject = reject
        #: Statuses answered, in order.
        self.statuses: list[int] = []
        self.spans: list[dict[str, Any]] = []
        self.metric_requests: list[Any] = []
        self.requests = 0
        self.headers: list[dict[str, str]] = []
        self._cond = threading.Condition()
        self._connections: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.receiver = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The base URL exporters take (``/v1/traces`` is appended by lens_rl)."""
        return f"http://127.0.0.1:{self.port}"

    def _status_for(self, path: str, body: bytes) -> int:
        if self.fail_status:
            with self._cond:
                self.requests += 1
            return self.fail_status
        if path.endswith("/v1/traces"):
            if self.max_body_bytes is not None and len(body) > self.max_body_bytes:
                return 413
            if self.reject is not None:
                status = self.reject(body)
                if status:
                    return int(status)
        return 200

    def _handle(self, path: str, body: bytes, headers: dict[str, str]) -> None:
        with self._cond:
            self.requests += 1
            self.headers.append(headers)
        if path.endswith("/v1/traces"):
            decoded = [
                {
                    "name": span.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex() or None,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "kind": span.kind,
                    "status_code": span.status.code,
                    "attributes": attributes(span.attributes),
                    "events": [{"name": e.name, "attributes": attributes(e.attributes)} for e in span.events],
                    "resource": resource,
                    "scope": scope,
                }
                for resource, scope, span in trace_spans(body)
            ]
            with self._cond:
                self.spans.extend(decoded)
                self._cond.notify_all()
        elif path.endswith("/v1/metrics"):
            from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            with self._cond:
                self.metric_requests.append(request)
                self._cond.notify_all()

    def metric_names(self) -> set[str]:
        """Names of every metric received so far."""
        with self._cond:
            return {
                m.name
                for req in self.metric_requests
                for rm in req.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            }

    def wait_for_spans(self, count: int, timeout_s: float = 10.0) -> bool:
        """Block until at least ``count`` spans arrived, at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self.spans) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def close(self) -> None:
        """Stop like a dead collector: no new connections, open keep-alive ones cut."""
        self._server.shutdown()
        self._server.server_close()
        with self._cond:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> OTLPReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def refused_endpoint() -> str:
    """A loopback URL whose port refuses connections (bound, then closed)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def hung_endpoint() -> tuple[str, socket.socket]:
    """A loopback URL that accepts connections and never answers. Close the socket when done."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)  # the kernel completes handshakes; nobody ever reads or replies
    return f"http://127.0.0.1:{sock.getsockname()[1]}", sock
