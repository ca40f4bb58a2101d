"""The span pipeline: a bounded queue, one export thread, retries, and honest counters.

Why not the SDK's ``BatchSpanProcessor``: its 2,048-span queue drops most of a burst,
``force_flush(timeout)`` ignores its timeout, and it reports success after drops and
failed exports. This processor:

* queues up to ``max_queue_spans`` ended spans (the memory bound; past it new spans
  are dropped, counted and warned about once);
* exports in batches of ``max_batch`` from one daemon thread, waking when a batch is
  full, every ``delay_s``, or on flush;
* keeps a failed batch at the head of the line and retries it with capped backoff for
  up to ``retry_for_s`` (a collector outage shorter than that loses nothing), then
  counts it as failed;
* answers :meth:`flush` within its deadline, True only when every span accepted so
  far was exported, none dropped and none failed;
* in a forked child drops what the parent had queued (never exported twice).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from threading import get_ident
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from lens_rl._errors import internal_error

_log = logging.getLogger("lens_rl")

_PIPELINES: weakref.WeakSet[SpanPipeline] = weakref.WeakSet()
_FORK_HOOK_SET = False


class _OutageFilter(logging.Filter):
    """Drops an exporter's repeated error logs while its pipeline is already retrying.

    The first failure's messages pass (they name the cause); lens_rl then says once that
    it is retrying and, later, that the collector is back.
    """

    def __init__(self) -> None:
        super().__init__()
        self.quiet = 0  # pipelines currently in an outage

    def filter(self, record: logging.LogRecord) -> bool:
        return self.quiet == 0 or record.levelno > logging.ERROR


_FILTERS: dict[str, _OutageFilter] = {}


def _outage_filter(exporter: object) -> _OutageFilter:
    name = type(exporter).__module__
    filt = _FILTERS.get(name)
    if filt is None:
        filt = _FILTERS[name] = _OutageFilter()
        logging.getLogger(name).addFilter(filt)
    return filt


def _after_fork_in_child() -> None:
    for pipeline in list(_PIPELINES):
        pipeline._forget_after_fork()


class SpanPipeline(SpanProcessor):
    """A bounded, retrying, counting batch span processor (see the module docstring)."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_spans: int = 32768,
        max_batch: int = 1024,
        delay_s: float = 0.5,
        retry_for_s: float = 300.0,
    ) -> None:
        global _FORK_HOOK_SET
        self.exporter = exporter
        self.max_queue_spans = max_queue_spans
        self._max_batch = max_batch
        self._delay_s = delay_s
        self._retry_for_s = retry_for_s
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._queue: deque[ReadableSpan] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._warned_drop = False
        self._warned_fail = False
        #: spans accepted into the queue / exported / dropped at the door / lost to failed exports
        self.accepted = 0
        self.exported = 0
        self.dropped = 0
        self.failed = 0
        self.retrying = False
        self.last_error: str | None = None
        self._outage_since: float | None = None
        self._filter = _outage_filter(exporter)
        #: Where spans go, for log lines (a URL's credentials masked).
        self.target = _target(exporter)
        _PIPELINES.add(self)
        if not _FORK_HOOK_SET and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _FORK_HOOK_SET = True

    # ------------------------------------------------------------ SpanProcessor

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        # The ending thread (the starting one for with-blocks and calls): the file store
        # records it so Perfetto can draw one track per thread.
        span._lens_thread = get_ident()  # type: ignore[attr-defined]
        with self._lock:
            if self._closed or len(self._queue) >= self.max_queue_spans:
                self.dropped += 1
                warn = not self._warned_drop
                self._warned_drop = True
                size = 0
            else:
                self._queue.append(span)
                self.accepted += 1
                warn = False
                size = len(self._queue)
        if warn:
            _log.warning(
                "lens_rl: span queue full (%d spans) or closed; dropping spans and counting them "
                "(lens_rl.spans.dropped). Raise telemetry.max_queue_spans or check the collector.",
                self.max_queue_spans,
            )
        if self._thread is None:
            self._start()
        if size >= self._max_batch:
            self._wake.set()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.flush(timeout_millis / 1000.0)

    def shutdown(self) -> None:
        self.close(5.0)

    # ------------------------------------------------------------ bounded API

    def flush(self, timeout_s: float) -> bool:
        """Wait until every span accepted so far is settled, at most ``timeout_s``.

        True only when all of them were exported and nothing was ever dropped or failed.
        """
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._lock:
            target = self.accepted
        if self._thread is None and target > self.exported:
            self._start()
        self._wake.set()
        with self._progress:
            while self.exported + self.failed < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.05))
            return self.failed == 0 and self.dropped == 0

    def close(self, timeout_s: float) -> bool:
        """Flush within ``timeout_s``, then stop the thread and the exporter. Idempotent."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._lock:
            already = self._closed
            self._closed = True
        if already:
            return self.settled_ok()
        ok = self.flush(max(deadline - time.monotonic(), 0.0))
        self._stop.set()
        self._wake.set()
        _call_bounded(self.exporter.shutdown, max(deadline - time.monotonic(), 0.0))
        return ok

    def settled_ok(self) -> bool:
        """True when every accepted span was exported and nothing was dropped or failed."""
        return self.exported == self.accepted and self.dropped == 0 and self.failed == 0

    @property
    def queued(self) -> int:
        """Spans waiting in the queue (not counting a batch being exported)."""
        return len(self._queue)

    # ------------------------------------------------------------ export thread

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="lens_rl-span-export", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._delay_s)
            self._wake.clear()
            while not self._stop.is_set():
                with self._lock:
                    if not self._queue:
                        break
                    count = min(len(self._queue), self._max_batch)
                    batch = [self._queue.popleft() for _ in range(count)]
                self._export(batch)

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        first_failure: float | None = None
        backoff_s = 0.25
        while True:
            try:
                ok = self.exporter.export(batch) is SpanExportResult.SUCCESS
                error = None if ok else "exporter returned FAILURE"
            except Exception as exc:  # an exporter bug must not kill the thread
                internal_error(exc, "span-export")
                ok, error = False, f"{type(exc).__name__}: {exc}"
            now = time.monotonic()
            if ok:
                # Say the collector is back before a waiting flush can report success.
                self._end_outage(now)
                with self._progress:
                    self.exported += len(batch)
                    self.retrying = False
                    self._progress.notify_all()
                return
            self.last_error = error
            first_failure = now if first_failure is None else first_failure
            self._start_outage(now, error)
            if self._stop.is_set() or now - first_failure >= self._retry_for_s:
                with self._progress:
                    self.failed += len(batch)
                    self.retrying = False
                    self._progress.notify_all()
                if not self._warned_fail:
                    self._warned_fail = True
                    _log.warning("lens_rl: gave up exporting %d spans to %s: %s", len(batch), self.target, error)
                if self._outage_since is not None:
                    self._outage_since = None
                    self._filter.quiet = max(self._filter.quiet - 1, 0)
                return
            self.retrying = True
            if self._stop.wait(backoff_s):
                continue  # one last attempt, then counted as failed above
            backoff_s = min(backoff_s * 2, 5.0)

    def _start_outage(self, now: float, error: str | None) -> None:
        if self._outage_since is None:
            self._outage_since = now
            self._filter.quiet += 1
            _log.warning(
                "lens_rl: span export to %s failing (%s); retrying for up to %.0f s with up to %d spans queued; "
                "the exporter's repeated errors are muted until it recovers",
                self.target, error, self._retry_for_s, self.max_queue_spans,
            )  # fmt: skip

    def _end_outage(self, now: float) -> None:
        if self._outage_since is not None:
            _log.warning("lens_rl: span export to %s recovered after %.1f s", self.target, now - self._outage_since)
            self._outage_since = None
            self._filter.quiet = max(self._filter.quiet - 1, 0)

    def _forget_after_fork(self) -> None:
        # The parent exports what it queued; the child must neither send it again nor
        # touch a lock another parent thread may have held at fork time.
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._queue = deque()
        self._thread = None
        self._closed = True
        self._warned_drop = True
        self.accepted = self.exported = self.dropped = self.failed = 0


def _target(exporter: object) -> str:
    """A short description of where ``exporter`` sends spans: its endpoint or file, credentials masked."""
    from lens_rl._attributes import clean_text

    where = getattr(exporter, "_endpoint", None) or getattr(exporter, "path", None)
    return clean_text(where) if where else type(exporter).__name__


def _call_bounded(fn: Any, timeout_s: float) -> bool:
    """Run ``fn()`` on a daemon thread; True when it returned within ``timeout_s``."""
    done = threading.Event()

    def target() -> None:
        try:
            fn()
        except Exception as exc:
            internal_error(exc, "bounded-call")
        finally:
            done.set()

    threading.Thread(target=target, name="lens_rl-bounded", daemon=True).start()
    return done.wait(max(timeout_s, 0.0))
