"""Perfetto traces from the file store: Chrome trace-event JSON, or Perfetto's native protobuf.

One process per worker group and rank (named ``"<group> rank <r> (pid <p>)"``, the
driver first), one track per thread (named as the thread was: ``MainThread``,
``ThreadPoolExecutor-0_1``), one slice per span with its attributes, coloured by bucket
(Chrome JSON: ``cname`` productive ``good``, overhead ``yellow``, idle ``grey``, wasted
``terrible``, unbucketed ``generic_work``; both: the bucket as the category), and a
flow arrow from a span to each child that ran in another process (a driver's call into
a worker). ``steps=(A, B)`` and ``group=G`` cut a window, so a month-long run opens
as a readable slice.

It streams: a first pass over the files collects each process's identity, the time
origin and the spans called from another process; a second pass writes each file's
events as it is read (files in parallel with ``jobs``), so memory is O(jobs x the
largest file). The protobuf is built with the ``perfetto`` package's trace protos
(the ``analysis`` extra); no hand-written wire encoder.

Example::

    write_trace(span_files("lens_traces/run42"), "trace.pftrace")     # or trace.json
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lens_rl.store import iter_file_records, process_of

__all__ = ["BUCKET_COLORS", "to_chrome_trace", "write_trace"]

BUCKET_COLORS = {"productive": "good", "overhead": "yellow", "idle": "grey", "wasted": "terrible", None: "generic_work"}
_EXTRA = "pip install 'lens-rl[analysis]'"


def _dumps(value: Any) -> bytes:
    """One compact JSON value (orjson, from the analysis extra, when installed)."""
    if _orjson is not None:
        return bytes(_orjson.dumps(value))
    return json.dumps(value, separators=(",", ":")).encode()


_orjson: Any
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - where the extra is missing
    _orjson = None


def _json_safe(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return str(value)


_NO_RESOURCE: dict[str, Any] = {}


def _flow_id(span_id: Any) -> int:
    return zlib.crc32(str(span_id).encode()) + 1


@dataclass
class Scan:
    """What the first pass learns of one file."""

    keys: set[tuple[str, int, int]] = field(default_factory=set)
    origin: int | None = None
    external: set[str] = field(default_factory=set)  # parent ids this file's spans point to, outside it


@dataclass
class Options:
    """What the second pass needs to write one file's events."""

    fmt: str  # "json" or "pftrace"
    processes: dict[tuple[str, int, int], int]
    origin: int
    wanted: frozenset[str]  # span ids some other file's span calls into
    steps: tuple[int, int] | None = None
    group: str | None = None


@dataclass
class Chunk:
    """One file's rendered events, and the ends of cross-process calls seen in it."""

    data: bytes = b""
    spans: int = 0
    locations: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # span id -> pid, tid, start, end
    callees: list[tuple[int, str, int, int, int]] = field(default_factory=list)  # flow id, parent id, pid, tid, start


def scan_records(records: Iterable[Mapping[str, Any]]) -> Scan:
    scan = Scan()
    ids: set[Any] = set()
    parents: set[Any] = set()
    for rec in records:
        scan.keys.add(process_of(rec))
        start = int(rec.get("start_ns") or 0)
        scan.origin = start if scan.origin is None else min(scan.origin, start)
        ids.add(rec.get("span_id"))
        if rec.get("parent_span_id"):
            parents.add(rec.get("parent_span_id"))
    scan.external = {str(p) for p in parents - ids}
    return scan


def scan_file(path: str | os.PathLike[str]) -> Scan:
    return scan_records(iter_file_records(path))


def _steps_of(records: Sequence[Mapping[str, Any]]) -> dict[Any, Any]:
    """span id -> its step (own rl.step, else the nearest ancestor's in the same file)."""
    own = {r.get("span_id"): (r.get("attributes") or {}).get("rl.step") for r in records}
    parent = {r.get("span_id"): r.get("parent_span_id") for r in records}
    out: dict[Any, Any] = {}
    for span_id in own:
        node, trail = span_id, []
        while node is not None and node not in out and own.get(node) is None and node in parent:
            trail.append(node)
            node = parent.get(node)
        step = out.get(node) if node in out else own.get(node)
        for item in trail:
            out[item] = step
        out[span_id] = step if own.get(span_id) is None else own[span_id]
    return out


def render_records(records: Sequence[Mapping[str, Any]], opts: Options) -> Chunk:
    """Events of one file's records in ``opts.fmt``."""
    chunk = Chunk()
    if opts.steps is not None:
        steps = _steps_of(records)
        lo, hi = opts.steps
        records = [r for r in records if isinstance(steps.get(r.get("span_id")), int)
                   and lo <= steps[r.get("span_id")] <= hi]  # fmt: skip
    if opts.group is not None:
        records = [r for r in records if process_of(r)[0] == opts.group]
    if not records:
        return chunk
    ids = {r.get("span_id") for r in records}
    threads: dict[tuple[int, Any], int] = {}
    names: dict[tuple[int, Any], str] = {}
    rows = []
    pid_of: dict[int, int] = {}  # per resource object (v2: one per file)
    for rec in records:
        resource = rec.get("resource") or _NO_RESOURCE
        pid = pid_of.get(id(resource))
        if pid is None:
            pid = pid_of[id(resource)] = opts.processes[process_of(rec)]
        thread = rec.get("thread") or "main"
        if (pid, thread) not in threads:
            threads[(pid, thread)] = len([t for t in threads if t[0] == pid]) + 1
            names[(pid, thread)] = rec.get("thread_name") or f"thread {thread}"
        tid = threads[(pid, thread)]
        start = int(rec.get("start_ns") or 0)
        end = max(int(rec.get("end_ns") or start), start)
        span_id = rec.get("span_id")
        parent_id = rec.get("parent_span_id")
        if span_id in opts.wanted:
            chunk.locations[str(span_id)] = (pid, tid, start, end)
        flow = _flow_id(span_id) if parent_id and parent_id not in ids else None
        if flow is not None:
            chunk.callees.append((flow, str(parent_id), pid, tid, start))
        rows.append((rec, pid, tid, start, end, flow))
    chunk.spans = len(rows)
    pids = sorted({pid for _, pid, *_ in rows})
    if opts.fmt == "json":
        chunk.data = _json_events(rows, threads, names, pids, opts)
    else:
        chunk.data = _proto_events(rows, threads, names, pids, opts)
    return chunk


def render_file(path: str | os.PathLike[str], opts: Options) -> Chunk:
    return render_records(list(iter_file_records(path)), opts)


def _process_name(opts: Options, pid: int) -> str:
    group, rank, os_pid = next(k for k, v in opts.processes.items() if v == pid)
    return f"{group} rank {rank} (pid {os_pid})"


def _json_events(rows: list[Any], threads: dict[Any, int], names: dict[Any, str], pids: list[int],
                 opts: Options) -> bytes:  # fmt: skip
    events: list[dict[str, Any]] = []
    for pid in pids:
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": _process_name(opts, pid)}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for key, tid in threads.items():
        events.append({"ph": "M", "name": "thread_name", "pid": key[0], "tid": tid, "args": {"name": names[key]}})
    for rec, pid, tid, start, end, flow in rows:
        attrs = rec.get("attributes") or {}
        bucket = attrs.get("rl.bucket")
        args = {k: _json_safe(v) for k, v in attrs.items()}
        args.update(trace_id=rec.get("trace_id"), span_id=rec.get("span_id"), parent_span_id=rec.get("parent_span_id"),
                    status=rec.get("status"))  # fmt: skip
        events.append({
            "ph": "X", "name": str(rec.get("name")), "cat": bucket or "phase", "pid": pid, "tid": tid,
            "ts": (start - opts.origin) / 1000.0, "dur": (end - start) / 1000.0,
            "cname": BUCKET_COLORS.get(bucket, "generic_work"), "args": args,
        })  # fmt: skip
        if flow is not None:
            events.append({"ph": "f", "bp": "e", "id": flow, "name": "call", "cat": "flow", "pid": pid, "tid": tid,
                           "ts": (start - opts.origin) / 1000.0})  # fmt: skip
    return b"".join(_dumps(e) + b",\n" for e in events)


def _proto_module() -> Any:
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError as exc:
        raise ImportError(f"writing .pftrace needs the perfetto package: {_EXTRA}") from exc
    return perfetto_trace_pb2


@functools.lru_cache(maxsize=65536)
def _uuid(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode()) | (zlib.adler32(repr(parts).encode()) << 32)


def _annotate(event: Any, key: str, value: Any) -> None:
    ann = event.debug_annotations.add(name=key)
    if isinstance(value, bool):
        ann.bool_value = value
    elif isinstance(value, int) and -(2**63) <= value < 2**63:
        ann.int_value = value
    elif isinstance(value, float):
        ann.double_value = value
    else:
        ann.string_value = str(value)


def _lanes(spans: list[tuple[int, int, int]]) -> dict[int, int]:
    """Row index -> lane, so that slices on one lane nest properly (concurrent tasks on one thread overlap)."""
    lanes: list[list[int]] = []  # per lane, a stack of open end times
    out: dict[int, int] = {}
    for start, end, index in sorted(spans, key=lambda s: (s[0], -s[1])):
        for number, stack in enumerate(lanes):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                out[index] = number
                break
        else:
            lanes.append([end])
            out[index] = len(lanes) - 1
    return out


def _proto_events(rows: list[Any], threads: dict[Any, int], names: dict[Any, str], pids: list[int],
                  opts: Options) -> bytes:  # fmt: skip
    pb = _proto_module()
    trace = pb.Trace()
    for pid in pids:
        packet = trace.packet.add()
        packet.track_descriptor.uuid = _uuid("p", pid)
        packet.track_descriptor.process.pid = pid
        packet.track_descriptor.process.process_name = _process_name(opts, pid)
    by_thread: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, (_, pid, tid, *_) in enumerate(rows):
        by_thread[(pid, tid)].append(index)
    lane_tracks: dict[tuple[int, int, int], int] = {}
    thread_names = {(pid, tid): names[(pid, thread)] for (pid, thread), tid in threads.items()}
    for (pid, thread), tid in threads.items():
        packet = trace.packet.add()
        packet.track_descriptor.uuid = _uuid("t", pid, tid)
        packet.track_descriptor.parent_uuid = _uuid("p", pid)
        packet.track_descriptor.thread.pid = pid
        packet.track_descriptor.thread.tid = pid * 10_000 + tid
        packet.track_descriptor.thread.thread_name = names[(pid, thread)]
    events: list[tuple[int, int, Any]] = []  # (time, order, packet fields)
    for (pid, tid), indexes in by_thread.items():
        lanes = _lanes([(rows[i][3], rows[i][4], i) for i in indexes])
        for i in indexes:
            rec, _, _, start, end, flow = rows[i]
            lane = lanes[i]
            track = _uuid("t", pid, tid)
            if lane:
                key = (pid, tid, lane)
                if key not in lane_tracks:
                    lane_tracks[key] = _uuid("l", pid, tid, lane)
                    packet = trace.packet.add()
                    packet.track_descriptor.uuid = lane_tracks[key]
                    packet.track_descriptor.parent_uuid = _uuid("t", pid, tid)
                    packet.track_descriptor.name = f"{thread_names[(pid, tid)]} (concurrent {lane})"
                track = lane_tracks[key]
            events.append((start, 1, (track, rec, flow, True)))
            events.append((end, 0, (track, rec, None, False)))
    for ts, _, (track, rec, flow, begin) in sorted(events, key=lambda e: (e[0], e[1])):
        packet = trace.packet.add()
        packet.timestamp = ts
        packet.trusted_packet_sequence_id = 1
        event = packet.track_event
        event.track_uuid = track
        if begin:
            attrs = rec.get("attributes") or {}
            event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
            event.name = str(rec.get("name"))
            event.categories.append(str(attrs.get("rl.bucket") or "phase"))
            for key, value in attrs.items():
                if key != "rl.bucket":  # it is the category
                    _annotate(event, key, value)
            _annotate(event, "span_id", rec.get("span_id"))
            if flow is not None:
                event.terminating_flow_ids.append(flow)
        else:
            event.type = pb.TrackEvent.TYPE_SLICE_END
    return bytes(trace.SerializeToString())


def _flow_starts(fmt: str, callees: list[tuple[int, str, int, int, int]],
                 locations: Mapping[str, tuple[int, int, int, int]], origin: int) -> bytes:  # fmt: skip
    """The caller ends of cross-process calls, once every file's locations are known."""
    found = [(flow, locations[parent], start) for flow, parent, _, _, start in callees if parent in locations]
    if fmt == "json":
        return b"".join(_dumps({"ph": "s", "id": flow, "name": "call", "cat": "flow", "pid": loc[0], "tid": loc[1],
                                "ts": (min(max(start, loc[2]), loc[3]) - origin) / 1000.0}) + b",\n"
                        for flow, loc, start in found)  # fmt: skip
    pb = _proto_module()
    trace = pb.Trace()
    for flow, loc, start in found:
        packet = trace.packet.add()
        packet.timestamp = min(max(start, loc[2]), loc[3])
        packet.trusted_packet_sequence_id = 1
        packet.track_event.type = pb.TrackEvent.TYPE_INSTANT
        packet.track_event.track_uuid = _uuid("t", loc[0], loc[1])
        packet.track_event.name = "call"
        packet.track_event.flow_ids.append(flow)
    return bytes(trace.SerializeToString())


def _options(scans: Iterable[Scan], fmt: str, steps: tuple[int, int] | None, group: str | None) -> Options:
    keys: set[tuple[str, int, int]] = set()
    origins = []
    wanted: set[str] = set()
    for scan in scans:
        keys |= scan.keys
        wanted |= scan.external
        if scan.origin is not None:
            origins.append(scan.origin)
    processes = {key: i + 1 for i, key in enumerate(sorted(keys, key=lambda k: (k[0] != "driver", k)))}
    return Options(fmt, processes, min(origins, default=0), frozenset(wanted), steps, group)


def format_of(output: str | os.PathLike[str]) -> str:
    """``pftrace`` for ``.pftrace`` / ``.perfetto-trace`` / ``.pb``, else ``json``."""
    return "pftrace" if str(output).endswith((".pftrace", ".perfetto-trace", ".pb")) else "json"


def write_trace(
    paths: Sequence[Path],
    output: str | os.PathLike[str],
    *,
    steps: tuple[int, int] | None = None,
    group: str | None = None,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
) -> int:
    """Write the trace of these span files to ``output`` (format by extension); returns the spans written."""
    from lens_rl.analysis import map_files, no_gc

    fmt = format_of(output)
    if fmt == "pftrace":
        _proto_module()  # fail before any work when the extra is missing
    parallel: dict[str, Any] = {"jobs": jobs, "use_ray": use_ray, "ray_address": ray_address}
    with no_gc():
        opts = _options(map_files(scan_file, paths, **parallel, desc="perfetto 1/2"), fmt, steps, group)
    spans = 0
    callees: list[tuple[int, str, int, int, int]] = []
    locations: dict[str, tuple[int, int, int, int]] = {}
    with open(output, "wb") as out:
        if fmt == "json":
            out.write(b'{"displayTimeUnit":"ms","otherData":{"source":"lens_rl"},"traceEvents":[\n')
        for chunk in map_files(render_file, paths, opts, **parallel, desc="perfetto 2/2"):
            out.write(chunk.data)
            spans += chunk.spans
            callees.extend(chunk.callees)
            locations.update(chunk.locations)
        out.write(_flow_starts(fmt, callees, locations, opts.origin))
        if fmt == "json":
            out.write(b'{"ph":"M","name":"trace_end","pid":0,"tid":0,"args":{}}\n]}\n')
    return spans


def to_chrome_trace(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``{"traceEvents": [...]}`` document for these span records, in memory (small runs, tests)."""
    by_process: dict[tuple[str, int, int], list[Mapping[str, Any]]] = defaultdict(list)
    for rec in records:
        by_process[process_of(rec)].append(rec)
    groups = [by_process[k] for k in sorted(by_process)]
    opts = _options((scan_records(g) for g in groups), "json", None, None)
    chunks = [render_records(g, opts) for g in groups]
    callees = [c for chunk in chunks for c in chunk.callees]
    locations = {k: v for chunk in chunks for k, v in chunk.locations.items()}
    data = b"".join(chunk.data for chunk in chunks) + _flow_starts("json", callees, locations, opts.origin)
    events = [json.loads(line.rstrip(b",")) for line in data.splitlines() if line.strip()]
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": "lens_rl"}}

