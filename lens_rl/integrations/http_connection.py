"""One connection of the bounded loopback server (:mod:`lens_rl.integrations.bounded_http`): its socket and
buffered reader, kept across its requests; the handler that answers each request on a request thread (a length
checked, a path accepted, a slot taken *before* the body is read); and the ``503`` a refused client gets at once.

Example::

    conn = Connection(sock, address)
    handler_class(server)(conn, conn.address, server)   # answers one request; the connection stays open
"""

from __future__ import annotations

import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

__all__ = ["BUSY", "Connection", "DroppedError", "RequestServer", "Writer", "handler_class", "refuse", "send_busy"]

#: What a client is answered when no connection, thread or slot is free for it (it retries after a second).
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"


class RequestServer(Protocol):
    """What a request's handler needs of its server (:class:`~lens_rl.integrations.bounded_http.BoundedServer`)."""

    max_body_bytes: int

    def accepts(self, path: str) -> bool: ...
    def handle(self, path: str, headers: Any, body: bytes) -> int: ...
    def count(self, key: str) -> None: ...
    def take_slot(self) -> bool: ...
    def give_slot(self) -> None: ...
    def read_body(self, rfile: Any, connection: Any, length: int) -> bytes: ...


class DroppedError(Exception):
    """A client that did not send its body in time (or went away meanwhile): dropped without an answer."""


class Connection:
    """One open connection: its socket and buffered reader (kept across its requests), and since when it waits."""

    __slots__ = ("address", "rfile", "since", "sock", "wfile")

    def __init__(self, sock: socket.socket, address: Any) -> None:
        self.sock, self.address = sock, address
        self.rfile = sock.makefile("rb")
        self.wfile = Writer(sock)
        self.since = time.monotonic()

    def buffered(self) -> bool:
        """Whether its next request's bytes are already here (read ahead, or sent at once): never blocks; the
        socket's read timeout as it was."""
        timeout = self.sock.gettimeout()
        try:
            self.sock.setblocking(False)
            return bool(self.rfile.peek(1))
        except OSError:
            return False
        finally:
            try:
                self.sock.settimeout(timeout)  # (its read timeout back: setblocking(True) would clear it)
            except OSError:
                pass

    def close(self) -> None:
        for closing in (self.rfile.close, lambda: self.sock.shutdown(socket.SHUT_WR), self.sock.close):
            try:
                closing()
            except OSError:
                pass


class Writer:
    """What a handler writes its answer to: the whole of it, at once (``sendall``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def write(self, data: bytes) -> int:
        self.sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


def send_busy(sock: socket.socket) -> None:
    """A 503 (a few bytes into an empty socket buffer: never blocks for long); a socket already gone is let be."""
    try:
        sock.settimeout(1.0)
        sock.sendall(BUSY)
    except OSError:
        pass


def refuse(sock: socket.socket) -> None:
    """A 503 at once (before a byte of the request is read), and the connection closed."""
    send_busy(sock)
    for closing in (lambda: sock.shutdown(socket.SHUT_WR), sock.close):
        try:
            closing()
        except OSError:
            pass


def handler_class(server: RequestServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        """One request of a connection (made per request; the connection and its reader outlive it)."""

        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            conn = self.request  # (a _Connection: its socket carries the read timeout, each read of a line)
            self.connection = conn.sock
            self.rfile, self.wfile = conn.rfile, conn.wfile

        def handle(self) -> None:
            self.close_connection = True  # (unless the request keeps it alive)
            self.handle_one_request()

        def finish(self) -> None:
            pass  # (the connection stays open for its next request, or its thread closes it)

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
