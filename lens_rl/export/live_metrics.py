"""Live goodput metrics: per-bucket exclusive seconds, phase counts and durations, recorded off the hot path.

Example::

    metrics = PhaseMetrics(handle.meter)
    metrics.record("generation", "productive", duration_s=1.2, exclusive_s=1.1)   # a tuple appended
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from lens_rl._errors import internal_error
from lens_rl.export._sdk import metric_preferences
from lens_rl.export.retry import Outage

__all__ = [
    "BUCKET_SECONDS",
    "PhaseStats",
    "DURATION_BOUNDS_S",
    "PHASE_COUNT",
    "PHASE_DURATION",
    "SPANS_DROPPED",
    "PhaseMetrics",
    "TrackingMetricExporter",
]

#: Phase-duration histogram boundaries, seconds: 1 ms to 4 h (the SDK's defaults stop at 10 s).
DURATION_BOUNDS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
)  # fmt: skip

BUCKET_SECONDS = "rl.goodput.bucket_seconds"
PHASE_DURATION = "rl.phase.duration"
PHASE_COUNT = "rl.phase.count"
SPANS_DROPPED = "lens_rl.spans.dropped"


class TrackingMetricExporter(MetricExporter):
    """Passes exports through and remembers whether the latest one succeeded."""

    def __init__(self, inner: MetricExporter) -> None:
        super().__init__(**metric_preferences(inner))
        self.inner = inner
        self.exports = 0
        self.failures = 0
        self.last_ok = True
        #: set when :meth:`shutdown` begins
        self.closed = False
        #: Metric export errors are muted during an outage, like span export errors.
        self.outage = Outage("metric", inner)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        why = "exporter returned FAILURE"
        try:
            ok = self.inner.export(metrics_data, timeout_millis=timeout_millis) is MetricExportResult.SUCCESS
        except OSError as exc:  # the collector unreachable, raised (OpenTelemetry < 1.35's HTTP exporter does)
            why, ok = f"{type(exc).__name__} raised", False
        except Exception as exc:  # an exporter bug: counted as a failed export, never raised
            if not self.closed:  # (a last export racing the exporter's own shutdown may raise: no bug)
                internal_error(exc, "metric-export")
            ok = False
        self.exports += 1
        self.failures += 0 if ok else 1
        self.last_ok = ok
        if ok:
            self.outage.recovered()
        else:
            self.outage.failed(why, "; metrics are sent again at the next interval")
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.closed = True
        self.outage.close()
        self.inner.shutdown(timeout_millis=timeout_millis)


class PhaseStats:
    """Per phase name, this process's completed runs: count, longest and p95 (of the last
    :data:`WINDOW` durations), for at most :data:`MAX_NAMES` names. What the hang watchdog learns its
    timeouts from and a heartbeat reports; updated when phase metrics drain (off the hot path)."""

    WINDOW = 256
    MAX_NAMES = 512

    def __init__(self) -> None:
        self._names: dict[str, list[Any]] = {}  # name -> [count, longest s, recent durations]
        self._lock = threading.Lock()
        #: names refused past MAX_NAMES
        self.overflow = 0

    def add(self, name: str, durations: list[float]) -> None:
        with self._lock:
            entry = self._names.get(name)
            if entry is None:
                if len(self._names) >= self.MAX_NAMES:
                    self.overflow += 1
                    return
                entry = self._names[name] = [0, 0.0, deque(maxlen=self.WINDOW)]
            entry[0] += len(durations)
            entry[1] = max(entry[1], max(durations))
            entry[2].extend(durations)

    def longest(self, name: str) -> float | None:
        """The longest completed run of ``name`` in this process (s), None when it never completed."""
        entry = self._names.get(name)
        return None if entry is None else entry[1]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """name -> {"count", "max_s", "p95_s"} (nearest rank over the recent window)."""
        with self._lock:
            out = {}
            for name, (count, longest, recent) in self._names.items():
                ordered = sorted(recent)
                p95 = ordered[max(-(-len(ordered) * 95 // 100) - 1, 0)] if ordered else None
                out[name] = {
                    "count": count,
                    "max_s": round(longest, 6),
                    "p95_s": None if p95 is None else round(p95, 6),
                }
            return out


class PhaseMetrics:
    """Live goodput: per-bucket exclusive seconds, phase counts and phase durations.

    The OpenTelemetry SDK spends ~8 µs per ``counter.add`` or ``histogram.record`` call
    (measured on the CI machines), so none of that sits on a phase's exit: the hot
    path appends a tuple, and a daemon thread drains once a second (and before every
    flush), aggregating per (phase, bucket) first. ``rl.goodput.bucket_seconds`` and
    ``rl.phase.count`` are exact; ``rl.phase.duration`` records at most
    ``HISTOGRAM_SAMPLES_PER_DRAIN`` durations per phase and bucket per drain (a phase
    that ends more often than that each second is sampled in the histogram only).
    """

    MAX_PENDING = 100_000
    HISTOGRAM_SAMPLES_PER_DRAIN = 256

    def __init__(self, meter: metrics_api.Meter | None, dropped: Any = None) -> None:
        self._pending: deque[tuple[str, str | None, float | None, float | None]] = deque()
        #: records refused at a full pending queue (a drain thread that could not keep up): in ``stats()``
        self.overflow = 0
        #: per name, the completed runs' count, longest and p95 (kept with metrics off too: the watchdog's)
        self.stats = PhaseStats()
        self._lock = threading.RLock()  # re-entrant: a signal handler may flush inside drain()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._instruments = meter is not None
        if meter is None:  # metrics off: only the stats
            return
        self._bucket_seconds = meter.create_counter(
            BUCKET_SECONDS, unit="s", description="Exclusive seconds spent in phases, by goodput bucket"
        )
        self._count = meter.create_counter(PHASE_COUNT, unit="{phase}", description="Phases ended")
        self._duration = meter.create_histogram(
            PHASE_DURATION,
            unit="s",
            description="Phase durations (inclusive)",
            explicit_bucket_boundaries_advisory=list(DURATION_BOUNDS_S),
        )
        if dropped is not None:
            meter.create_observable_counter(
                SPANS_DROPPED,
                callbacks=[lambda _options: [metrics_api.Observation(dropped())]],
                unit="{span}",
                description="Spans lens_rl dropped (queue full or export failed for good)",
            )

    def record(self, name: str, bucket: str | None, duration_s: float, exclusive_s: float | None) -> None:
        """A phase ended; ``exclusive_s`` None: its bucket seconds come later (:meth:`record_seconds`, when its
        step ends and its seconds over the step's wall are known)."""
        if len(self._pending) >= self.MAX_PENDING:
            self.overflow += 1
            return
        self._pending.append((name, bucket, duration_s, exclusive_s))
        if self._thread is None:
            self._start()

    def record_seconds(self, name: str, bucket: str, seconds: float) -> None:
        """Bucket seconds of a phase already counted by :meth:`record` (a step's phase, once its step ended)."""
        self.record(name, bucket, None, seconds)  # type: ignore[arg-type]

    def drain(self) -> None:
        with self._lock:
            groups: dict[tuple[str, str | None], list[Any]] = {}
            pending = self._pending
            while pending:
                name, bucket, duration_s, exclusive_s = pending.popleft()
                group = groups.get((name, bucket))
                if group is None:
                    group = groups[(name, bucket)] = [0.0, []]
                if exclusive_s is not None:
                    group[0] += exclusive_s
                if duration_s is not None:
                    group[1].append(duration_s)
            for (name, bucket), (exclusive_s, durations) in groups.items():
                if durations:
                    self.stats.add(name, durations)
                if not self._instruments:
                    continue
                attrs = {"rl.phase": name, "rl.bucket": bucket or "none"}
                if bucket is not None:
                    self._bucket_seconds.add(max(exclusive_s, 0.0), attrs)
                if not durations:
                    continue
                self._count.add(len(durations), attrs)
                for duration_s in durations[: self.HISTOGRAM_SAMPLES_PER_DRAIN]:
                    self._duration.record(duration_s, attrs)

    def stop(self) -> None:
        self._stop.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="lens_rl-phase-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.drain()
            except Exception as exc:
                internal_error(exc, "phase-metrics")
