"""Perfetto: the protobuf parses with Perfetto's own definitions and rebuilds the spans, calls across processes as arrows with unique flow ids, times from the earliest header."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import lens
from tests.stores import at_ns, read_spans, synthesized_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GRPO-shaped store of ~50,000 spans in 20 process files (one driver), and a file of another shape (v1)."""
    return synthesized_store(tmp_path_factory.mktemp("scale"))


def test_perfetto_protobuf_parses_with_perfetto_definitions(store: Path, tmp_path: Path) -> None:
    """-o X.pftrace writes a Trace the perfetto package's protos parse: processes, named threads, balanced
    slices, flows from the driver into workers; --steps and --group cut it."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    out = tmp_path / "t.pftrace"
    res = lens("perfetto", str(store), "-o", str(out), "--steps", "3-4", "--jobs", "2")
    assert res.returncode == 0, res.stderr[-2000:]
    trace = Trace()
    trace.ParseFromString(out.read_bytes())
    processes = [
        p.track_descriptor.process.process_name for p in trace.packet if p.track_descriptor.HasField("process")
    ]
    threads = [p.track_descriptor.thread.thread_name for p in trace.packet if p.track_descriptor.HasField("thread")]
    begins = [
        p for p in trace.packet if p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN
    ]
    ends = [p for p in trace.packet if p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_SLICE_END]
    assert any(name.startswith("driver rank 0") for name in processes) and "MainThread" in threads
    assert len(begins) == len(ends) > 0
    steps = {a.int_value for p in begins for a in p.track_event.debug_annotations if a.name == "rl.step"}
    assert steps == {3, 4}
    flows = {f for p in trace.packet for f in p.track_event.flow_ids}
    terminating = {f for p in begins for f in p.track_event.terminating_flow_ids}
    assert flows and flows <= terminating
    group = tmp_path / "g.json"
    res = lens("perfetto", str(store), "-o", str(group), "--group", "driver")
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(group.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names and all(n.startswith("driver") for n in names)
    assert all(e["ph"] != "X" or e["pid"] == 1 for e in doc["traceEvents"])


def _slices_as_perfetto_builds_them(data: bytes) -> dict[str, tuple[str, int, int, int]]:
    """span id -> (name, start, end, track) of a .pftrace's slices as Perfetto's trace processor builds them:
    packets stably sorted by time, a begin opening a slice on its track, an end closing the track's
    innermost open one."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    packets = sorted((p for p in Trace.FromString(data).packet if p.HasField("track_event")), key=lambda p: p.timestamp)
    open_slices: dict[int, list[tuple[Any, ...]]] = {}
    out = {}
    for packet in packets:
        event = packet.track_event
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            span_id = next(a.string_value for a in event.debug_annotations if a.name == "span_id")
            open_slices.setdefault(event.track_uuid, []).append((span_id, event.name, packet.timestamp))
        elif event.type == TrackEvent.TYPE_SLICE_END:
            span_id, name, start = open_slices[event.track_uuid].pop()
            out[span_id] = (name, start, packet.timestamp, event.track_uuid)
    assert not any(open_slices.values())
    return out


def test_perfetto_slices_are_the_spans_with_their_times_and_nesting(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rebuilt as Perfetto does, every slice of the .pftrace is its span: name, start and end, on its
    thread's track unless it overlaps a sibling without nesting. Ties included: a child that starts or
    ends with its parent, spans that meet end to start, zero-length spans, equal twins. Packets written
    a few at a time give the same slices."""
    from lens_rl.offline.show.perfetto import proto, write_trace
    from lens_rl.store import span_files

    tricky = tmp_path / "tricky" / "run"
    tricky.mkdir(parents=True)
    header = {"v": 2, "header": True, "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0, "process.pid": 1}}
    times = {
        "parent": (100, 200),
        "first": (100, 150),
        "meets": (150, 200),
        "inner": (150, 150),
        "at_end": (200, 200),
        "twin_a": (300, 400),
        "twin_b": (300, 400),
        "overlap": (350, 450),
        "after": (400, 400),
    }
    parents = {"first": "parent", "meets": "parent", "inner": "meets"}
    ids = {name: f"{n + 1:016x}" for n, name in enumerate(times)}
    lines = [
        {
            "n": name,
            "t": "a" * 32,
            "s": ids[name],
            "p": ids.get(parents.get(name, ""), None),
            "b": at_ns(b),
            "e": at_ns(e),
        }
        for name, (b, e) in reversed(list(times.items()))
    ]
    (tricky / "spans-driver-0-1.jsonl").write_text("\n".join(json.dumps(r) for r in [header, *lines]) + "\n")
    for root in (store, tricky.parent):
        files = span_files(root / "run")
        out = tmp_path / "t.pftrace"
        write_trace(files, out, jobs=2)
        slices = _slices_as_perfetto_builds_them(out.read_bytes())
        spans = {str(r["span_id"]): (r["name"], r["start_ns"], r["end_ns"]) for f in files for r in read_spans(f)}
        assert {span_id: s[:3] for span_id, s in slices.items()} == spans
    tracks = {name: slices[ids[name]][3] for name in times}  # the tricky file's: one thread, one overlap
    assert len({tracks[n] for n in times if n != "overlap"}) == 1 and tracks["overlap"] != tracks["parent"]
    monkeypatch.setattr(proto, "SLICE", 3)  # (in this process: --jobs 1)
    write_trace(span_files(tricky), tmp_path / "small.pftrace", jobs=1)
    assert _slices_as_perfetto_builds_them((tmp_path / "small.pftrace").read_bytes()) == slices


def test_a_spilled_part_is_appended_whole_however_the_kernel_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Perfetto appends each worker's spilled events to the output: in-kernel where it can, by reading and
    writing where it cannot (another platform, a call refused part way), never twice and never short."""
    import errno
    import os

    from lens_rl.offline.show.perfetto import _append_file

    part = tmp_path / "part"
    part.write_bytes(bytes(range(256)) * 40_000)
    real = getattr(os, "copy_file_range", None)
    calls = {"n": 0}

    def refused_after_one_piece(src: int, dst: int, count: int) -> int:
        calls["n"] += 1
        if calls["n"] > 1 or real is None:
            raise OSError(errno.EXDEV, "cross-device")
        return real(src, dst, 1000)  # type: ignore[no-any-return]

    for how in ("kernel", "refused part way", "missing"):
        if how == "refused part way":
            monkeypatch.setattr(os, "copy_file_range", refused_after_one_piece, raising=False)
        elif how == "missing":
            monkeypatch.delattr(os, "copy_file_range", raising=False)
        out_path = tmp_path / f"out-{how}"
        with open(out_path, "wb") as out:
            out.write(b"head")
            _append_file(str(part), out)
            out.write(b"tail")
        assert out_path.read_bytes() == b"head" + part.read_bytes() + b"tail", how


def test_every_call_across_processes_gets_its_arrow_whoever_calls(tmp_path: Path) -> None:
    """A flow arrow from each caller to each callee in another process: the driver's calls, a worker's
    call into another worker (found by locating that caller afterwards), a client span's; none from
    anywhere to a span whose parent was never written. A process met past a file's first line (a re-init under another
    identity) is named like the others. Every way of running gives the same bytes."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    from lens_rl.offline.show.perfetto import write_trace
    from lens_rl.store import span_files

    run = tmp_path / "run"
    run.mkdir()

    def header(group: str, pid: int) -> dict[str, Any]:
        return {"v": 2, "header": True, "resource": {"rl.worker_group": group, "nv.dl.rank": 0, "process.pid": pid}}

    def span(name: str, span_id: int, start: int, end: int, parent: int | None = None, **more: Any) -> dict[str, Any]:
        return {
            "n": name,
            "t": "a" * 32,
            "s": f"{span_id:016x}",
            "p": None if parent is None else f"{parent:016x}",
            "b": at_ns(start),
            "e": at_ns(end),
            **more,
        }

    files = {
        "spans-driver-0-1.jsonl": [header("driver", 1), span("step", 1, 100, 900)],
        "spans-gen-0-2.jsonl": [
            header("gen", 2),
            span("generate", 2, 200, 500, parent=1, pr=True),
            span("fetch", 3, 300, 400, parent=2, k="CLIENT"),
            header("gen_again", 2),
            span("orphan", 4, 600, 700, parent=99),
        ],
        "spans-rollout-0-3.jsonl": [
            header("rollout", 3),
            span("score", 5, 250, 260, parent=2, pr=True),
            span("serve", 6, 310, 390, parent=3, k="SERVER", pr=True),
        ],
    }
    for name, lines in files.items():
        (run / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    paths = span_files(run)
    for fmt in ("json", "pftrace"):
        outputs = []
        for jobs in (1, 2):
            out = tmp_path / f"t{jobs}.{fmt}"
            assert write_trace(paths, out, jobs=jobs) == 6
            outputs.append(out.read_bytes())
        assert outputs[0] == outputs[1]
    events = json.loads((tmp_path / "t1.json").read_text())["traceEvents"]
    pid_of = {e["args"]["name"].split(" rank")[0]: e["pid"] for e in events if e.get("name") == "process_name"}
    assert set(pid_of) == {"driver", "gen", "gen_again", "rollout"}
    slices = {e["name"]: e for e in events if e["ph"] == "X"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    arrows = set()
    for end in (e for e in events if e["ph"] == "f" and e["id"] in starts):
        begin = starts[end["id"]]
        caller = min(
            (
                s
                for s in slices.values()
                if (s["pid"], s["tid"]) == (begin["pid"], begin["tid"])
                and s["ts"] <= begin["ts"] <= s["ts"] + s["dur"]
                and s["pid"] != end["pid"]
            ),
            key=lambda s: s["dur"],
        )  # the innermost slice there
        callee = next(
            s for s in slices.values() if (s["pid"], s["tid"], s["ts"]) == (end["pid"], end["tid"], end["ts"])
        )
        arrows.add((caller["name"], callee["name"]))
    assert arrows == {("step", "generate"), ("generate", "score"), ("fetch", "serve")}
    trace = Trace()
    trace.ParseFromString(outputs[1])
    begun = [f for p in trace.packet for f in p.track_event.flow_ids]
    ended = [f for p in trace.packet for f in p.track_event.terminating_flow_ids]
    assert len(begun) == 3 and set(begun) <= set(ended) and len(set(ended)) == len(ended) == 3  # (no orphan's)


def test_flow_ids_are_unique_whatever_the_span_ids(tmp_path: Path) -> None:
    """Each call has its own flow id, even for span ids a 32-bit hash maps alike (these two do, under
    CRC-32): in a run of millions of calls, a hash of the span id would link some callers to the wrong
    callee."""
    from lens_rl.offline.show.perfetto import write_trace
    from lens_rl.store import span_files

    run = tmp_path / "run"
    run.mkdir()
    calls = {
        "spans-gen-0-2.jsonl": ("gen", 2, "000000000008ddf9"),
        "spans-gen-1-3.jsonl": ("gen", 3, "0000000002008894"),
    }
    driver = {"v": 2, "header": True, "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0, "process.pid": 1}}
    step = {"n": "step", "t": "a" * 32, "s": "d" * 16, "b": at_ns(100), "e": at_ns(900)}
    (run / "spans-driver-0-1.jsonl").write_text(json.dumps(driver) + "\n" + json.dumps(step) + "\n")
    for name, (group, pid, span_id) in calls.items():
        header = {
            "v": 2,
            "header": True,
            "resource": {"rl.worker_group": group, "nv.dl.rank": pid - 2, "process.pid": pid},
        }
        callee = {
            "n": f"work{pid}",
            "t": "a" * 32,
            "s": span_id,
            "p": "d" * 16,
            "pr": True,
            "b": at_ns(100 * pid),
            "e": at_ns(100 * pid + 50),
        }
        (run / name).write_text(json.dumps(header) + "\n" + json.dumps(callee) + "\n")
    write_trace(span_files(run), tmp_path / "t.json", jobs=1)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    starts = {e["id"]: e["ts"] for e in events if e["ph"] == "s"}
    ends = {e["id"]: e["ts"] for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == 2 and starts == ends  # each caller end at its own callee's start


def test_json_times_count_from_the_earliest_header_else_from_the_first_start(tmp_path: Path) -> None:
    """The Chrome JSON's times count from the earliest header's ``since`` (read from the files' first lines);
    a file without one has its starts read, and a span starting before its header's bound (a clock set
    back) makes every start read: no time is ever negative."""
    from lens_rl.offline.show.perfetto import write_trace
    from lens_rl.store import span_files

    def store(name: str, since: int | None, first: int) -> list[Path]:
        run = tmp_path / name
        run.mkdir()
        header = {"v": 2, "header": True, "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0, "process.pid": 1}}
        if since is not None:
            header["since"] = at_ns(since)
        late = {"n": "late", "t": "a" * 32, "s": "2" * 16, "b": at_ns(5_000), "e": at_ns(6_000)}
        early = {**late, "n": "early", "s": "1" * 16, "b": at_ns(first), "e": at_ns(first + 10)}
        (run / "spans-driver-0-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (header, late, early)))
        worker = {"v": 2, "header": True, "resource": {"rl.worker_group": "w", "nv.dl.rank": 0, "process.pid": 9}}
        old = {"n": "old", "t": "a" * 32, "s": "3" * 16, "b": at_ns(4_000), "e": at_ns(4_500)}
        (run / "spans-w-0-9.jsonl").write_text(json.dumps(worker) + "\n" + json.dumps(old) + "\n")  # (no since)
        return span_files(run)

    def times(paths: list[Path]) -> dict[str, float]:
        write_trace(paths, tmp_path / "t.json", jobs=1)
        events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
        return {e["name"]: e["ts"] for e in events if e["ph"] == "X"}

    assert times(store("bounded", 1_000, 3_000)) == {"late": 4.0, "early": 2.0, "old": 3.0}
    assert times(store("unbounded", None, 3_000)) == {"late": 2.0, "early": 0.0, "old": 1.0}
    assert times(store("set_back", 1_000, 500)) == {"late": 4.5, "early": 0.0, "old": 3.5}


def test_protobuf_annotations_keep_each_attribute_type(tmp_path: Path) -> None:
    """A slice's debug annotations keep its attributes' types (bool, int, float, text; past 64 bits or a
    list as text); the bucket is the category; a span of no length is a zero-length slice."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    from lens_rl.offline.show.perfetto import write_trace
    from lens_rl.store import span_files

    run = tmp_path / "run"
    run.mkdir()
    header = {"v": 2, "header": True, "resource": {"rl.worker_group": "driver", "nv.dl.rank": 0, "process.pid": 1}}
    attrs = {"rl.bucket": "idle", "flag": True, "n": 3, "x": 1.5, "big": 2**70, "l": [1, 2], "s": "text"}
    line = {"n": "odd", "t": "a" * 32, "s": "1" * 16, "b": at_ns(500), "e": at_ns(500), "a": attrs}
    (run / "spans-driver-0-1.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(line) + "\n")
    write_trace(span_files(run), tmp_path / "t.pftrace", jobs=1)
    trace = Trace()
    trace.ParseFromString((tmp_path / "t.pftrace").read_bytes())
    events = [p for p in trace.packet if p.HasField("track_event")]
    begin = next(p for p in events if p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN)
    end = next(p for p in events if p.track_event.type == TrackEvent.TYPE_SLICE_END)
    assert begin.timestamp == end.timestamp == at_ns(500) and list(begin.track_event.categories) == ["idle"]
    notes = {a.name: getattr(a, a.WhichOneof("value")) for a in begin.track_event.debug_annotations}
    assert notes == {"flag": True, "n": 3, "x": 1.5, "big": str(2**70), "l": "[1,2]", "s": "text", "span_id": "1" * 16}


def test_calls_are_told_from_orphans_without_another_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call is a span whose line marks its parent as remote ("pr"): a span whose local parent was never
    written (its process killed mid-span) is no call and sends nobody looking for its parent in the other
    files; a call from another worker still gets its arrow."""
    from lens_rl.offline.show import perfetto
    from lens_rl.offline.show.perfetto import write_trace
    from lens_rl.store import span_files

    run = tmp_path / "run"
    run.mkdir()

    def header(group: str, pid: int) -> str:
        resource = {"rl.worker_group": group, "nv.dl.rank": 0, "process.pid": pid}
        return json.dumps({"v": 2, "header": True, "resource": resource, "since": 0, "remote_parents": True})

    def span(name: str, span_id: int, start: int, parent: int | None = None, remote: bool = False) -> str:
        line = {"n": name, "t": "a" * 32, "s": f"{span_id:016x}", "b": at_ns(start), "e": at_ns(start + 50)}
        if parent is not None:
            line.update({"p": f"{parent:016x}", **({"pr": True} if remote else {})})
        return json.dumps(line)

    files = {
        "spans-driver-0-1.jsonl": [header("driver", 1), span("step", 1, 100)],
        "spans-gen-0-2.jsonl": [header("gen", 2), span("generate", 2, 120, 1, True), span("orphan", 3, 300, 99)],
        "spans-rollout-0-3.jsonl": [header("rollout", 3), span("score", 4, 130, 2, True)],
    }
    for name, lines in files.items():
        (run / name).write_text("\n".join(lines) + "\n")
    searched: list[frozenset[str]] = []
    real_locate = perfetto.locate_file
    monkeypatch.setattr(
        perfetto, "locate_file", lambda path, opts: searched.append(opts.wanted) or real_locate(path, opts)
    )
    write_trace(span_files(run), tmp_path / "t.json", jobs=1)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {(e["pid"], e["ts"]): e["name"] for e in events if e["ph"] == "X"}
    ends = sorted(names[(e["pid"], e["ts"])] for e in events if e["ph"] == "f")
    assert ends == ["generate", "score"] and len([e for e in events if e["ph"] == "s"]) == 2
    assert searched and all(wanted == {f"{2:016x}"} for wanted in searched)  # the worker's caller alone, not 99


def test_processes_are_named_with_their_attempt_after_a_restart(tmp_path: Path) -> None:
    """In the Chrome JSON, a process of a later attempt is named with it (two drivers of one job, one per
    attempt, stay apart); the first attempt's processes keep the plain name."""
    from lens_rl.offline.show.perfetto import write_trace
    from lens_rl.store import span_files
    from tests.stores import span, write_process

    run = tmp_path / "r"
    write_process(run, "driver", 0, 7, [span("step", 0, 1, "a", step=0)], **{"rl.attempt": 0})
    write_process(run, "driver", 0, 8, [span("step", 5, 6, "b", step=0)], since_s=5, **{"rl.attempt": 1})
    write_trace(span_files(run), tmp_path / "t.json", jobs=1)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = sorted(e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name")
    assert names == ["driver rank 0 (pid 7)", "driver rank 0 (pid 8, attempt 1)"]
