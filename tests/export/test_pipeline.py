"""The span pipeline: a burst delivered whole, the queue bounded in spans and bytes, what cannot be delivered counted, flush honest."""

from __future__ import annotations

import time

import pytest

import lens_rl
from lens_rl import traced_phase
from lens_rl.testing import OTLPReceiver, hung_endpoint
from tests.conftest import run_python
from tests.export import burst, otlp_config


def test_burst_of_20000_spans_all_arrive(receiver: OTLPReceiver) -> None:
    """20,000 spans ended in about a second all reach the collector; nothing dropped."""
    handle = lens_rl.init_telemetry_driver(otlp_config(receiver.endpoint), "grpo")
    elapsed_s = burst(handle, 20_000)
    assert lens_rl.flush_telemetry(60_000) is True, handle.stats()
    assert receiver.wait_for_spans(20_000, 10)
    assert sum(s["name"] == "burst" for s in receiver.spans) == 20_000
    assert handle.stats()["dropped"] == 0
    print(f"burst: 20000 spans ended in {elapsed_s:.2f}s")


def test_full_queue_drops_are_counted_and_flush_says_false(
    receiver: OTLPReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Past max_queue_spans spans are dropped, counted, warned about once, and flush is False."""
    handle = lens_rl.init_telemetry_driver(otlp_config(receiver.endpoint, max_queue_spans=100), "grpo")
    burst(handle, 5000)
    assert lens_rl.flush_telemetry(10_000) is False
    stats = handle.stats()
    assert stats["dropped"] > 0 and stats["exported"] + stats["dropped"] == 5000
    assert sum("span queue full" in r.getMessage() for r in caplog.records) == 1
    assert handle.spans_dropped() == stats["dropped"]


def test_flush_is_false_when_a_batch_failed_for_good() -> None:
    """The SDK says True after failed exports; lens_rl's flush does not."""
    rejecting = OTLPReceiver(fail_status=400)  # non-retryable: the batch fails for good
    try:
        handle = lens_rl.init_telemetry_driver(otlp_config(rejecting.endpoint), "grpo")
        handle.span_pipeline._retry_for_s = 0.0
        with lens_rl.traced_phase("generation"):
            pass
        assert lens_rl.flush_telemetry(5000) is False
        assert handle.stats()["failed"] >= 1
    finally:
        rejecting.close()


def test_a_batch_rejected_as_too_large_is_split_and_later_spans_arrive() -> None:
    """A collector answering 413 above 64 KB: batches are split and resent; a span too big alone is
    dropped and counted; everything else arrives."""
    with OTLPReceiver(max_body_bytes=64 * 1024) as rx:
        handle = lens_rl.init_telemetry_driver(otlp_config(rx.endpoint), "grpo")
        for i in range(200):
            with traced_phase("generation", step=i) as span:
                span.set_attribute("rl.prompt", "x" * 2000)  # ~2 KB each: a 1024-span batch is ~2 MB
        with traced_phase("reward") as span:
            for k in range(40):
                span.set_attribute(f"rl.blob{k}", "y" * 4000)  # ~160 KB alone: never accepted
        for i in range(10):
            with traced_phase("after", step=i):
                pass
        assert lens_rl.flush_telemetry(20_000) is False  # one span was lost, and says so
        stats = handle.stats()
        names = [s["name"] for s in rx.spans]
        assert names.count("generation") == 200 and names.count("after") == 10 and "reward" not in names
        assert stats["failed"] == 1 and 413 in rx.statuses


def test_a_permanent_rejection_is_dropped_and_counted_not_retried() -> None:
    """HTTP 400 for one batch: dropped and counted at once; the next batch goes through."""
    state = {"first": True}

    def reject_first(body: bytes) -> int | None:
        if state["first"]:
            state["first"] = False
            return 400
        return None

    with OTLPReceiver(reject=reject_first) as rx:
        handle = lens_rl.init_telemetry_driver(otlp_config(rx.endpoint), "grpo")
        with traced_phase("poison"):
            pass
        t0 = time.monotonic()
        assert lens_rl.flush_telemetry(10_000) is False
        assert time.monotonic() - t0 < 5  # not the 5-minute retry window
        with traced_phase("later"):
            pass
        lens_rl.flush_telemetry(10_000)
        assert [s["name"] for s in rx.spans] == ["later"] and handle.stats()["failed"] == 1


@pytest.mark.slow
def test_the_queue_is_bounded_in_bytes_against_a_hung_collector() -> None:
    """4 KB attributes against a collector that never answers: RSS stays near the byte bound, drops are counted."""
    endpoint, sock = hung_endpoint()
    try:
        out = run_python(
            f"""
            import resource, lens_rl
            h = lens_rl.init_telemetry_driver({otlp_config(endpoint, max_queue_bytes=32 * 1024 * 1024, export_timeout_ms=60000)!r}, "grpo")
            blob = "z" * 4096
            for i in range(60000):
                with lens_rl.traced_phase("generation") as span:
                    span.set_attribute("rl.prompt", blob + str(i))
            s = h.stats()
            print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, s["dropped"], s["queued_bytes"])
            print("SHUTDOWN", lens_rl.shutdown_telemetry(500), h.stats()["lost_at_shutdown"])
        """,
            timeout=120,
        )
    finally:
        sock.close()
    assert out.returncode == 0, out.stderr[-2000:]
    rss_mb, dropped, queued_bytes = (int(x) for x in out.stdout.split()[:3])
    assert queued_bytes <= 32 * 1024 * 1024 and dropped > 30_000
    assert rss_mb < 400, rss_mb  # ~900 MB without the byte bound (60,000 x ~5 KB queued and more)
    shutdown = out.stdout.split("SHUTDOWN")[1].split()
    assert shutdown[0] == "False" and int(shutdown[1]) > 0  # what was still queued is counted, not silently lost
