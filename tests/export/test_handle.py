"""The handle: its providers per exporter, bounded flush and shutdown whatever the collector does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl.testing import OTLPReceiver, hung_endpoint, refused_endpoint
from tests.conftest import run_python
from tests.export import SLACK_S, burst, otlp_config


@pytest.mark.parametrize("fault", ["refused", "hung", "slow"])
@pytest.mark.parametrize("call", ["flush", "shutdown"])
def test_flush_and_shutdown_are_bounded_with_10000_spans_queued(fault: str, call: str) -> None:
    """Against a refusing, silent or slow collector, flush/shutdown return in budget and say False."""
    sock = slow = None
    if fault == "refused":
        endpoint = refused_endpoint()
    elif fault == "hung":
        endpoint, sock = hung_endpoint()
    else:
        slow = OTLPReceiver(delay_s=5.0)
        endpoint = slow.endpoint
    try:
        handle = lens_rl.init_telemetry_driver(otlp_config(endpoint, export_timeout_ms=30_000), "grpo")
        burst(handle, 10_000)
        budget_ms = 1000
        t0 = time.monotonic()
        result = lens_rl.flush_telemetry(budget_ms) if call == "flush" else lens_rl.shutdown_telemetry(budget_ms)
        elapsed_s = time.monotonic() - t0
        assert result is False
        assert elapsed_s <= budget_ms / 1000 + SLACK_S, f"{call} vs {fault} took {elapsed_s:.3f}s"
        if call == "flush":  # the same budget holds for the shutdown that follows
            t0 = time.monotonic()
            assert lens_rl.shutdown_telemetry(500) is False
            assert time.monotonic() - t0 <= 0.5 + SLACK_S
    finally:
        if sock is not None:
            sock.close()
        if slow is not None:
            slow.close()


def test_exporter_none_and_console_run(tmp_path: Path) -> None:
    """exporter=none records nothing outward; console prints spans to stdout."""
    handle = lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "none"}}, "grpo")
    assert handle is not None and handle.is_exporting is False
    with lens_rl.traced_phase("generation"):
        pass
    assert lens_rl.shutdown_telemetry(1000) is True
    out = run_python(
        """
        import lens_rl
        lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "console",
                                       "metrics_enabled": False}}, "grpo")
        with lens_rl.traced_phase("generation"):
            pass
        lens_rl.shutdown_telemetry(2000)
        """
    )
    assert out.returncode == 0, out.stderr
    assert '"name": "generation"' in out.stdout


def test_metric_readers_left_by_a_spent_shutdown_budget_are_no_internal_error() -> None:
    """A shutdown whose budget runs out before a metric reader's turn (the SDK raises "deadline already
    exceeded") says False and logs no internal error: a late shutdown is the caller's budget, not a fault."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from lens_rl.export.handle import _shut_meters

    class SlowReader(InMemoryMetricReader):
        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            time.sleep(0.05)  # longer than the 1 ms left: the next reader never gets its turn
            super().shutdown(timeout_millis=timeout_millis, **kwargs)

    provider = MeterProvider(metric_readers=[SlowReader(), InMemoryMetricReader()])
    assert _shut_meters(provider, 0.0) is False
    assert _shut_meters(MeterProvider(metric_readers=[InMemoryMetricReader()]), 5.0) is True


def test_spans_being_retried_are_counted_in_stats_and_every_accepted_span_is_in_one_count() -> None:
    """During an outage the batch being retried is ``retrying``, a count of spans (it was a bool, and its
    span in no count): queued + exporting + retrying + exported + failed is what was accepted, and a healthy
    end leaves 0 retrying."""
    handle = lens_rl.init_telemetry_driver(otlp_config(refused_endpoint(), export_timeout_ms=500), "grpo")
    assert handle is not None
    for step in range(3):
        with lens_rl.traced_phase("generation", step=step):
            pass
    assert lens_rl.flush_telemetry(1500) is False  # refused: the batch is retried, backing off
    stats = handle.stats()
    assert type(stats["retrying"]) is int and stats["retrying"] == 3, stats
    parts = ("queued", "exporting", "retrying", "exported", "failed")
    assert sum(stats[key] for key in parts) == stats["accepted"] == 3, stats
    lens_rl.shutdown_telemetry(300)
    stats = handle.stats()
    assert stats["retrying"] == 0 and stats["failed"] == stats["accepted"], stats  # (the job's root span too)
    assert sum(stats[key] for key in parts) == stats["accepted"], stats
