"""A loopback HTTP server whose every cost is bounded: threads, bodies in memory, and time per client.

The vLLM loopback receiver (:mod:`lens_rl.integrations.vllm_receiver`) runs on it. Whatever its clients do
(64 of them each announcing 32 MiB and sending a trickle, one that connects and says nothing, 256 processes
each keeping a connection alive and exporting twice a second), it holds:

* **threads for requests, not connections**: an open connection waiting for its next request (an OTLP
  exporter keeps its connection alive between exports) holds no thread, only its socket, watched by the
  one accepting thread; at most ``max_connections`` **request threads** read and answer requests, and a
  request that arrives while all are busy waits for one (at most ``read_timeout_s``, then ``503``);
* **at most** ``max_open`` **connections**: a connection beyond them is answered ``503`` by the accepting
  thread at once, before a byte of its request is read, and closed (an OTLP exporter retries);
* **at most** ``max_requests`` **bodies**: a request takes a slot *before* its body is read, and is answered
  ``503`` (its body unread, the connection closed) when none is free; a body over ``max_body_bytes`` is
  refused (``413``) unread; a body is read into memory as it arrives, never allocated at its announced size;
* **a read timeout**: a connection that sends nothing for ``read_timeout_s`` (an idle keep-alive connection,
  a request line never finished) is closed, and a client whose body is not whole ``read_timeout_s`` after
  its headers is dropped (its connection closed, its thread and slot given back).

Example::

    server = BoundedServer(handle, max_connections=16, max_requests=8, read_timeout_s=10.0)
    server.start()
    ...
    server.stop(timeout_s=2.0)

``handle(path, headers, body)`` returns the HTTP status; it runs on a request thread with a slot held.
``accepts(path)``: whether a request's path is served (else ``404``, its body unread).
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from lens_rl._errors import internal_error
from lens_rl.integrations.http_connection import Connection, DroppedError, handler_class, refuse, send_busy

__all__ = ["BoundedServer", "Handler"]

#: ``handle(path, headers, body) -> status``: what a request whose body was read whole gets.
Handler = Callable[[str, Any, bytes], int]

_CHUNK = 1 << 16


class BoundedServer:
    """An HTTP/1.1 server on ``127.0.0.1`` (an ephemeral port: :attr:`port`) with the bounds of the module
    docstring; :meth:`stats` counts what it refused and dropped."""

    def __init__(
        self,
        handle: Handler,
        *,
        max_connections: int = 16,
        max_requests: int = 8,
        max_body_bytes: int = 32 << 20,
        read_timeout_s: float = 10.0,
        max_open: int = 272,
        accepts: Callable[[str], bool] = lambda path: True,
        name: str = "lens_rl-http",
    ) -> None:
        self.handle, self.accepts, self.name = handle, accepts, name
        self.max_body_bytes, self.read_timeout_s, self.max_open = max_body_bytes, read_timeout_s, max_open
        self._threads = threading.BoundedSemaphore(max_connections)
        self._slots = threading.BoundedSemaphore(max_requests)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(("busy", "no_slot", "too_large", "bad", "dropped", "connections"), 0)
        self.stopping = False
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.bind(("127.0.0.1", 0))
            self.socket.listen(64)  # (connections waiting in the kernel to be accepted: no thread, no memory of ours)
            self.socket.setblocking(False)
            self._wake_r, self._wake_w = socket.socketpair()
        except OSError:
            self.socket.close()
            raise
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.port = int(self.socket.getsockname()[1])
        self._handler = handler_class(self)
        self._open: set[Connection] = set()  # every connection, idle, waiting or served (loop thread and threads)
        self._idle: dict[Connection, float] = {}  # watched for its next request (loop thread only)
        self._ready: deque[Connection] = deque()  # a request arrived, waiting for a thread (loop thread only)
        self._back: deque[Connection] = deque()  # served, to be watched again (threads -> loop thread)
        self._closed = False  # (set under the lock by _close_all: nothing is handed back after it)
        self._selector = selectors.DefaultSelector()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread.start()

    def stats(self) -> dict[str, int]:
        """``busy`` (connections refused: ``max_open`` reached, or no request thread free in time), ``no_slot``
        (requests refused: every slot taken), ``too_large``, ``bad`` (no length, another path), ``dropped``
        (clients timed out or gone mid-body), ``connections`` (accepted)."""
        with self._lock:
            return dict(self._counts)

    def count(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    # ---------------------------------------------------------------- the accepting thread

    def _loop(self) -> None:
        selector = self._selector
        try:
            selector.register(self.socket, selectors.EVENT_READ, None)
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            while not self.stopping:
                for key, _ in selector.select(timeout=min(0.5, self.read_timeout_s)):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        conn = key.data
                        selector.unregister(conn.sock)
                        self._idle.pop(conn, None)
                        conn.since = time.monotonic()
                        self._ready.append(conn)
                self._watch_returned()
                self._dispatch()
                self._expire()
        except Exception as exc:
            if not self.stopping:
                internal_error(exc, "loopback-http")
        finally:
            self._close_all()

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(True)
            with self._lock:
                full = len(self._open) >= self.max_open
            if self.stopping or full:
                self.count("busy")
                refuse(sock)
                continue
            conn = Connection(sock, address)
            with self._lock:
                self._open.add(conn)
                self._counts["connections"] += 1
            self._watch(conn)

    def _watch(self, conn: Connection) -> None:
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (OSError, ValueError):
            self._forget(conn)
            return
        conn.since = time.monotonic()
        self._idle[conn] = conn.since

    def _watch_returned(self) -> None:
        while self._back:
            conn = self._back.popleft()
            if self.stopping:
                self._forget(conn)
            else:
                self._watch(conn)

    def _dispatch(self) -> None:
        """Give each waiting request a thread while one is free."""
        while self._ready and self._threads.acquire(blocking=False):
            conn = self._ready.popleft()
            thread = threading.Thread(target=self._serve, args=(conn,), name=f"{self.name}-req", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # (no thread can be started: the connection is refused, its place given back)
                self._threads.release()
                self.count("busy")
                self._forget(conn, refuse=True)

    def _expire(self) -> None:
        """Close connections idle for ``read_timeout_s``; refuse requests that waited that long for a thread."""
        now = time.monotonic()
        for conn, since in list(self._idle.items()):
            if now - since >= self.read_timeout_s:
                del self._idle[conn]
                try:
                    self._selector.unregister(conn.sock)
                except (KeyError, ValueError, OSError):
                    pass
                self._forget(conn)
        while self._ready and now - self._ready[0].since >= self.read_timeout_s:
            self.count("busy")
            self._forget(self._ready.popleft(), refuse=True)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # (a full pipe wakes the loop anyway; a closed one: stopped)

    def _forget(self, conn: Connection, refuse: bool = False) -> None:
        with self._lock:
            self._open.discard(conn)
        if refuse:
            send_busy(conn.sock)
        conn.close()

    def _close_all(self) -> None:
        for closing in (self._selector.close, self.socket.close):
            try:
                closing()
            except OSError:
                pass
        with self._lock:
            self._closed = True
            back = list(self._back)
            self._back.clear()
        for conn in [*self._idle, *self._ready, *back]:
            self._forget(conn)
        self._idle.clear()
        self._ready.clear()
        with self._lock:
            served = list(self._open)
        for conn in served:  # (a request thread reading a body gives up at its next read)
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    # ---------------------------------------------------------------- a request thread

    def _serve(self, conn: Connection) -> None:
        """Answer the requests the connection has sent, then hand it back to be watched (or close it)."""
        keep = False
        try:
            conn.sock.settimeout(self.read_timeout_s)
            while True:
                handler = self._handler(conn, conn.address, self)  # type: ignore[arg-type]  # (a request per call)
                if handler.close_connection or self.stopping:
                    break
                if not conn.buffered():
                    keep = True
                    break
        except (OSError, DroppedError):
            pass  # a client gone or timed out: nothing to answer
        except Exception as exc:
            internal_error(exc, "loopback-http")
        finally:
            self._threads.release()
            with self._lock:  # (handed back, or closed here: never into a queue _close_all has emptied)
                handed = keep and not self.stopping and not self._closed
                if handed:
                    self._back.append(conn)
            if not handed:
                self._forget(conn)
            self._wake()

    def read_body(self, rfile: Any, connection: Any, length: int) -> bytes:
        """``length`` bytes of the body, read as they arrive, within :attr:`read_timeout_s` in all."""
        deadline = time.monotonic() + self.read_timeout_s
        body = bytearray()
        while len(body) < length:
            left = deadline - time.monotonic()
            if left <= 0 or self.stopping:
                self.count("dropped")
                raise DroppedError
            connection.settimeout(min(left, self.read_timeout_s))
            try:
                chunk = rfile.read1(min(_CHUNK, length - len(body)))
            except OSError:  # (a timeout too)
                self.count("dropped")
                raise DroppedError from None
            if not chunk:
                self.count("dropped")
                raise DroppedError
            body += chunk
        connection.settimeout(self.read_timeout_s)
        return bytes(body)

    def take_slot(self) -> bool:
        return not self.stopping and self._slots.acquire(blocking=False)

    def give_slot(self) -> None:
        self._slots.release()

    def stop(self, timeout_s: float) -> bool:
        """Stop accepting and serving within ``timeout_s``: True when the accepting thread stopped in time
        (its connections closed). Request threads still reading a body give up at their next read (their
        sockets are shut)."""
        self.stopping = True
        if not self._thread.is_alive():
            if self._thread.ident is None:  # (never started)
                self._close_all()
            return True
        self._wake()
        self._thread.join(max(timeout_s, 0.0))
        return not self._thread.is_alive()
