"""The embedded file store: JSON lines under ``trace_dir/<run_id>/``, no collector needed.

Format version 1 (``"v": 1`` on every line). One file per process and signal:

* ``spans-<group>-<rank>-<pid>.jsonl`` — one line per span::

    {"v": 1, "name": "generation", "trace_id": "<32 hex>", "span_id": "<16 hex>",
     "parent_span_id": "<16 hex>" | null, "start_ns": int, "end_ns": int,
     "kind": "INTERNAL", "status": "UNSET" | "OK" | "ERROR", "status_message": str | null,
     "attributes": {...}, "events": [{"name", "time_ns", "attributes"}],
     "links": [{"trace_id", "span_id", "attributes"}], "thread": int | null, "thread_name": str | null,
     "scope": str, "resource": {...}}

* ``metrics-<group>-<rank>-<pid>.jsonl`` — one line per metric export:
  ``{"v": 1, "time_ns": int, "resource": {...}, "metrics": <OTel MetricsData JSON>}``.

Each batch is appended with ``os.write`` on an ``O_APPEND`` descriptor, whole lines
only, so a killed process can at worst leave one unfinished last line; readers skip it
and count it (:class:`ReadStats`). A write that fails part-way (a full disk) is cut
back to where the batch began, so its retry leaves no duplicate and no garbage line;
readers also drop a span id seen twice in one file. Every line is strict JSON (a NaN
or infinite number is written as the string ``"NaN"``, ``"Infinity"``, ``"-Infinity"``).
Every path part (group, rank, run id) is sanitised and shortened: no value writes
outside ``trace_dir``. A forked child never writes into its parent's files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from lens_rl._errors import internal_error, warn_once

FORMAT_VERSION = 1
_CHUNK_BYTES = 1 << 16
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MAX_PART = 64  # characters per path part; a file name stays far below 255 bytes


def safe_part(value: object, default: str) -> str:
    """``value`` as one harmless path part: no separator, no ``..``, not empty, not too long."""
    text = _UNSAFE.sub("_", str(value)).strip(".") or default
    if len(text) > _MAX_PART:
        import hashlib

        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        text = f"{text[: _MAX_PART - 9]}-{digest}"
    return text


def store_path(trace_dir: str, run_id: str, kind: str, resource: Resource) -> Path:
    """Where this process writes ``kind`` (``spans`` or ``metrics``) for ``run_id``; always inside ``trace_dir``."""
    attrs = resource.attributes
    group = safe_part(attrs.get("rl.worker_group", "worker"), "worker")
    rank = safe_part(attrs.get("nv.dl.rank", 0), "0")
    name = f"{kind}-{group}-{rank}-{os.getpid()}.jsonl"
    return Path(trace_dir) / safe_part(run_id, "run") / name


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def span_record(span: ReadableSpan, resource: dict[str, Any] | None = None) -> dict[str, Any]:
    """The version-1 record of one finished span (what a line of the store holds)."""
    ctx = span.context
    parent = span.parent
    status = span.status
    return {
        "v": FORMAT_VERSION,
        "name": span.name,
        "trace_id": _hex(ctx.trace_id, 32),
        "span_id": _hex(ctx.span_id, 16),
        "parent_span_id": _hex(parent.span_id, 16) if parent is not None else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "kind": span.kind.name,
        "status": status.status_code.name,
        "status_message": status.description,
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})} for e in span.events
        ],
        "links": [
            {
                "trace_id": _hex(link.context.trace_id, 32),
                "span_id": _hex(link.context.span_id, 16),
                "attributes": dict(link.attributes or {}),
            }
            for link in span.links
        ],
        "thread": getattr(span, "_lens_thread", None),
        "thread_name": getattr(span, "_lens_thread_name", None),
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "resource": dict(span.resource.attributes) if resource is None else resource,
    }


class _AppendFile:
    """An ``O_APPEND`` file written in whole lines, created on first write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def write_lines(self, lines: Sequence[str]) -> None:
        """Append ``lines`` whole, or not at all: a failed write is cut back to where it began."""
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        start = os.fstat(self._fd).st_size  # one writer per file (one process): this is where the batch begins
        try:
            chunk: list[bytes] = []
            size = 0
            for line in lines:
                data = line.encode("utf-8") + b"\n"
                if size + len(data) > _CHUNK_BYTES and chunk:
                    self._write_all(b"".join(chunk))
                    chunk, size = [], 0
                chunk.append(data)
                size += len(data)
            if chunk:
                self._write_all(b"".join(chunk))
        except OSError:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass  # the retry may still leave a partial line; readers skip and count it
            raise

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        assert self._fd is not None
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None


def _json_default(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, set, frozenset)) else str(value)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as strings, at any depth (strict JSON has neither)."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_line(record: Any) -> str:
    """One strict-JSON line for ``record``."""
    try:
        return json.dumps(record, separators=(",", ":"), default=_json_default, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(record), separators=(",", ":"), default=_json_default, allow_nan=False)


class _StoreWriter:
    """What both file exporters share: the file, the fork guard, and one warning per write error."""

    def __init__(self, trace_dir: str, run_id: str, kind: str, resource: Resource) -> None:
        self._file = _AppendFile(store_path(trace_dir, run_id, kind, resource))
        self._resource = dict(resource.attributes)
        self._pid = os.getpid()

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, lines: Sequence[str]) -> bool:
        if os.getpid() != self._pid:
            return True  # a forked child: the parent's file is not ours (the child has its own handle)
        try:
            self._file.write_lines(lines)
        except OSError as exc:
            warn_once(f"file-store-{self._file.path}", "lens_rl: cannot write telemetry to %s: %s (retrying)",
                      self._file.path, exc)  # fmt: skip
            return False
        return True


class FileSpanExporter(_StoreWriter, SpanExporter):
    """Appends spans to ``spans-<group>-<rank>-<pid>.jsonl`` under ``trace_dir/<run_id>/``."""

    def __init__(self, trace_dir: str, run_id: str, resource: Resource) -> None:
        _StoreWriter.__init__(self, trace_dir, run_id, "spans", resource)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = self.write([json_line(span_record(s, self._resource)) for s in spans])
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class FileMetricExporter(_StoreWriter, MetricExporter):
    """Appends each metric export as one line to ``metrics-<group>-<rank>-<pid>.jsonl``."""

    def __init__(self, trace_dir: str, run_id: str, resource: Resource, **kwargs: Any) -> None:
        MetricExporter.__init__(self, **kwargs)
        _StoreWriter.__init__(self, trace_dir, run_id, "metrics", resource)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            record = {
                "v": FORMAT_VERSION,
                "time_ns": time.time_ns(),
                "resource": self._resource,
                "metrics": json.loads(metrics_data.to_json(indent=None)),
            }
        except (ValueError, TypeError) as exc:
            internal_error(exc, "metric-encode")
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS if self.write([json_line(record)]) else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._file.close()


# ---------------------------------------------------------------------- reading


def process_of(record: Mapping[str, Any]) -> tuple[str, int, int]:
    """(worker group, rank, pid) of the process that wrote ``record``; bad values read as defaults."""
    res = record.get("resource") or {}
    values = []
    for key in ("nv.dl.rank", "process.pid"):
        try:
            values.append(int(res.get(key, 0) or 0))
        except (TypeError, ValueError):
            values.append(0)
    return str(res.get("rl.worker_group", "worker")), values[0], values[1]


@dataclasses.dataclass
class ReadStats:
    """What a read of the store found: files read and lines skipped (truncated or garbage)."""

    files: int = 0
    lines: int = 0
    skipped: int = 0
    duplicates: int = 0


def iter_span_records(trace_dir: str | os.PathLike[str], stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """Every span record under ``trace_dir`` (any depth); bad lines are skipped and counted."""
    stats = stats if stats is not None else ReadStats()
    for path in sorted(Path(trace_dir).rglob("spans-*.jsonl")):
        stats.files += 1
        seen: set[str] = set()  # a span written twice (a retried batch) counts once
        with open(path, "rb") as handle:
            for raw in handle:
                stats.lines += 1
                try:
                    record = json.loads(raw)
                except ValueError:
                    stats.skipped += 1
                    continue
                if not isinstance(record, dict) or record.get("v") != FORMAT_VERSION or "span_id" not in record:
                    stats.skipped += 1
                    continue
                span_id = record["span_id"]
                if span_id in seen:
                    stats.duplicates += 1
                    continue
                seen.add(span_id)
                yield record
