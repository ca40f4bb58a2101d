"""Perfetto gets a counter track per GPU (its utilisation, changes only) beside the spans, in both formats;
a run without sample files gets none."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import lens
from tests.gpu_stores import util_at, write_scripted_job


def test_each_gpu_is_a_counter_track_in_json_and_protobuf(tmp_path: Path) -> None:
    """Chrome JSON: ``C`` events per device under a ``GPUs on <host>`` process, their values the script's at
    each change (and no other ``X`` events than the spans); protobuf: a counter track per device with its values."""
    run = write_scripted_job(tmp_path / "r1")
    assert lens("perfetto", str(run), "-o", str(tmp_path / "t.json")).returncode == 0
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"GPU 0 GPU-0 busy %", "GPU 0 GPU-1 busy %"}
    assert sum(e["ph"] == "X" for e in events) == 8
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"GPUs on node0", "GPUs on node1"} <= names
    origin_s = 0.0  # (the driver's header says the run began at the store's clock's 0)
    for event in counters:
        assert event["args"]["busy %"] == util_at(origin_s + event["ts"] / 1e6)
    values = [e["args"]["busy %"] for e in counters if e["name"] == "GPU 0 GPU-0 busy %"]
    assert all(a != b for a, b in zip(values, values[1:], strict=False))  # (changes only)

    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    assert lens("perfetto", str(run), "-o", str(tmp_path / "t.pftrace")).returncode == 0
    trace = Trace.FromString((tmp_path / "t.pftrace").read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet if p.HasField("track_descriptor")}
    points = [p for p in trace.packet if p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_COUNTER]
    assert {tracks[p.track_event.track_uuid] for p in points} == {"GPU 0 GPU-0 busy %", "GPU 0 GPU-1 busy %"}
    assert {p.track_event.double_counter_value for p in points} == {0.0, 80.0, 90.0}


def test_a_run_without_sample_files_has_no_counter(tmp_path: Path) -> None:
    """No sample file, no counter track: the trace is the spans' alone."""
    run = write_scripted_job(tmp_path / "r1", samples=False)
    assert lens("perfetto", str(run), "-o", str(tmp_path / "t.json")).returncode == 0
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert not [e for e in events if e["ph"] == "C"]
