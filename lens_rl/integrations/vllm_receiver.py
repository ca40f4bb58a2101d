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
  within a file (and across files only through ``"pr"``), so each file stays consistent; the repeats seen
  among the most recent ``max_ids`` span ids are counted (:meth:`StoreReceiver.stats`, ``ids_repeated``)
  and warned about once;
* **a resent batch is written once**: OTLP/HTTP is at-least-once (an exporter that timed out sends the
  same request again). Each request's decoded body is remembered (a digest) among the last
  ``max_batches``; the same body again is answered 200 and not written (``resent``), also while the first
  is still being written (then 503: its writer decides). Readers also drop a span id seen twice in a file;
* **whole-line writes** through the store's writer (:class:`lens_rl.export.file.StoreWriter`; a batch is
  all or nothing);
* **bounded** (:mod:`lens_rl.integrations.bounded_http`): at most ``max_connections`` request threads
  (a connection kept alive between exports holds none, so every exporting process is served; a request
  waits for a thread), at most ``max_open`` connections (272: 503 beyond, before a byte is read), at most
  ``max_requests`` bodies in memory (a slot taken before the body: 503 beyond; vLLM's exporter retries), a
  body over ``max_body_bytes`` refused (413), a connection silent for ``read_timeout_s`` closed (a client
  whose body is not whole by then dropped); at most ``max_files`` processes get a file; the memory of ids and batches is a window of fixed size. A body is decoded and written a few
  thousand spans at a time (:func:`lens_rl.integrations.otlp_proto.span_chunks`), so what a request holds is
  its body and one chunk; a body of over ``max_spans`` spans (65,536: OpenTelemetry's batches are 512) is
  refused (413), one whose outer messages hold more fields than such spans could bring (millions of empty
  resource spans) refused (400) once its walk passes them. :meth:`StoreReceiver.close` returns within its budget.

Example::

    rx = StoreReceiver("lens_traces", "run42", handle.resource.attributes)
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = rx.endpoint
    ...
    rx.close(timeout_s=2.0)
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lens_rl._errors import internal_error, warn_once
from lens_rl.export.file import StoreWriter
from lens_rl.export.lines import json_line
from lens_rl.integrations.bounded_http import BoundedServer
from lens_rl.integrations.otlp_proto import (
    ID_REMOTE,
    ID_REMOTE_KNOWN,
    BodyError,
    attributes,
    body_of,
    count_spans,
    span_chunks,
)
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
    """One vLLM process's store file: its writer (header first)."""

    def __init__(self, writer: StoreWriter, name: str) -> None:
        self.writer = writer
        self.name = name
        self.lock = threading.Lock()


_WRITING = object()  # a batch's digest while its request is being written


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
        max_connections: int = 16,
        read_timeout_s: float = 10.0,
        max_files: int = 256,
        max_ids: int = 1 << 16,
        max_batches: int = 1024,
        max_spans: int = 1 << 16,
        max_open: int = 272,
    ) -> None:
        self.trace_dir, self.run_id = trace_dir, run_id
        self.resource = dict(resource)
        self.max_body_bytes, self.max_files, self.max_ids, self.max_batches = (
            max_body_bytes,
            max_files,
            max_ids,
            max_batches,
        )
        self.max_spans = max_spans
        self.since_ns = time.time_ns()  # before vLLM starts: no span it exports here starts earlier
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._files: dict[tuple[Any, ...], _ProcessFile] = {}
        self._owner: OrderedDict[bytes, tuple[Any, ...]] = OrderedDict()  # recent span id -> its process file
        self._batches: OrderedDict[bytes, object] = OrderedDict()  # recent bodies' digests (or _WRITING)
        self._stats = dict.fromkeys(("requests", "spans", "resent", "ids_repeated", "refused", "dropped"), 0)
        self._server = BoundedServer(
            self._serve,
            max_connections=max_connections,
            max_requests=max_requests,
            max_body_bytes=max_body_bytes,
            read_timeout_s=read_timeout_s,
            max_open=max_open,
            accepts=lambda path: path.split("?")[0].endswith("/v1/traces"),
            name="lens_rl-vllm-receiver",
        )
        self.port = self._server.port
        self._server.start()
        self.closed = False

    @property
    def endpoint(self) -> str:
        """The traces URL exporters post to (``http://127.0.0.1:<port>/v1/traces``)."""
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def stats(self) -> dict[str, Any]:
        """Requests, spans written, ``resent`` (requests not written again), ``ids_repeated`` (across
        processes, kept), ``refused`` requests (bad bodies, and the server's refusals: too many
        connections open or no request thread free in time, every slot taken, too large, another path), ``dropped`` spans (no file could take them),
        ``timed_out`` clients, ``connections`` accepted, and ``files``."""
        server = self._server.stats()
        with self._lock:
            refused = sum(server[k] for k in ("busy", "no_slot", "too_large", "bad"))
            return {
                **self._stats,
                "refused": self._stats["refused"] + refused,
                "timed_out": server["dropped"],
                "connections": server["connections"],
                "files": sorted(str(f.writer.path) for f in self._files.values()),
            }

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._stats[key] += n

    def _serve(self, path: str, headers: Any, raw: bytes) -> int:
        """Decode and write one request whose body was read whole (a slot held); its HTTP status."""
        if self.closed:
            return 503
        try:
            body = body_of(raw, headers.get("Content-Encoding"), self.max_body_bytes)
            del raw
            if count_spans(body, self.max_spans) > self.max_spans:  # (a bad body is refused before a line is written)
                warn_once(
                    "vllm-receiver-spans",
                    "lens_rl: a request of over %d spans refused (413); OpenTelemetry's batches are 512",
                    self.max_spans,
                )
                self._count("refused")
                return 413
            digest = hashlib.blake2b(body, digest_size=16).digest()
            seen = self._batch_begin(digest)
            if seen is not None:
                return seen
            status = 500
            try:
                status = self._write(body)
            finally:
                self._batch_end(digest, status == 200)
            return status
        except BodyError:
            self._count("refused")
            return 400
        except Exception as exc:
            internal_error(exc, "vllm-receiver")
            return 500

    def _batch_begin(self, digest: bytes) -> int | None:
        """None: write this batch (now marked as being written); else the status of one already seen (200:
        written before, counted ``resent``; 503: being written by another request, retry)."""
        with self._lock:
            state = self._batches.get(digest)
            if state is None:
                self._batches[digest] = _WRITING
                return None
            if state is _WRITING:
                return 503
            self._batches.move_to_end(digest)
            self._stats["resent"] += 1
            return 200

    def _batch_end(self, digest: bytes, written: bool) -> None:
        """Remember a batch written (the window keeps the last ``max_batches``); forget one that was not."""
        with self._lock:
            if not written:
                self._batches.pop(digest, None)
                return
            self._batches[digest] = True
            while len(self._batches) > self.max_batches:
                self._batches.popitem(last=False)

    def _write(self, body: bytes) -> int:
        """Write a checked body a chunk of spans at a time (never the whole request decoded at once)."""
        self._count("requests")
        for resource, scope, spans in span_chunks(body):
            key = self._key(resource)
            target = self._file_for(key, resource, [scope])
            if target is None:
                self._count("dropped", len(spans))
                continue
            if not self._append(key, target, [(scope, span) for span in spans]):
                # nothing of this chunk was written: the exporter's retry sends the body again (what was
                # written of it is then repeated, and readers drop a span id seen twice in a file)
                return 503
        return 200

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
            writer = StoreWriter(
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
        lost = 0
        with target.lock:
            lines = [json_line(span_row(span, scope or "unknown")) for scope, span in spans]
            if not target.writer.write(lines):
                saved = target.writer.last_saved
                if not saved:
                    return False
                # a full disk kept the first part: a resend would write it twice; the rest is dropped
                lost, spans, lines = len(lines) - saved, spans[:saved], lines[:saved]
        if lost:
            self._count("dropped", lost)
        repeated = 0
        with self._lock:
            owners = self._owner
            for _scope, span in spans:
                span_id = bytes(span.span_id)
                owner = owners.get(span_id)
                if owner is None:
                    owners[span_id] = key
                elif owner != key:
                    repeated += 1
            while len(owners) > self.max_ids:
                owners.popitem(last=False)
            self._stats["spans"] += len(lines)
            self._stats["ids_repeated"] += repeated
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
        ok = self._server.stop(max(deadline - time.monotonic(), 0.0))
        with self._lock:
            files = list(self._files.values())
        for target in files:
            target.writer.close(max(deadline - time.monotonic(), 0.0))
        return ok
