"""The span pipeline: a bounded queue, one export thread, retries, and honest counters.

Why not the SDK's ``BatchSpanProcessor``: its 2,048-span queue drops most of a burst,
``force_flush(timeout)`` ignores its timeout, and it reports success after drops and
failed exports. This processor:

* queues ended spans up to ``max_queue_spans`` spans *and* ``max_queue_bytes``
  (estimated) bytes, the memory bound whatever the span sizes; past either, new spans
  are dropped, counted and warned about once;
* exports in batches of ``max_batch`` from one daemon thread, waking when a batch is
  full, every ``delay_s``, or on flush; every span is scrubbed there (secrets redacted,
  strings repaired, whoever set them: :mod:`lens_rl.export.scrub`) before it leaves the process;
* retries what can succeed at the head of the line, splits what was too large, drops what
  was rejected for good (the policy: :mod:`lens_rl.export.retry`), so one poison batch never
  blocks the rest;
* answers :meth:`flush` within its deadline, True only when every span accepted so
  far was exported, none dropped and none failed; spans still queued when it closes
  are counted as lost and warned about once;
* takes only a re-entrant lock on the ending thread, so a signal handler that flushes
  while that thread is inside :meth:`on_end` cannot deadlock;
* in a forked child drops what the parent had queued (never exported twice).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from threading import current_thread
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from lens_rl._errors import internal_error, warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.export.bounded import run_bounded
from lens_rl.export.fastspan import remember
from lens_rl.export.retry import UNSENT, Outage, backoff, verdict
from lens_rl.export.scrub import scrub, span_bytes

_log = logging.getLogger("lens_rl")

_PIPELINES: weakref.WeakSet[SpanPipeline] = weakref.WeakSet()


def _forget_pipelines_after_fork(after_fork: bool) -> None:
    if after_fork:
        for pipeline in list(_PIPELINES):
            pipeline._forget_after_fork()


RUNTIME.reset_hooks.append(_forget_pipelines_after_fork)


class SpanPipeline(SpanProcessor):
    """A bounded, retrying, counting batch span processor (see the module docstring)."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_spans: int = 32768,
        max_queue_bytes: int = 64 * 1024 * 1024,
        max_batch: int = 1024,
        delay_s: float = 0.5,
        retry_for_s: float = 300.0,
    ) -> None:
        self.exporter = exporter
        self.max_queue_spans = max_queue_spans
        self.max_queue_bytes = max_queue_bytes
        self._max_batch = max_batch
        self._delay_s = delay_s
        self._retry_for_s = retry_for_s
        self._lock = threading.RLock()  # re-entrant: a signal handler may flush inside on_end
        self._progress = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._queue: deque[tuple[ReadableSpan, int]] = deque()
        self._queued_bytes = 0
        self._sizes: dict[Any, int] = {}  # a phase span's shape -> its estimated size
        self._inflight = 0
        self._thread: threading.Thread | None = None
        self._ended = False  # the export thread has returned
        self._closed = False
        self._warned_drop = False
        #: spans accepted into the queue / exported / dropped at the door / lost to failed exports
        self.accepted = 0
        self.exported = 0
        self.dropped = 0
        self.failed = 0
        #: spans still queued or in flight when the pipeline closed (counted in ``failed`` too)
        self.lost_at_close = 0
        #: spans taken from the queue for export and not yet settled (exported or failed)
        self.in_flight = 0
        #: whether those spans are being retried (an export of theirs failed and may yet succeed)
        self._retrying = False
        self.last_error: str | None = None
        self.outage = Outage("span", exporter)
        self.target = self.outage.target
        _PIPELINES.add(self)

    # ------------------------------------------------------------ SpanProcessor

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        # The ending thread (the starting one for with-blocks and calls): the file store
        # records it so Perfetto can draw one track per thread.
        thread = current_thread()
        span._lens_thread = thread.ident  # type: ignore[attr-defined]
        span._lens_thread_name = thread.name  # type: ignore[attr-defined]
        shape = getattr(span, "shape", None)  # a phase span still as its shape made it: sized once per shape
        size = self._sizes.get(shape) if shape is not None else None
        if size is None:
            size = span_bytes(span) if shape is None else remember(self._sizes, shape, span_bytes(span))
        with self._lock:
            if (
                self._closed
                or len(self._queue) >= self.max_queue_spans
                or self._queued_bytes + size > self.max_queue_bytes
            ):
                self.dropped += 1
                warn = not self._warned_drop
                self._warned_drop = True
                queued = 0
            else:
                self._queue.append((span, size))
                self._queued_bytes += size
                self.accepted += 1
                warn = False
                queued = len(self._queue)
        if warn:
            _log.warning(
                "lens_rl: span queue full (%d spans / %d bytes at most) or closed; dropping spans and counting "
                "them (lens_rl.spans.dropped). Raise telemetry.max_queue_spans / max_queue_bytes or check the "
                "collector.",
                self.max_queue_spans,
                self.max_queue_bytes,
            )
        if self._thread is None:
            self._start()
        if queued >= self._max_batch and not self._wake.is_set():  # once per drain, not once per span
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
        target = self.accepted  # an int read: no lock needed
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
        """Flush within ``timeout_s``, then stop the thread and the exporter. Idempotent.

        Spans still queued or in flight then are counted as lost (``failed``), with one warning.
        """
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._lock:
            already = self._closed
            self._closed = True
        if already:
            return self.settled_ok()
        ok = self.flush(max(deadline - time.monotonic(), 0.0))
        self._stop.set()
        self._wake.set()
        with self._progress:
            lost = self.accepted - self.exported - self.failed
            if lost > 0:
                self.lost_at_close = lost
                self.failed += lost
                self.in_flight, self._retrying = 0, False
                self._queue.clear()
                self._queued_bytes = 0
                self._progress.notify_all()
        if lost > 0:
            warn_once(
                f"lost-at-close-{id(self)}",
                "lens_rl: %d spans were still queued for %s when telemetry shut down and are lost "
                "(counted in lens_rl.spans.dropped); give shutdown a larger budget or check the collector",
                lost,
                self.target,
            )
        run_bounded(self.exporter.shutdown, max(deadline - time.monotonic(), 0.0))
        with self._lock:  # an export still in flight ends quietly: its loss was counted and said above
            if self._thread is not None and not self._ended:
                self.outage.mute()
            else:
                self.outage.close()
        return ok and lost <= 0

    def settled_ok(self) -> bool:
        """True when every accepted span was exported and nothing was dropped or failed."""
        return self.exported == self.accepted and self.dropped == 0 and self.failed == 0

    @property
    def retrying(self) -> int:
        """Spans of a batch being retried (its export failed and may yet succeed), 0 when none is: with
        ``queued``, ``exporting``, ``exported`` and ``failed`` they account for every span ``accepted``."""
        return self.in_flight if self._retrying else 0

    @property
    def exporting(self) -> int:
        """Spans taken from the queue and on their first try at export (not retried yet)."""
        return 0 if self._retrying else self.in_flight

    @property
    def queued(self) -> int:
        """Spans waiting in the queue (not counting a batch being exported)."""
        return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        """The estimated bytes the queue holds."""
        return self._queued_bytes

    # ------------------------------------------------------------ export thread

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="lens_rl-span-export", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._drain()
        finally:
            with self._lock:
                self._ended = True
                self.outage.close()

    def _drain(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._delay_s)
            self._wake.clear()
            while not self._stop.is_set():
                with self._lock:
                    if not self._queue:
                        break
                    count = min(len(self._queue), self._max_batch)
                    items = [self._queue.popleft() for _ in range(count)]
                    self._queued_bytes -= sum(size for _, size in items)
                    self.in_flight += count
                batch = [span for span, _ in items]
                try:  # whoever set them (a user on the current span, a library): nothing secret leaves
                    batch = [scrub(s) for s in batch]
                except Exception as exc:
                    internal_error(exc, "scrub")
                self._export(batch)

    def _settle(self, exported: int = 0, failed: int = 0) -> None:
        with self._progress:
            # never past what was accepted: spans already counted lost at close stay counted once
            room = self.accepted - self.exported - self.failed
            exported = min(exported, room)
            failed = min(failed, room - exported)
            self.exported += exported
            self.failed += failed
            self.in_flight = max(self.in_flight - exported - failed, 0)
            if not self.in_flight:
                self._retrying = False
            self._progress.notify_all()

    def _send(self, batch: list[ReadableSpan]) -> tuple[bool, Any, str | None]:
        """One export attempt: (ok, the HTTP status or UNSENT or None, error text). An exporter that tells
        the status (lens_rl's OTLP/HTTP one) answers it with the result; for any other, None. A failed
        export that saved a first part all the same (the file store's ``last_saved``: a full disk) counts
        that part exported and removes it from ``batch``."""
        exporter = self.exporter
        with_status = getattr(exporter, "export_with_status", None)
        status: Any = None
        try:
            if with_status is not None:
                ok, status = with_status(batch)
            else:
                ok = exporter.export(batch) is SpanExportResult.SUCCESS
            error = None if ok else "exporter returned FAILURE"
        except OSError as exc:  # the collector unreachable, raised (older exporters do): a failed export
            ok, error = False, f"{type(exc).__name__} raised"
        except Exception as exc:  # an exporter bug must not kill the thread
            if not self._stop.is_set():  # (after a bounded close gave up, a closed exporter may raise: no bug)
                internal_error(exc, "span-export")
            ok, error = False, f"{type(exc).__name__}: {exc}"
        saved = getattr(exporter, "last_saved", 0) if not ok else 0
        if isinstance(saved, int) and 0 < saved < len(batch):  # the file store's full disk kept a first part
            self._settle(exported=saved)
            del batch[:saved]  # only the rest is retried or counted lost
        if not ok and isinstance(status, int):
            error = f"HTTP {status}"
        elif not ok and status == UNSENT:
            error = "the batch could not be encoded or is too large to send"
        return ok, status, error

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        pending = [list(batch)]
        while pending:
            part = pending.pop()
            ok, status, error = self._send(part)
            if self._stop.is_set():  # past close's budget: close counted and said what is left
                self._settle(exported=len(part) if ok else 0)
                return
            if ok:
                # Say the collector is back before a waiting flush can report success.
                self.outage.recovered()
                self._settle(exported=len(part))
                continue
            self.last_error = error
            what = verdict(status, len(part))
            if what == "split":
                half = len(part) // 2
                pending.extend([part[half:], part[:half]])  # resent in order, halves at a time
            elif what == "drop":
                self._give_up(part, error, "rejected for good")
            elif not self._retry(part, error):
                return

    def _retry(self, part: list[ReadableSpan], error: str | None) -> bool:
        """Retry ``part`` until it goes through, the window ends or the pipeline stops. False: stopped."""
        first_failure = time.monotonic()
        waits = backoff()
        while True:
            self.outage.failed(
                error, f"; retrying for up to {self._retry_for_s:.0f} s with up to {self.max_queue_spans} spans queued"
            )
            self._retrying = True
            if time.monotonic() - first_failure >= self._retry_for_s:
                self._give_up(part, error, "gave up after retrying")
                self._retrying = False
                self.outage.close()
                return True
            if self._stop.wait(next(waits)):
                return False  # stopping: close counted what is left as lost and said so
            ok, status, error = self._send(part)
            if self._stop.is_set():
                self._settle(exported=len(part) if ok else 0)
                return False
            if ok:
                self.outage.recovered()
                self._settle(exported=len(part))
                self._retrying = False  # (the batch's other parts, if it was split, on their first try)
                return True
            self.last_error = error
            if verdict(status, 1) != "retry":  # (a part being retried is not split again)
                self._give_up(part, error, "rejected for good")
                self._retrying = False
                return True

    def _give_up(self, part: Sequence[ReadableSpan], error: str | None, why: str) -> None:
        self._settle(failed=len(part))
        warn_once(
            f"gave-up-{id(self)}-{why}",
            "lens_rl: %s: %d spans to %s (%s); counted in lens_rl.spans.dropped, later spans still go out",
            why,
            len(part),
            self.target,
            error,
        )

    def _forget_after_fork(self) -> None:
        # The parent exports what it queued; the child must neither send it again nor
        # touch a lock another parent thread may have held at fork time.
        self._lock = threading.RLock()
        self._progress = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._queue = deque()
        self._queued_bytes = 0
        self._thread = None
        self._closed = True
        self._warned_drop = True
        self.accepted = self.exported = self.dropped = self.failed = self.in_flight = 0
        self._retrying = False
