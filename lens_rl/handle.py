"""`TelemetryHandle`: one process's providers, resource and bounded flush / shutdown.

The handle owns its providers; it never relies on OpenTelemetry's set-once globals
for correctness (lens_rl registers live proxies as the globals once, which forward to
whichever handle is current: :mod:`lens_rl._globals`). Every blocking call is bounded by one
deadline spent across its stages: spans, then metrics.

Example::

    handle = lens_rl.get_telemetry_handle()
    if handle is not None:
        ok = handle.force_flush(timeout_ms=2000)   # True: everything exported
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, Sampler, SamplingResult

from lens_rl import __version__, exporters
from lens_rl._bounded import run_bounded
from lens_rl._errors import internal_error
from lens_rl._fastspan import FastSpanFactory
from lens_rl._pipeline import Outage, SpanPipeline
from lens_rl.config import TelemetryConfig

_log = logging.getLogger("lens_rl")

#: Phase-duration histogram boundaries, seconds: 1 ms to 4 h (the SDK's defaults stop at 10 s).
DURATION_BOUNDS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
)  # fmt: skip

BUCKET_SECONDS = "rl.goodput.bucket_seconds"
PHASE_DURATION = "rl.phase.duration"
PHASE_COUNT = "rl.phase.count"
SPANS_DROPPED = "lens_rl.spans.dropped"


class _OncePerMessage(logging.Filter):
    """Lets the first record of each message template through, then drops repeats (SDK limit warnings
    would otherwise log once per dropped attribute: 9,900 lines for 10,000 attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_SDK_LIMIT_LOGGERS = ("opentelemetry.attributes", "opentelemetry.sdk.trace")
_ONCE = _OncePerMessage()
for _name in _SDK_LIMIT_LOGGERS:
    logging.getLogger(_name).addFilter(_ONCE)


class PhaseSampler(Sampler):
    """Samples each top-level phase with probability ``rate``; children follow their parent.

    A ratio on the trace id would sample a whole job (one trace) or none of it.
    """

    def __init__(self, rate: float, root_span_id: Any = None) -> None:
        self._rate = rate
        #: () -> the job root's span id (or None): a child of the root is a top-level phase.
        self._root_span_id = root_span_id or (lambda: None)

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                      attributes: Any = None, links: Any = None, trace_state: Any = None) -> SamplingResult:  # fmt: skip
        parent = trace_api.get_current_span(parent_context).get_span_context()
        root_id = self._root_span_id()
        if name == "rl.job" or (parent.is_valid and not (root_id is not None and parent.span_id == root_id)):
            if name == "rl.job" or parent.trace_flags.sampled:
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
            return SamplingResult(Decision.DROP)
        if random.random() < self._rate:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return f"lens_rl.PhaseSampler{{{self._rate}}}"


class _TrackingMetricExporter(MetricExporter):
    """Passes exports through and remembers whether the latest one succeeded."""

    def __init__(self, inner: MetricExporter) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner = inner
        self.exports = 0
        self.failures = 0
        self.last_ok = True
        #: Metric export errors are muted during an outage, like span export errors.
        self.outage = Outage("metric", inner)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            ok = self.inner.export(metrics_data, timeout_millis=timeout_millis) is MetricExportResult.SUCCESS
        except Exception as exc:  # an exporter bug: counted as a failed export, never raised
            internal_error(exc, "metric-export")
            ok = False
        self.exports += 1
        self.failures += 0 if ok else 1
        self.last_ok = ok
        if ok:
            self.outage.recovered()
        else:
            self.outage.failed("exporter returned FAILURE", "; metrics are sent again at the next interval")
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.outage.close()
        self.inner.shutdown(timeout_millis=timeout_millis)


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

    def __init__(self, meter: metrics_api.Meter, dropped: Any = None) -> None:
        self._pending: deque[tuple[str, str | None, float, float]] = deque()
        self.overflow = 0
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
        self._lock = threading.RLock()  # re-entrant: a signal handler may flush inside drain()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def record(self, name: str, bucket: str | None, duration_s: float, exclusive_s: float) -> None:
        if len(self._pending) >= self.MAX_PENDING:
            self.overflow += 1
            return
        self._pending.append((name, bucket, duration_s, exclusive_s))
        if self._thread is None:
            self._start()

    def drain(self) -> None:
        with self._lock:
            groups: dict[tuple[str, str | None], list[Any]] = {}
            pending = self._pending
            while pending:
                name, bucket, duration_s, exclusive_s = pending.popleft()
                group = groups.get((name, bucket))
                if group is None:
                    group = groups[(name, bucket)] = [0.0, []]
                group[0] += exclusive_s
                group[1].append(duration_s)
            for (name, bucket), (exclusive_s, durations) in groups.items():
                attrs = {"rl.phase": name, "rl.bucket": bucket or "none"}
                if bucket is not None:
                    self._bucket_seconds.add(max(exclusive_s, 0.0), attrs)
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


class TelemetryHandle:
    """One process's telemetry: ``.tracer``, ``.meter``, ``.resource``, ``.is_exporting``.

    ``force_flush`` and ``shutdown`` are bounded by ``timeout_ms`` whatever the
    collector does, and return True only when everything recorded so far was exported.
    """

    def __init__(
        self, config: TelemetryConfig, attributes: Mapping[str, Any], *, metric_readers: Sequence[Any] = ()
    ) -> None:
        self.config = config
        #: ``driver``, ``worker``, or ``lazy`` (made by a first phase; an explicit init replaces it)
        self.role = "worker"
        #: The job root's span id (set by lifecycle): the sampler treats its children as top-level phases.
        self.root_span_id: int | None = None
        attributes = dict(attributes)
        if config.sample_rate < 1.0:  # so the offline table can say the run was sampled
            attributes.setdefault("rl.sample_rate", config.sample_rate)
        self.resource = Resource.create(attributes)
        self.span_pipeline: SpanPipeline | None = None
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        self._metric_exporter: _TrackingMetricExporter | None = None
        self._metric_reader: PeriodicExportingMetricReader | None = None
        self._closed = False
        self._shutdown_result: bool | None = None
        exporting = False

        if config.traces_enabled:
            sampler = (
                ALWAYS_ON if config.sample_rate >= 1.0 else PhaseSampler(config.sample_rate, lambda: self.root_span_id)
            )
            self.tracer_provider = TracerProvider(resource=self.resource, sampler=sampler, shutdown_on_exit=False)
            span_exporter = exporters.span_exporter(config, self.resource)
            if span_exporter is not None:
                self.span_pipeline = SpanPipeline(
                    span_exporter, max_queue_spans=config.max_queue_spans, max_queue_bytes=config.max_queue_bytes
                )
                self.tracer_provider.add_span_processor(self.span_pipeline)
                exporting = True
            self.tracer: trace_api.Tracer = self.tracer_provider.get_tracer("lens_rl", __version__)
            #: Starts phase spans without the SDK's per-span cost (same processors, limits, sampling rule).
            self.fast: FastSpanFactory | None = FastSpanFactory(
                self.tracer_provider, self.resource, __version__, config.sample_rate, lambda: self.root_span_id
            )
        else:
            self.tracer = trace_api.NoOpTracer()
            self.fast = None

        if config.metrics_enabled:
            readers = list(metric_readers)
            metric_exporter = exporters.metric_exporter(config, self.resource)
            if metric_exporter is not None:
                self._metric_exporter = _TrackingMetricExporter(metric_exporter)
                self._metric_reader = PeriodicExportingMetricReader(
                    self._metric_exporter,
                    export_interval_millis=config.metrics_interval_ms,
                    export_timeout_millis=config.export_timeout_ms,
                )
                readers.append(self._metric_reader)
                exporting = True
            self.meter_provider = MeterProvider(resource=self.resource, metric_readers=readers, shutdown_on_exit=False)
            self.meter: metrics_api.Meter = self.meter_provider.get_meter("lens_rl", __version__)
        else:
            self.meter = metrics_api.NoOpMeter("lens_rl")
        self.is_exporting = exporting
        self.phase_metrics = PhaseMetrics(self.meter, dropped=self.spans_dropped) if config.metrics_enabled else None

    def set_root(self, span_id: int) -> None:
        """The job root's span id: its children are top-level phases (sampling), and the file store's header
        names it (a reader then knows that parent is the job, not a span a killed process never wrote)."""
        self.root_span_id = span_id
        exporter: Any = self.span_pipeline.exporter if self.span_pipeline is not None else None
        if hasattr(exporter, "set_root"):
            exporter.set_root(span_id)

    # ------------------------------------------------------------------ figures

    def spans_dropped(self) -> int:
        """Spans lost so far: refused at a full queue plus those whose export failed for good."""
        pipeline = self.span_pipeline
        return 0 if pipeline is None else pipeline.dropped + pipeline.failed

    def stats(self) -> dict[str, Any]:
        """Counters for humans and tests: spans accepted, exported, dropped, failed, queued."""
        p = self.span_pipeline
        out: dict[str, Any] = {"exporter": self.config.exporter}
        if p is not None:
            out.update(accepted=p.accepted, exported=p.exported, dropped=p.dropped, failed=p.failed,
                       queued=p.queued, queued_bytes=p.queued_bytes, lost_at_shutdown=p.lost_at_close,
                       retrying=p.retrying, last_error=p.last_error)  # fmt: skip
        if self._metric_exporter is not None:
            out.update(metric_exports=self._metric_exporter.exports, metric_failures=self._metric_exporter.failures)
        return out

    # ------------------------------------------------------------------ bounded

    def force_flush(self, timeout_ms: int = 5000) -> bool:
        """Export everything recorded so far, within ``timeout_ms``. True only if all of it got out."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        return self._flush_until(deadline)

    def _flush_until(self, deadline: float) -> bool:
        ok = True
        if self.phase_metrics is not None:
            self.phase_metrics.drain()
        if self.span_pipeline is not None:
            ok = self.span_pipeline.flush(deadline - time.monotonic()) and ok
        if self._metric_reader is not None and self._metric_exporter is not None:
            exporter = self._metric_exporter
            before = exporter.exports
            remaining_s = deadline - time.monotonic()
            flushed = remaining_s > 0 and run_bounded(
                lambda: self._metric_reader.force_flush(timeout_millis=max(remaining_s, 0.001) * 1000),  # type: ignore[union-attr]
                remaining_s,
            )[0]
            ok = ok and flushed and exporter.exports > before and exporter.last_ok
        return ok

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Flush, then shut the providers down, all within ``timeout_ms``. Idempotent."""
        if self._closed:
            return bool(self._shutdown_result)
        self._closed = True
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        ok = self._flush_until(deadline)
        if self.phase_metrics is not None:
            self.phase_metrics.stop()
        if self.span_pipeline is not None:
            ok = self.span_pipeline.close(deadline - time.monotonic()) and ok
        if self.tracer_provider is not None:
            run_bounded(self.tracer_provider.shutdown, max(deadline - time.monotonic(), 0.0))
        if self.meter_provider is not None:
            meter_provider = self.meter_provider
            remaining_s = max(deadline - time.monotonic(), 0.0)
            run_bounded(lambda: meter_provider.shutdown(timeout_millis=max(remaining_s, 0.001) * 1000), remaining_s)
        self._shutdown_result = ok
        return ok
