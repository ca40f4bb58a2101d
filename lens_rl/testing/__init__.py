"""Testing helpers and the pytest plugin (entry point ``pytest11: lens_rl``).

* ``lens_spans`` fixture: telemetry on, in memory, for one test; returns a
  :class:`SpanRecorder` of finished spans; resets lens_rl's global state afterwards.
* :func:`recording` — the same as a context manager, outside pytest.
* :func:`reset` — forget all lens_rl global state (shuts a live handle down, bounded).
* :class:`OTLPReceiver` — a real OTLP/HTTP receiver on loopback.
* :func:`write_spans` — recorded spans written as a file store, for the offline tools.
* :mod:`lens_rl.testing.nvml` — a stand-in ``pynvml`` over scripted GPUs, for GPU telemetry without a GPU.

Example::

    def test_my_step_is_traced(lens_spans):
        run_step()
        span = lens_spans.find("generation")
        assert span.attributes["rl.bucket"] == "productive"
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from lens_rl.testing.receiver import OTLPReceiver, hung_endpoint, refused_endpoint
from lens_rl.testing.recorder import SpanRecorder
from lens_rl.testing.store import write_spans

__all__ = ["OTLPReceiver", "SpanRecorder", "hung_endpoint", "recording", "refused_endpoint", "reset", "write_spans"]


def reset(timeout_ms: int = 500) -> None:
    """Shut down any live telemetry (bounded) and forget every piece of global state."""
    from lens_rl._runtime import RUNTIME
    from lens_rl.integrations.aiohttp import uninstrument_aiohttp_client
    from lens_rl.lifecycle import shutdown_telemetry

    if RUNTIME.handle is not None:
        shutdown_telemetry(timeout_ms)
    uninstrument_aiohttp_client()
    RUNTIME.reset()


@contextlib.contextmanager
def recording(
    *, worker_group: str = "test", rank: int = 0, world_size: int = 1, **config: Any
) -> Iterator[SpanRecorder]:
    """Telemetry on, in memory, inside the block; global state reset on the way out."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from lens_rl.config import TelemetryConfig
    from lens_rl.export.handle import TelemetryHandle
    from lens_rl.identity import worker_attributes
    from lens_rl.lifecycle import activate

    reset()
    recorder = SpanRecorder()
    settings: dict[str, Any] = {"enabled": True, "exporter": "none", "run_id": "test"}
    settings.update(config)
    cfg = TelemetryConfig(**settings)
    attrs, _ = worker_attributes(
        service_name=cfg.service_name, rank=rank, world_size=world_size, worker_group=worker_group
    )
    recorder.metric_reader = InMemoryMetricReader()
    role = "driver" if worker_group == "driver" else "worker"
    handle = TelemetryHandle(cfg, attrs, role=role, metric_readers=[recorder.metric_reader])
    if handle.tracer_provider is not None:
        handle.tracer_provider.add_span_processor(SimpleSpanProcessor(recorder.exporter))
    recorder.handle = handle
    activate(handle, role)
    try:
        yield recorder
    finally:
        reset()


try:
    import pytest
except ImportError:  # pragma: no cover - the helpers work without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def lens_spans() -> Iterator[SpanRecorder]:
        """Telemetry on, in memory, for this test: the finished spans it records."""
        with recording() as recorder:
            yield recorder
