"""The embedded file store's writer: JSON lines under ``trace_dir/<run_id>/``, no collector needed.

The format (a header line with the process's resource, then short-key span lines), the file names and
the reader live in :mod:`lens_rl.store`: the writer follows the format, the reader never looks at
anything but the files. One file per process and signal.

Each batch is appended with ``os.write`` on an ``O_APPEND`` descriptor, whole lines
only, so a killed process can at worst leave one unfinished last line; readers skip it
and count it. A write that fails part-way (a full disk) keeps the whole lines that fitted (the
header first) and is cut back to the end of the last of them; the exporter tells the pipeline
(``last_saved``) so only the rest is retried or counted lost: no duplicate and no garbage line,
also when the process exits meanwhile (closing waits for a write in progress); readers also drop
a span id seen twice in one file. Every line is strict JSON (a NaN or infinite number is
written as the string ``"NaN"``, ``"Infinity"``, ``"-Infinity"``). Every path part
(group, rank, run id) is sanitised and shortened: no value writes outside
``trace_dir``. A forked child never writes into its parent's files.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from lens_rl._errors import internal_error, warn_once
from lens_rl.export.lines import hex_id, json_line, span_lines
from lens_rl.store import header, store_path

_CHUNK_BYTES = 1 << 16
_CLOSE_WAIT_S = 2.0  # how long closing waits for a write in progress (a local write takes milliseconds)


class _AppendFile:
    """An ``O_APPEND`` file written in whole lines, created on first write.

    A write and its cut-back run under one lock; :meth:`close` (also run at interpreter
    exit for every open file) takes that lock, so a process that exits while its export
    thread is writing waits for the write to end whole or be cut back, and no write
    starts after it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        _OPEN_FILES.add(self)

    def write_lines(self, lines: Sequence[str]) -> None:
        """Append ``lines`` whole. A write that fails part-way (a full disk) keeps the whole lines that got
        out, is cut back to the end of the last of them (never half a line), and raises
        :class:`PartialWriteError` saying how many of ``lines`` were kept (0: the file is as it was).

        Raises :class:`FileClosedError` once the file is closed.
        """
        with self._lock:
            if self._closed:
                raise FileClosedError(errno.EBADF, f"{self.path} is closed")
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            end = os.fstat(self._fd).st_size  # one writer per file (one process): the end of its last whole line
            kept = 0  # lines whole on disk
            try:
                chunk: list[bytes] = []
                size = 0
                for line in lines:
                    data = line.encode("utf-8") + b"\n"
                    if size + len(data) > _CHUNK_BYTES and chunk:
                        end, kept = self._write_chunk(chunk, end, kept)
                        chunk, size = [], 0
                    chunk.append(data)
                    size += len(data)
                if chunk:
                    self._write_chunk(chunk, end, kept)
            except PartialWriteError:
                raise
            except OSError as exc:
                self._cut_back(end)
                raise PartialWriteError(exc.errno or errno.EIO, str(exc), kept) from exc
            finally:
                if self._closed:  # closed while this write was stuck: the close left the descriptor to us
                    self._close_fd()

    def _write_chunk(self, chunk: list[bytes], end: int, kept: int) -> tuple[int, int]:
        """Write ``chunk`` (whole lines) at ``end``: the new end and lines kept. A short write on a regular
        file means it is full: the file is cut back to the last whole line written, never tried further."""
        assert self._fd is not None
        data = b"".join(chunk)
        written = os.write(self._fd, data)
        if written < len(data):
            whole = data.rfind(b"\n", 0, written) + 1  # (0: not one whole line of this chunk got out)
            self._cut_back(end + whole)
            raise PartialWriteError(
                errno.ENOSPC,
                f"short write ({written} of {len(data)} bytes): {os.strerror(errno.ENOSPC)}",
                kept + data.count(b"\n", 0, whole),
            )
        return end + written, kept + len(chunk)

    def _cut_back(self, end: int) -> None:
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, end)
        except OSError:
            pass  # the retry may still leave a partial line; readers skip and count it

    def take_place_of(self, old: Path, lines: Sequence[str]) -> bool:
        """Become ``old`` (a file of this process) with ``lines`` as its content, before anything was written
        here: ``lines`` go to a side file (a name readers never list), synced, which replaces ``old`` and is
        then renamed to :attr:`path`, each step atomic. At every instant the lines are on disk in one readable
        file, never in two (a kill at any point loses nothing and double counts nothing). False (``old`` left
        as it was, nothing here) when this file was written already or a step failed."""
        side = self.path.with_name(self.path.name + ".adopting")
        with self._lock:
            if self._closed or self._fd is not None or self.path.exists():
                return False
            try:
                fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    data = "".join(line + "\n" for line in lines).encode("utf-8")
                    while data:
                        data = data[os.write(fd, data) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(side, old)  # old's readers now see this file's header over the same lines
            except OSError:
                with contextlib.suppress(OSError):
                    side.unlink()
                return False
            try:
                os.replace(old, self.path)
            except OSError:
                return False  # the lines are whole under old's name; this file starts with its own header
            return True

    def close(self, wait_s: float = _CLOSE_WAIT_S) -> None:
        """Refuse further writes, wait for one in progress (at most ``wait_s``), close the descriptor."""
        self._closed = True
        if os.getpid() != self._pid:
            return  # a forked child: the parent's writer thread is not here, its lock may be held forever
        if not self._lock.acquire(timeout=wait_s):
            return  # a write stuck past the wait (a hung file system): it closes the descriptor when done
        try:
            self._close_fd()
        finally:
            self._lock.release()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class FileClosedError(OSError):
    """A write to a store file after it was closed (telemetry shut down): nothing was written."""


class PartialWriteError(OSError):
    """A write that failed part-way (a full disk): ``kept`` of its lines are whole on disk, the rest not."""

    def __init__(self, code: int, message: str, kept: int) -> None:
        super().__init__(code, message)
        self.kept = kept


_OPEN_FILES: weakref.WeakSet[_AppendFile] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    # Daemon threads stop wherever they are once the interpreter finalizes: an export
    # thread between a failed write and its cut-back would leave half a line on disk.
    for file in list(_OPEN_FILES):
        file.close()


atexit.register(_close_all_at_exit)  # registered on import, before lifecycle's: runs after its shutdown


class StoreWriter:
    """One store file written in whole lines: its header (the process's resource, written with the first
    batch), the fork guard, one warning per write error. Both file exporters are built on it, and so is
    anything that writes another process's spans into the store (the vLLM loopback receiver).

    ``kind``: ``"spans"`` or ``"metrics"``; ``attributes``: the process's resource (the header's identity);
    ``role``: ``"driver"`` or ``"worker"``. :meth:`write` appends lines already encoded (strict JSON, one
    record each: :func:`json_line`), all or nothing; :meth:`close` refuses further writes.

    Example::

        writer = StoreWriter(trace_dir, run_id, "spans", resource, "worker", pid=pid, path=path)
        writer.write([json_line(row) for row in rows])   # False: nothing written (retry, or count it lost)
        writer.close()
    """

    def __init__(
        self,
        trace_dir: str,
        run_id: str,
        kind: str,
        attributes: dict[str, Any],
        role: str,
        *,
        pid: int | None = None,
        path: Path | None = None,
        since_ns: int | None = None,
    ) -> None:
        """``pid``, ``path``, ``since_ns``: another process's file written here (vLLM's, by the loopback
        receiver): the header's pid, the file, and its time origin (default: this process's, now)."""
        self._pid = os.getpid()
        pid = self._pid if pid is None else pid
        self._file = _AppendFile(path or store_path(trace_dir, run_id, kind, attributes, pid))
        # since: made as telemetry starts, before any span of this process can start (readers' time origin)
        since_ns = time.time_ns() if since_ns is None else since_ns
        self._header: dict[str, Any] | None = header(kind, attributes, pid, since_ns, role=role)

    @property
    def path(self) -> Path:
        return self._file.path

    def close(self, wait_s: float = _CLOSE_WAIT_S) -> None:
        """No more writes; waits for one in progress at most ``wait_s``."""
        self._file.close(wait_s)

    def set_root(self, span_id: int) -> None:
        """Name the job root's span id in the header (the driver's: its top-level spans' parent)."""
        if self._header is not None:
            self._header["root"] = hex_id(span_id, 16)

    def adopt(self, path: Path) -> None:
        """Take over ``path``, a file this process wrote under another identity before this writer began (a
        lazy start that the driver's init replaced, its writer closed): this header (its time origin the
        earlier one) and ``path``'s lines are written at once and take ``path``'s place
        (:meth:`_AppendFile.take_place_of`: a kill at any moment loses none of them, never counts one twice).
        Nothing happens once this header is out, for another folder, or when ``path`` cannot be read or
        replaced (then it stays as it is: its spans are read under its own header)."""
        if self._header is None or path == self._file.path or path.parent != self._file.path.parent:
            return
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError):
            return
        since: Any = None
        adopted: list[str] = []
        for line in lines:
            if line.startswith('{"v"'):  # its header(s): the identity this file replaces
                with contextlib.suppress(ValueError, AttributeError):
                    since = json.loads(line).get("since")
                if isinstance(since, int):
                    self._header["since"] = min(self._header["since"], since)
            elif line.strip():
                adopted.append(line)
        if self._file.take_place_of(path, [json_line(self._header), *adopted]):
            self._header = None

    #: On a False :meth:`write`: how many leading ``lines`` are on disk all the same (a full disk kept the
    #: whole lines that fitted); the caller retries or counts lost only the rest.
    last_saved = 0

    def write(self, lines: Sequence[str]) -> bool:
        """Append ``lines`` (the header first, the first time) whole: True when written (or in a forked
        child, which never writes its parent's file), False on an error (warned once per file) or once
        closed; then the first :attr:`last_saved` of ``lines`` were written (a full disk), the rest not."""
        if os.getpid() != self._pid:
            return True  # a forked child: the parent's file is not ours (the child has its own handle)
        header = self._header
        first = [json_line(header)] if header is not None else []
        self.last_saved = 0
        try:
            # The header goes out with the first batch, in the same write: a failed first
            # write leaves neither, and its retry writes both.
            self._file.write_lines([*first, *lines])
            self._header = None
        except FileClosedError:
            return False  # telemetry shut down meanwhile: counted lost by the pipeline, already warned
        except OSError as exc:
            kept = exc.kept if isinstance(exc, PartialWriteError) else 0
            if kept:  # a full disk: the whole lines that fitted stay (the header first), never written twice
                self._header = None
                self.last_saved = max(kept - len(first), 0)
            warn_once(
                f"file-store-{self._file.path}",
                "lens_rl: cannot write telemetry to %s: %s (retrying)",
                self._file.path,
                exc,
            )
            return False
        return True


class FileSpanExporter(StoreWriter, SpanExporter):
    """Appends spans to ``spans-<group>-<rank>-<pid>.jsonl`` under ``trace_dir/<run_id>/``."""

    def __init__(self, trace_dir: str, run_id: str, attributes: dict[str, Any], role: str = "worker") -> None:
        StoreWriter.__init__(self, trace_dir, run_id, "spans", attributes, role)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = self.write(span_lines(spans))
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class FileMetricExporter(StoreWriter, MetricExporter):
    """Appends each metric export as one line to ``metrics-<group>-<rank>-<pid>.jsonl``."""

    def __init__(
        self, trace_dir: str, run_id: str, attributes: dict[str, Any], role: str = "worker", **kwargs: Any
    ) -> None:
        MetricExporter.__init__(self, **kwargs)
        StoreWriter.__init__(self, trace_dir, run_id, "metrics", attributes, role)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            record = {"time_ns": time.time_ns(), "metrics": json.loads(metrics_data.to_json(indent=None))}
        except (ValueError, TypeError) as exc:
            internal_error(exc, "metric-encode")
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS if self.write([json_line(record)]) else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._file.close()
