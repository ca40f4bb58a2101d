"""Perfetto gets a counter track per GPU (its utilisation, changes only) beside the spans, in both formats;
a run without sample files gets none."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import lens
from tests.gpu_stores import device, util_at, write_gpu_worker, write_samples, write_scripted_job
from tests.stores import at_ns, span, write_process


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


def _two_steps(run: Path) -> Path:
    """The driver's steps 1 (0.5-19.5 s) and 2 (20.25-39 s), each with a generation on two GPU workers (1-11 s,
    21-31 s); every device's samples alternate 0 and 50 % each half second over 0-40 s."""
    driver = [span("rl.job", 0, 40, "job")]
    for k, (lo, hi) in ((1, (0.5, 19.5)), (2, (20.25, 39))):
        driver.append(span("step", lo, hi, f"s{k}", parent="job", step=k))
        driver.append(span("rollout", 20 * k - 19, 20 * k - 9, f"d{k}", parent=f"s{k}", bucket="idle"))
    write_process(run, "driver", 0, 1, driver, root="job")
    for rank in (0, 1):
        phases = [
            span("generation", 20 * k - 19, 20 * k - 9, f"g{k}-{rank}", parent=f"d{k}", remote=True, step=k)
            for k in (1, 2)
        ]
        write_gpu_worker(run, rank, phases)
        write_samples(run, f"node{rank}", 100 + rank, [device(f"GPU-{rank}")], _alternating, end_s=40)
    return run


def _alternating(t: float) -> list[Any]:
    u = 50 if round(t * 2) % 2 else 0
    return [[u, 0, int(1e9), 150000, 1980, None, None, None]]


def _counter_points(trace: Path) -> dict[str, list[tuple[float, float]]]:
    """Each GPU track's points (seconds on the store's clock, value), from a JSON or a protobuf trace."""
    out: dict[str, list[tuple[float, float]]] = {}
    if trace.suffix == ".json":
        for e in json.loads(trace.read_text())["traceEvents"]:
            if e["ph"] == "C":  # (the JSON counts from the run's first start: the store clock's 0 here)
                out.setdefault(e["name"], []).append((e["ts"] / 1e6, e["args"]["busy %"]))
        return out
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    packets = Trace.FromString(trace.read_bytes()).packet
    names = {p.track_descriptor.uuid: p.track_descriptor.name for p in packets if p.HasField("track_descriptor")}
    for p in packets:
        if p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_COUNTER:
            at = (p.timestamp - at_ns(0)) / 1e9
            out.setdefault(names[p.track_event.track_uuid], []).append((at, p.track_event.double_counter_value))
    return out


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
@pytest.mark.parametrize(
    ("cut", "window"),
    [(("--steps", "2"), (20.25, 39.0)), (("--steps", "1-1"), (0.5, 19.5)), (("--group", "actor"), (1.0, 31.0))],
)
def test_a_window_cuts_the_counter_tracks_to_its_spans(
    tmp_path: Path, suffix: str, cut: tuple[str, str], window: tuple[float, float]
) -> None:
    """--steps 2 draws step 2's spans (20.25-39 s): each GPU's track holds the points of that window alone, the
    first at 20.25 s with the reading then in effect (20 s's 0 %), not a day of points per device (the same for
    --steps 1-1, and --group actor: its spans' 1-31 s); the cache answers as --no-cache, byte for byte."""
    run = _two_steps(tmp_path / "r1")
    cold = tmp_path / f"cold{suffix}"
    assert lens("perfetto", str(run), *cut, "--no-cache", "-o", str(cold)).returncode == 0
    for n in (1, 2):  # (the cache made, then read)
        warm = tmp_path / f"warm{n}{suffix}"
        assert lens("perfetto", str(run), *cut, "-o", str(warm)).returncode == 0
        assert warm.read_bytes() == cold.read_bytes()
    lo, hi = window
    ticks = [k / 2 for k in range(math.ceil(lo * 2), math.floor(hi * 2) + 1)]  # (the samples in the window)
    expected = [(t, _alternating(t)[0][0]) for t in ticks]
    if ticks[0] > lo:
        expected.insert(0, (lo, _alternating(math.floor(lo * 2) / 2)[0][0]))
    points = _counter_points(cold)
    assert set(points) == {"GPU 0 GPU-0 busy %", "GPU 0 GPU-1 busy %"}
    for got in points.values():
        assert [(round(t, 6), v) for t, v in got] == expected


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_a_grown_file_drawn_on_from_the_cache_widens_the_window(tmp_path: Path, suffix: str) -> None:
    """--group actor through the cache, then each worker's file grows by a generation at 32-35 s: the kept events
    are drawn on, and the counter tracks reach 35 s, as --no-cache says, byte for byte."""
    run = _two_steps(tmp_path / "r1")
    assert lens("perfetto", str(run), "--group", "actor", "-o", str(tmp_path / f"before{suffix}")).returncode == 0
    for rank in (0, 1):
        more = span("generation", 32, 35, f"g3-{rank}", parent="d2", remote=True, step=2)
        with (run / f"spans-actor-{rank}-{10 + rank}.jsonl").open("a") as handle:
            handle.write(json.dumps(more) + "\n")
    warm, cold = tmp_path / f"warm{suffix}", tmp_path / f"cold{suffix}"
    assert lens("perfetto", str(run), "--group", "actor", "-o", str(warm)).returncode == 0
    assert lens("perfetto", str(run), "--group", "actor", "--no-cache", "-o", str(cold)).returncode == 0
    assert warm.read_bytes() == cold.read_bytes()
    for got in _counter_points(warm).values():
        assert (got[0], got[-1]) == ((1.0, 0), (35.0, 0))
