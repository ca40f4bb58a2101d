"""`TelemetryHandle`: one process's providers, resource and bounded flush / shutdown.

The handle owns its providers; it never relies on OpenTelemetry's set-once globals for correctness (lens_rl
registers live proxies as the globals once, which forward to whichever handle is current:
:mod:`lens_rl.export.providers`). Every blocking call is bounded by one deadline spent across its stages:
spans, then metrics.

Example::

    handle = lens_rl.get_telemetry_handle()
    if handle is not None:
        ok = handle.force_flush(timeout_ms=2000)   # True: everything exported
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from lens_rl._runtime import RUNTIME
from lens_rl._version import __version__
from lens_rl.export import _sdk
from lens_rl.export.bounded import budget_ms, run_bounded
from lens_rl.export.exporters import make_exporters
from lens_rl.export.fastspan import FastSpanFactory
from lens_rl.export.ids import LensIdGenerator
from lens_rl.export.live import LiveMonitor
from lens_rl.export.live_metrics import PhaseMetrics, TrackingMetricExporter
from lens_rl.export.pipeline import SpanPipeline
from lens_rl.export.sampling import PhaseSampler
from lens_rl.export.sdk_logs import quiet_sdk_limit_logs

if TYPE_CHECKING:
    from lens_rl.config import TelemetryConfig

__all__ = ["TelemetryHandle"]

_log = logging.getLogger("lens_rl")
#: How long :meth:`TelemetryHandle.flush_when_idle` may wait (what ``flush_on_step`` may: a phase at most this).
_IDLE_FLUSH_MAX_MS = 1000


class TelemetryHandle:
    """One process's telemetry: ``.tracer``, ``.meter``, ``.resource``, ``.is_exporting`` (the runtime's ``Handle``).

    ``force_flush`` and ``shutdown`` are bounded by ``timeout_ms`` whatever the
    collector does, and return True only when everything recorded so far was exported.
    """

    def __init__(
        self,
        config: TelemetryConfig,
        attributes: Mapping[str, Any],
        *,
        role: str = "worker",
        metric_readers: Sequence[Any] = (),
    ) -> None:
        self.config = config
        #: ``driver``, ``worker``, or ``lazy`` (made by a first phase; an explicit init replaces it)
        self.role = role
        #: The job root's span id (see :meth:`set_root`): the sampler treats its children as top-level phases.
        self.root_span_id: int | None = None
        #: Write ended spans out when the process's last open phase ends (:meth:`flush_when_idle`); set by
        #: lifecycle in a child ``lens-rl run`` wove.
        self.flush_idle = False
        attributes = dict(attributes)
        if config.sample_rate < 1.0:  # so the offline table can say the run was sampled
            attributes.setdefault("rl.sample_rate", config.sample_rate)
        self.resource = Resource.create(attributes)
        self.span_pipeline: SpanPipeline | None = None
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        self._metric_exporter: TrackingMetricExporter | None = None
        self._metric_reader: PeriodicExportingMetricReader | None = None
        self._closed = False
        self._shutdown_result: bool | None = None
        if RUNTIME.otel_keys is None:  # the hot path's context keys (lens_rl.propagation reads them)
            RUNTIME.otel_keys = _sdk.context_keys()
        quiet_sdk_limit_logs()
        span_exporter, metric_exporter = make_exporters(config, dict(self.resource.attributes), role)
        self.is_exporting = span_exporter is not None or metric_exporter is not None
        self.tracer: trace_api.Tracer = trace_api.NoOpTracer()
        #: Starts phase spans without the SDK's per-span cost (same processors, limits, sampling rule).
        self.fast: FastSpanFactory | None = None
        if config.traces_enabled:
            self._start_traces(config, span_exporter)
        self.meter: metrics_api.Meter = metrics_api.NoOpMeter("lens_rl")
        self.phase_metrics: PhaseMetrics | None = None
        self.live: LiveMonitor | None = None
        if config.metrics_enabled:
            self._start_metrics(config, metric_exporter, metric_readers)
        else:  # no instruments, but the completed runs' stats the watchdog and heartbeats need
            self.phase_metrics = PhaseMetrics(None)
        if self.is_exporting:
            self.live = LiveMonitor(self)
            self.live.start()

    def _start_traces(self, config: TelemetryConfig, span_exporter: Any) -> None:
        """The tracer provider, its pipeline to ``span_exporter`` (if any), the tracer and the fast span factory."""
        sampler = PhaseSampler(config.sample_rate, lambda: self.root_span_id)
        # ids from lens_rl's own stream, for third-party spans too (the SDK's default draws the job's random)
        self.tracer_provider = TracerProvider(
            resource=self.resource, sampler=sampler, shutdown_on_exit=False, id_generator=LensIdGenerator()
        )
        if span_exporter is not None:
            self.span_pipeline = SpanPipeline(
                span_exporter, max_queue_spans=config.max_queue_spans, max_queue_bytes=config.max_queue_bytes
            )
            self.tracer_provider.add_span_processor(self.span_pipeline)
        self.tracer = self.tracer_provider.get_tracer("lens_rl", __version__)
        self.fast = FastSpanFactory.for_provider(
            self.tracer_provider, self.resource, __version__, config.sample_rate, lambda: self.root_span_id
        )

    def _start_metrics(self, config: TelemetryConfig, metric_exporter: Any, metric_readers: Sequence[Any]) -> None:
        """The meter provider with the user's readers and one for ``metric_exporter`` (if any), the meter and
        the phase metrics."""
        readers = list(metric_readers)
        if metric_exporter is not None:
            self._metric_exporter = TrackingMetricExporter(metric_exporter)
            self._metric_reader = PeriodicExportingMetricReader(
                self._metric_exporter,
                export_interval_millis=config.metrics_interval_ms,
                export_timeout_millis=config.export_timeout_ms,
            )
            readers.append(self._metric_reader)
        # no exemplars: the SDK's exemplar reservoirs sample with the global random (the job's stream)
        self.meter_provider = MeterProvider(
            resource=self.resource,
            metric_readers=readers,
            shutdown_on_exit=False,
            exemplar_filter=AlwaysOffExemplarFilter(),
        )
        self.meter = self.meter_provider.get_meter("lens_rl", __version__)
        self.phase_metrics = PhaseMetrics(self.meter, dropped=self.spans_dropped)

    def flush_when_idle(self) -> None:
        """The process's last open phase ended: write its ended spans out now, before it returns (a Pool
        worker's result, a Ray actor's reply), so a child killed without ``atexit`` right after (``Pool``'s
        ``terminate``, the SIGTERM then SIGKILL Ray's raylet sends an actor at ``ray.shutdown()``) loses none.
        Spans only, bounded like ``flush_on_step`` (1 s at most); a flush that could not settle everything in
        time (a hung collector) turns it off for the process, so that costs one phase once."""
        pipeline = self.span_pipeline
        if pipeline is None or not self.flush_idle:
            return
        target = pipeline.accepted
        pipeline.flush(min(self.config.export_timeout_ms, _IDLE_FLUSH_MAX_MS) / 1000.0)
        if pipeline.exported + pipeline.failed < target:
            self.flush_idle = False

    def after_fork(self) -> None:
        """In a forked child: stop the copy of the metric reader's thread the SDK restarts there."""
        if self._metric_reader is not None:
            _sdk.stop_metric_thread(self._metric_reader)

    def set_root(self, span_id: int) -> None:
        """The job root's span id: its children are top-level phases (sampling), and the file store's header
        names it (a reader then knows that parent is the job, not a span a killed process never wrote)."""
        self.root_span_id = span_id
        exporter: Any = self.span_pipeline.exporter if self.span_pipeline is not None else None
        if hasattr(exporter, "set_root"):
            exporter.set_root(span_id)

    def adopt(self, old: Any) -> None:
        """Take over the files of ``old``, a handle this process made lazily (its first phase came before it
        became the job's driver) and just shut down: its spans go into this handle's file, under this
        header; its heartbeat and metric files are removed (one process, one identity in the store)."""
        new_spans = getattr(self.span_pipeline, "exporter", None)
        old_spans = getattr(getattr(old, "span_pipeline", None), "exporter", None)
        if hasattr(new_spans, "adopt") and isinstance(getattr(old_spans, "path", None), Path):
            new_spans.adopt(old_spans.path)  # type: ignore[union-attr]
        old_metrics = getattr(getattr(old, "_metric_exporter", None), "inner", None)
        for path in (getattr(old_metrics, "path", None), getattr(getattr(old, "live", None), "path", None)):
            if isinstance(path, Path) and path.parent == getattr(getattr(new_spans, "path", None), "parent", None):
                with contextlib.suppress(OSError):
                    path.unlink()

    # ------------------------------------------------------------------ figures

    def spans_dropped(self) -> int:
        """Spans lost so far: refused at a full queue plus those whose export failed for good."""
        pipeline = self.span_pipeline
        return 0 if pipeline is None else pipeline.dropped + pipeline.failed

    def stats(self) -> dict[str, Any]:
        """Counters for humans and tests, counts of spans: ``accepted`` into the queue, then ``queued`` (waiting),
        ``exporting`` (on their first try), ``retrying`` (a batch whose export failed, tried again), ``exported``
        or ``failed`` (lost for good), which add up to ``accepted``; ``dropped`` (refused at a full queue, never
        accepted)."""
        p = self.span_pipeline
        out: dict[str, Any] = {"exporter": self.config.exporter}
        if p is not None:
            out.update(
                accepted=p.accepted,
                exported=p.exported,
                dropped=p.dropped,
                failed=p.failed,
                queued=p.queued,
                queued_bytes=p.queued_bytes,
                lost_at_shutdown=p.lost_at_close,
                retrying=p.retrying,
                exporting=p.exporting,
                last_error=p.last_error,
            )
        if self._metric_exporter is not None:
            out.update(metric_exports=self._metric_exporter.exports, metric_failures=self._metric_exporter.failures)
        if self.phase_metrics is not None:
            out["phase_metrics_dropped"] = self.phase_metrics.overflow
        return out

    # ------------------------------------------------------------------ bounded

    def force_flush(self, timeout_ms: float | None = 5000) -> bool:
        """Export everything recorded so far, within ``timeout_ms`` (read by ``budget_ms``: never raises).
        True only if all of it got out."""
        deadline = time.monotonic() + budget_ms(timeout_ms) / 1000.0
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
            flushed = (
                remaining_s > 0
                and run_bounded(
                    lambda: self._metric_reader.force_flush(timeout_millis=max(remaining_s, 0.001) * 1000),  # type: ignore[union-attr]
                    remaining_s,
                )[0]
            )
            ok = ok and flushed and exporter.exports > before and exporter.last_ok
        return ok

    def shutdown(self, timeout_ms: float | None = 5000) -> bool:
        """Flush, then shut the providers down, all within ``timeout_ms`` (read by ``budget_ms``). Idempotent."""
        if self._closed:
            return bool(self._shutdown_result)
        self._closed = True
        deadline = time.monotonic() + budget_ms(timeout_ms) / 1000.0
        # (the heartbeat goes on while the spans flush, bounded by the same deadline: a long flush is a process
        # shutting down, not a stale one)
        ok = self._flush_until(deadline)
        if self.phase_metrics is not None:
            self.phase_metrics.stop()
        if self.span_pipeline is not None:
            ok = self.span_pipeline.close(deadline - time.monotonic()) and ok
        if self.live is not None:  # the last heartbeat ("ended"), with the final stats(), before the providers close
            self.live.stop(min(1.0, max(deadline - time.monotonic(), 0.0)))
        if self.tracer_provider is not None:
            run_bounded(self.tracer_provider.shutdown, max(deadline - time.monotonic(), 0.0))
        if self.meter_provider is not None:
            meter_provider = self.meter_provider
            remaining_s = max(deadline - time.monotonic(), 0.0)
            run_bounded(lambda: _shut_meters(meter_provider, remaining_s), remaining_s)
        self._shutdown_result = ok
        return ok


def _shut_meters(meter_provider: MeterProvider, remaining_s: float) -> bool:
    """Shut the metric readers down within ``remaining_s``: False when the deadline ran out first (the SDK raises
    then, "deadline already exceeded": a shutdown as late as the caller's budget, not a fault of lens_rl; the
    budget's answer is the spans' flush, as before)."""
    try:
        meter_provider.shutdown(timeout_millis=max(remaining_s, 0.001) * 1000)
    except Exception as exc:  # the SDK's bare Exception, naming the readers that failed
        _log.debug("lens_rl: metric readers not shut down within the budget: %s", exc)
        return False
    return True
