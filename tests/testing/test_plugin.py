"""lens_rl.testing: the lens_spans fixture, recording(), the recorder's helpers, a recorder's spans written
as a store, and the OTLP receiver that decodes what exporters send."""

from __future__ import annotations

from pathlib import Path

import pytest

import lens_rl
from lens_rl import traced_phase
from lens_rl.store import iter_rows, span_files
from lens_rl.testing import OTLPReceiver, SpanRecorder, recording, write_spans


def test_the_fixture_records_in_memory_and_resets(lens_spans: SpanRecorder) -> None:
    """lens_spans: telemetry on, spans and metrics in memory, find() naming what exists when it fails."""
    with traced_phase("generation", step=1):
        pass
    assert lens_spans.names() == ["generation"] and lens_spans.find("generation").attributes["rl.step"] == 1
    assert "rl.phase.count" in lens_spans.metrics()
    with pytest.raises(AssertionError, match="finished spans: \\['generation'\\]"):
        lens_spans.find("nope")
    lens_spans.clear()
    assert lens_spans.spans == []


def test_recorded_spans_written_as_a_store_read_back(tmp_path: Path) -> None:
    """write_spans: one file per process, the exporter's own lines under a header; the driver's role kept."""
    with recording(worker_group="driver") as rec:
        with traced_phase("step", step=1), traced_phase("generation"):
            pass
    rows = [
        (head.process.driver, row.n)
        for path in span_files(write_spans(rec.spans, tmp_path))
        for head, row in iter_rows(path)
    ]
    assert rows == [(True, "generation"), (True, "step")]
    assert lens_rl.get_telemetry_handle() is None


def test_the_receiver_decodes_spans_and_metrics(receiver: OTLPReceiver) -> None:
    """A real OTLP/HTTP receiver on loopback: what lens_rl sends arrives decoded, resource included."""
    lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": receiver.endpoint}}, "grpo"
    )
    with traced_phase("generation"):
        pass
    assert lens_rl.shutdown_telemetry(5000)
    assert receiver.wait_for_spans(2, 5)
    gen = next(s for s in receiver.spans if s["name"] == "generation")
    assert gen["resource"]["rl.worker_group"] == "driver" and "rl.phase.count" in receiver.metric_names()
