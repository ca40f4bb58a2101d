"""A loopback HTTP server whose every cost is bounded: threads, bodies in memory, and time per client.

The vLLM loopback receiver (:mod:`lens_rl.integrations.vllm_receiver`) runs on it. Whatever its clients do
(64 of them each announcing 32 MiB and sending a trickle, one that connects and says nothing), it holds:

* **at most** ``max_connections`` **connection threads**: a connection beyond them is answered ``503`` by
  the accepting thread at once, before a byte of its request is read, and closed (an OTLP exporter
  retries);
* **at most** ``max_requests`` **bodies**: a request takes a slot *before* its body is read, and is answered
  ``503`` (its body unread, the connection closed) when none is free; a body over ``max_body_bytes`` is
  refused (``413``) unread; a body is read into memory as it arrives, never allocated at its announced size;
* **a read timeout**: a client that sends nothing for ``read_timeout_s`` (an idle keep-alive connection, a
  request line never finished), or whose body is not whole ``read_timeout_s`` after its headers, is dropped
  (its connection closed, its thread and slot given back).

Example::

    server = BoundedServer(handle, max_connections=16, max_requests=8, read_timeout_s=10.0)
    server.start()
    ...
    server.stop(timeout_s=2.0)

``handle(path, headers, body)`` returns the HTTP status; it runs on a connection thread with a slot held.
``accepts(path)``: whether a request's path is served (else ``404``, its body unread).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from lens_rl._errors import internal_error

__all__ = ["BoundedServer", "Handler"]

#: ``handle(path, headers, body) -> status``: what a request whose body was read whole gets.
Handler = Callable[[str, Any, bytes], int]

_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
_CHUNK = 1 << 16


class _DroppedError(Exception):
    """A client that did not send its body in time (or went away meanwhile): dropped without an answer."""


class BoundedServer(HTTPServer):
    """An HTTP/1.1 server on ``127.0.0.1`` (an ephemeral port: :attr:`port`) with the bounds of the module
    docstring; :meth:`stats` counts what it refused and dropped."""

    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 64  # (connections waiting in the kernel to be accepted: no thread, no memory of ours)

    def __init__(
        self,
        handle: Handler,
        *,
        max_connections: int = 16,
        max_requests: int = 8,
        max_body_bytes: int = 32 << 20,
        read_timeout_s: float = 10.0,
        accepts: Callable[[str], bool] = lambda path: True,
        name: str = "lens_rl-http",
    ) -> None:
        self.handle, self.accepts, self.name = handle, accepts, name
        self.max_body_bytes, self.read_timeout_s = max_body_bytes, read_timeout_s
        self._connections = threading.BoundedSemaphore(max_connections)
        self._slots = threading.BoundedSemaphore(max_requests)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(("busy", "no_slot", "too_large", "bad", "dropped", "connections"), 0)
        self.stopping = False
        super().__init__(("127.0.0.1", 0), _handler_class(self))
        self.port = int(self.server_address[1])
        self._thread = threading.Thread(target=self.serve_forever, name=name, daemon=True)

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread.start()

    def stats(self) -> dict[str, int]:
        """``busy`` (connections refused: every connection thread taken), ``no_slot`` (requests refused:
        every slot taken), ``too_large``, ``bad`` (no length, another path), ``dropped`` (clients timed out or gone mid-body), ``connections``."""
        with self._lock:
            return dict(self._counts)

    def count(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    # ---------------------------------------------------------------- the bounds (socketserver's hooks)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A connection thread for ``request``, or (every one taken) a 503 and the door closed, at once."""
        if self.stopping or not self._connections.acquire(blocking=False):
            self.count("busy")
            try:
                request.settimeout(1.0)  # (a few bytes into an empty socket buffer: never blocks for long)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self.count("connections")
        thread = threading.Thread(
            target=self._serve_connection, args=(request, client_address), name=f"{self.name}-conn", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # (no thread can be started: the connection is refused, its place given back)
            self._connections.release()
            self.shutdown_request(request)

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except (OSError, _DroppedError):
            pass  # a client gone or timed out: nothing to answer
        except Exception as exc:
            internal_error(exc, "loopback-http")
        finally:
            self.shutdown_request(request)
            self._connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # (never a traceback on the job's stderr; faults of lens_rl's own are logged where caught)

    def read_body(self, rfile: Any, connection: Any, length: int) -> bytes:
        """``length`` bytes of the body, read as they arrive, within :attr:`read_timeout_s` in all."""
        deadline = time.monotonic() + self.read_timeout_s
        body = bytearray()
        while len(body) < length:
            left = deadline - time.monotonic()
            if left <= 0 or self.stopping:
                self.count("dropped")
                raise _DroppedError
            connection.settimeout(min(left, self.read_timeout_s))
            try:
                chunk = rfile.read1(min(_CHUNK, length - len(body)))
            except OSError:  # (a timeout too)
                self.count("dropped")
                raise _DroppedError from None
            if not chunk:
                self.count("dropped")
                raise _DroppedError
            body += chunk
        connection.settimeout(self.read_timeout_s)
        return bytes(body)

    def take_slot(self) -> bool:
        return not self.stopping and self._slots.acquire(blocking=False)

    def give_slot(self) -> None:
        self._slots.release()

    def stop(self, timeout_s: float) -> bool:
        """Stop accepting and serving within ``timeout_s``: True when the accepting thread stopped in time.
        Connection threads still reading a body give up at their next read (their sockets are shut)."""
        self.stopping = True
        if not self._thread.is_alive():
            self.server_close()
            return True
        stopper = threading.Thread(target=self.shutdown, name=f"{self.name}-stop", daemon=True)
        stopper.start()
        stopper.join(max(timeout_s, 0.0))
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server_close()
        return not stopper.is_alive()


def _handler_class(server: BoundedServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = server.read_timeout_s  # (each read of a request line or header: an idle client is dropped)

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            status = self._answer()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            if status != 200:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()

        def _answer(self) -> int:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                server.count("bad")
                return 400
            if not server.accepts(self.path):
                server.count("bad")
                return 404
            if length > server.max_body_bytes:
                server.count("too_large")
                return 413
            if not server.take_slot():
                server.count("no_slot")
                return 503
            try:
                body = server.read_body(self.rfile, self.connection, length)
                return server.handle(self.path, self.headers, body)
            finally:
                server.give_slot()

    return _Handler
