"""The loopback receiver: vLLM's processes export their spans here, and they land in the file store.

With the embedded file store there is no collector, and vLLM's engine-core and worker processes run
their own OpenTelemetry SDK with an OTLP exporter. :func:`lens_rl.integrations.vllm.vllm_tracing_kwargs`
starts one :class:`StoreReceiver` per process (lazily, once) on ``127.0.0.1`` and points vLLM at it; the
receiver writes what arrives into ``trace_dir/<run_id>/`` in the store's format v2:

* **one file and header per vLLM process** (``spans-<group>-<rank>-vllm-<kind>-<pid>.jsonl``), told
  apart by the exporting process's resource (``process.pid``, which the ``process`` resource detector
  lens_rl asks for adds; else its service name). Its identity is the caller's resource (run id, group,
  rank, attempt, host) merged with vLLM's (service name, pid, SDK), plus ``vllm.process_kind``
  (``front-end``, ``engine-core``, ``worker``: from the tracer's scope, else the process's);
* **ids and parents kept**; a span whose parent is not known to be local is marked ``"pr"`` (its parent,
  the caller's phase, lives in another file), and every line carries ``"sc"``, its scope;
* **ids repeated across processes are kept distinct per file**: vLLM seeds Python's ``random`` in its
  worker, and the SDK draws span ids from it, so processes repeat each other's ids. Readers link parents
  within a file (and across files only through ``"pr"``), so each file stays consistent; the repeats are
  counted (:meth:`StoreReceiver.stats`, ``ids_repeated``) and warned about once. A span id already written
  to the same file is a resend (OTLP/HTTP is at-least-once): it is dropped and counted (``resent``);
* **whole-line writes** through the store's writer (a batch is all or nothing);
* **bounded**: a request body over ``max_body_bytes`` is refused (413), at most ``max_requests`` are
  handled at once (503 beyond: vLLM's exporter retries), at most ``max_files`` processes get a file, the
  id memory stops growing at ``max_ids``; nothing is queued, so memory is O(one request per thread);
  :meth:`StoreReceiver.close` returns within its budget.

Example::

    rx = StoreReceiver("lens_traces", "run42", handle.resource.attributes)
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = rx.endpoint
    ...
    rx.close(timeout_s=2.0)
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lens_rl._errors import internal_error, warn_once
from lens_rl.export.file import _StoreWriter, json_line
from lens_rl.integrations.otlp_proto import ID_REMOTE, ID_REMOTE_KNOWN, BodyError, attributes, body_of, trace_spans
from lens_rl.store import safe_part

__all__ = ["IDENTITY_KEYS", "StoreReceiver", "pid_of", "process_kind", "span_row"]

#: The caller's resource keys that win over what vLLM's resource says (the job's identity).
IDENTITY_KEYS = ("rl.run_id", "rl.attempt", "rl.worker_group", "nv.dl.rank", "nv.dl.world_size")
_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUS = ("UNSET", "OK", "ERROR")


def pid_of(resource: Mapping[str, Any]) -> int:
    """The exporting process's pid: ``process.pid``, else vLLM's ``vllm.process_id`` (text); 0 when neither."""
    for key in ("process.pid", "vllm.process_id"):
        value = resource.get(key)
        if type(value) is int and value > 0:
            return value
        if type(value) is str and value.isdigit() and 0 < int(value) < 1 << 31:
            return int(value)
    return 0


def process_kind(scopes: Iterable[str], resource: Mapping[str, Any]) -> str:
    """``front-end``, ``engine-core`` or ``worker``: what vLLM's resource says (``vllm.process_kind``, else
    the module its tracer was made for, ``vllm.instrumenting_module_name``), else its spans' scopes."""
    own = str(resource.get("vllm.process_kind", "")).lower().replace("_", "-")
    if own in ("front-end", "engine-core", "worker"):
        return own
    module = str(resource.get("vllm.instrumenting_module_name", "")).lower()
    for kind, name in (
        ("worker", "vllm.worker"),
        ("engine-core", "vllm.engine_core"),
        ("front-end", "vllm.llm_engine"),
    ):
        if module == name:
            return kind
    names = [s.lower() for s in scopes]
    if any(n.startswith("vllm.v1.worker") or n.startswith("vllm.worker") for n in names):
        return "worker"
    if any(n.startswith("vllm.") for n in names):
        return "front-end"
    return "unknown"


def span_row(span: Any, scope: str) -> dict[str, Any]:
    """The store's v2 line of one OTLP span (another SDK's: it carries ``"sc"``, its scope)."""
    row: dict[str, Any] = {"n": span.name, "t": span.trace_id.hex(), "s": span.span_id.hex()}
    if span.parent_span_id:
        row["p"] = span.parent_span_id.hex()
        # Known local only when the exporter says so; a local parent is found in the file whatever "pr" says.
        if not (span.flags & ID_REMOTE_KNOWN) or span.flags & ID_REMOTE:
            row["pr"] = True
    row["b"] = span.start_time_unix_nano
    row["e"] = span.end_time_unix_nano
    if span.attributes:
        row["a"] = attributes(span.attributes)
    if 1 < span.kind < len(_KINDS):
        row["k"] = _KINDS[span.kind]
    if 0 < span.status.code < len(_STATUS):
        row["st"] = _STATUS[span.status.code]
        if span.status.message:
            row["sm"] = span.status.message
    if span.events:
        row["ev"] = [{"n": e.name, "ts": e.time_unix_nano, "a": attributes(e.attributes)} for e in span.events]
    if span.links:
        row["ln"] = [{"t": x.trace_id.hex(), "s": x.span_id.hex(), "a": attributes(x.attributes)} for x in span.links]
    row["sc"] = scope
    return row


class _ProcessFile:
    """One vLLM process's store file: its writer (header first) and the span ids written to it."""

    def __init__(self, writer: _StoreWriter, name: str) -> None:
        self.writer = writer
        self.name = name
        self.ids: set[bytes] = set()
        self.lock = threading.Lock()


class StoreReceiver:
    """An OTLP/HTTP receiver on ``127.0.0.1`` that writes every exporting process's spans into the store."""

    def __init__(
        self,
        trace_dir: str,
        run_id: str,
        resource: Mapping[str, Any],
        *,
        max_body_bytes: int = 32 << 20,
        max_requests: int = 8,
        max_files: int = 256,
        max_ids: int = 1 << 20,
    ) -> None:
        self.trace_dir, self.run_id = trace_dir, run_id
        self.resource = dict(resource)
        self.max_body_bytes, self.max_files, self.max_ids = max_body_bytes, max_files, max_ids
        self.since_ns = time.time_ns()  # before vLLM starts: no span it exports here starts earlier
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_requests)
        self._files: dict[tuple[Any, ...], _ProcessFile] = {}
        self._owner: dict[bytes, tuple[Any, ...]] = {}  # span id -> the first process file that wrote it
        self._stats = dict.fromkeys(("requests", "spans", "resent", "ids_repeated", "refused", "dropped"), 0)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                status = receiver._serve(self)
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                if status != 200:
                    self.send_header("Connection", "close")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="lens_rl-vllm-receiver", daemon=True)
        self._thread.start()
        self.closed = False

    @property
    def endpoint(self) -> str:
        """The traces URL exporters post to (``http://127.0.0.1:<port>/v1/traces``)."""
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def stats(self) -> dict[str, Any]:
        """Requests, spans written, ``resent`` (dropped as already written), ``ids_repeated`` (across
        processes, kept), ``refused`` requests, ``dropped`` spans (no file could take them), and ``files``."""
        with self._lock:
            return {**self._stats, "files": sorted(str(f.writer.path) for f in self._files.values())}

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._stats[key] += n

    def _serve(self, handler: BaseHTTPRequestHandler) -> int:
        """Read, decode and write one request; its HTTP status."""
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not handler.path.split("?")[0].endswith("/v1/traces") or length < 0:
            self._count("refused")
            return 404 if length >= 0 else 400
        if length > self.max_body_bytes:
            self._count("refused")
            handler.close_connection = True
            return 413
        raw = handler.rfile.read(length)
        if self.closed or not self._slots.acquire(blocking=False):
            self._count("refused")
            return 503
        try:
            body = body_of(raw, handler.headers.get("Content-Encoding"), self.max_body_bytes)
            return self._write(body)
        except BodyError:
            self._count("refused")
            return 400
        except Exception as exc:
            internal_error(exc, "vllm-receiver")
            return 500
        finally:
            self._slots.release()

    def _write(self, body: bytes) -> int:
        batches: dict[tuple[Any, ...], tuple[dict[str, Any], list[tuple[str, Any]]]] = {}
        for resource, scope, span in trace_spans(body):
            key = self._key(resource)
            batches.setdefault(key, (resource, []))[1].append((scope, span))
        self._count("requests")
        status = 200
        for key, (resource, spans) in batches.items():
            target = self._file_for(key, resource, [scope for scope, _ in spans])
            if target is None:
                self._count("dropped", len(spans))
                continue
            if not self._append(key, target, spans):
                status = 503  # nothing of this batch was written: the exporter's retry writes it whole
        return status

    @staticmethod
    def _key(resource: Mapping[str, Any]) -> tuple[Any, ...]:
        pid = pid_of(resource)
        if pid:
            return ("pid", pid)
        return ("service", str(resource.get("service.name", "")), str(sorted(resource.items())))

    def _file_for(self, key: tuple[Any, ...], resource: Mapping[str, Any], scopes: list[str]) -> _ProcessFile | None:
        with self._lock:
            target = self._files.get(key)
            if target is not None or self.closed:
                return target
            if len(self._files) >= self.max_files:
                warn_once(
                    "vllm-receiver-files",
                    "lens_rl: over %d vLLM processes; spans of more are dropped",
                    len(self._files),
                )
                return None
            kind = process_kind(scopes, resource)
            pid = pid_of(resource)
            merged = {**self.resource, **resource}
            merged.update({k: self.resource[k] for k in IDENTITY_KEYS if k in self.resource})
            merged["vllm.process_kind"] = kind
            if pid:
                merged["process.pid"] = pid
            else:
                merged.pop("process.pid", None)  # the caller's pid is not this process's
            name = self._name(merged, kind, pid, len(self._files))
            path = Path(self.trace_dir) / safe_part(self.run_id, "run") / name
            writer = _StoreWriter(
                self.trace_dir, self.run_id, "spans", merged, "worker", pid=pid, path=path, since_ns=self.since_ns
            )
            target = self._files[key] = _ProcessFile(writer, name)
            return target

    def _name(self, resource: Mapping[str, Any], kind: str, pid: int, n: int) -> str:
        group = safe_part(resource.get("rl.worker_group", "worker"), "worker")
        rank = safe_part(resource.get("nv.dl.rank", 0), "0")
        tail = str(pid) if pid else f"{safe_part(resource.get('service.name', 'vllm'), 'vllm')}-{n}"
        return f"spans-{group}-{rank}-vllm-{kind}-{tail}.jsonl"

    def _append(self, key: tuple[Any, ...], target: _ProcessFile, spans: list[tuple[str, Any]]) -> bool:
        with target.lock:
            lines, fresh = [], []
            for scope, span in spans:
                span_id = bytes(span.span_id)
                if span_id in target.ids:
                    self._count("resent")
                    continue
                lines.append(json_line(span_row(span, scope or "unknown")))
                fresh.append(span_id)
            if not lines:
                return True
            if not target.writer.write(lines):
                return False
            repeated = 0
            with self._lock:
                tracking = len(self._owner) < self.max_ids
                for span_id in fresh:
                    owner = self._owner.get(span_id)
                    if owner is None:
                        if tracking:
                            self._owner[span_id] = key
                    elif owner != key:
                        repeated += 1
                self._stats["spans"] += len(lines)
                self._stats["ids_repeated"] += repeated
            if len(target.ids) < self.max_ids:
                target.ids.update(fresh)
        if repeated:
            warn_once(
                "vllm-repeated-ids",
                "lens_rl: vLLM processes repeat each other's span ids (vLLM seeds Python's random, which their "
                "OpenTelemetry SDK draws ids from); each process's spans stay in a file of their own",
            )
        return True

    def close(self, timeout_s: float = 2.0) -> bool:
        """Stop receiving and close the files, within ``timeout_s``; True when every write ended in time."""
        if self.closed:
            return True
        self.closed = True
        if os.getpid() != self._pid:
            return True  # a forked child: the server thread and the files are the parent's
        deadline = time.monotonic() + max(timeout_s, 0.0)
        stopper = threading.Thread(target=self._server.shutdown, name="lens_rl-vllm-receiver-stop", daemon=True)
        stopper.start()
        stopper.join(max(deadline - time.monotonic(), 0.0))
        ok = not stopper.is_alive()
        try:
            self._server.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.server_close()
        with self._lock:
            files = list(self._files.values())
        for target in files:
            target.writer.close(max(deadline - time.monotonic(), 0.0))
        return ok
