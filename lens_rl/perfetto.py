"""Perfetto traces from the file store: Chrome trace-event JSON, or Perfetto's native protobuf.

One process per worker group and rank (named ``"<group> rank <r> (pid <p>)"``, the
driver first), one track per thread (named as the thread was: ``MainThread``,
``ThreadPoolExecutor-0_1``), one slice per span with its attributes, coloured by bucket
(Chrome JSON: ``cname`` productive ``good``, overhead ``yellow``, idle ``grey``, wasted
``terrible``, unbucketed ``generic_work``; both: the bucket as the category), and a
flow arrow from a span to each child that ran in another process (a driver's call into
a worker). ``steps=(A, B)`` and ``group=G`` cut a window, so a month-long run opens
as a readable slice.

It streams: each file's events are written as it is read (files in parallel with
``jobs``), so memory is O(jobs x the largest file), in one pass over the lines: the
processes are named from each file's first line, and the Chrome JSON's times count from
the earliest header's ``since`` (when that process's telemetry started; a file without
one has its starts read first; the protobuf's times are absolute). A call from another
process is a span whose line marks its parent as remote (``"pr"``; in an earlier writer's
file, a span whose parent is not in the file). Its caller end is joined in the parent
from the callers' locations: every span of a driver's file and every client or producer
span; a call whose caller is none of those (a worker calling another) is located by one
more pass over the other files, for those spans only. The protobuf is built with the
``perfetto`` package's trace protos (the ``analysis`` extra); no hand-written wire encoder.

Example::

    write_trace(span_files("lens_traces/run42"), "trace.pftrace")     # or trace.json
"""

from __future__ import annotations

import dataclasses
import functools
import io
import itertools
import json
import os
import shutil
import tempfile
import zlib
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lens_rl.store import INT64_END, Row, decode_skim, iter_rows, process_of, read_head, to_row, trace_time_ns

__all__ = ["BUCKET_COLORS", "FORMATS", "format_of", "to_chrome_trace", "write_trace"]

BUCKET_COLORS = {"productive": "good", "overhead": "yellow", "idle": "grey", "wasted": "terrible", None: "generic_work"}
_EXTRA = "pip install 'lens-rl[analysis]'"


def _dumps(value: Any) -> bytes:
    """One compact JSON value (orjson, from the analysis extra, when installed); what JSON lacks as text."""
    if _orjson is not None:
        try:
            return bytes(_orjson.dumps(value, default=str))
        except TypeError:  # an integer past 64 bits, which orjson does not write: the standard library does
            pass
    return json.dumps(value, separators=(",", ":"), default=str).encode()


_orjson: Any
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - where the extra is missing
    _orjson = None


_NO_ATTRS: dict[str, Any] = {}


@dataclass
class Scan:
    """What a first look learns of one file: its processes and, read whole, its first start."""

    keys: set[tuple[str, int, int]] = field(default_factory=set)
    origin: int | None = None
    marked: bool = False  # its header says its lines mark a parent from another process ("pr")


@dataclass
class Options:
    """What writing one file's events needs."""

    fmt: str  # "json" or "pftrace"
    processes: dict[tuple[str, int, int], int]
    origin: int
    steps: tuple[int, int] | None = None
    group: str | None = None
    spill: str | None = None  # a directory: a file's events go to a file there, not back through a pipe
    wanted: frozenset[str] = frozenset()  # locating: the span ids (as text) whose locations are sought
    numbers: dict[str, int] = field(default_factory=dict)  # each file's number (its path as given), for flow ids
    marked: frozenset[str] = frozenset()  # the files (paths as given) whose lines mark remote parents ("pr")


@dataclass
class Chunk:
    """One file's rendered events (bytes, or a spilled file), and the ends of cross-process calls seen in it."""

    data: bytes = b""
    path: str | None = None
    spans: int = 0
    #: spans other files may call into, per thread (pid, tid): their ids (as text), starts and ends
    locations: dict[tuple[int, int], tuple[list[str], array[int], array[int]]] = field(default_factory=dict)
    callees: Calls = field(default_factory=lambda: Calls())  # the spans called from another file
    unknown: bool = False  # a process not in ``Options.processes`` was met: its events are not numbered right
    first: int = INT64_END  # the first start met (a JSON time before ``Options.origin`` would be negative)


Rows = Iterable[tuple[Mapping[str, Any], Row]]  # (resource, row), as store.iter_rows yields


@dataclass
class Calls:
    """Calls from another process, as columns (no object per call to send and receive): each callee's
    flow id, its caller's span id (as text) and its start."""

    flows: array[int] = field(default_factory=lambda: array("Q"))
    callers: list[str] = field(default_factory=list)
    starts: array[int] = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.callers)


def scan_rows(rows: Rows) -> Scan:
    scan = Scan()
    origin = INT64_END
    last: Any = None
    for resource, row in rows:
        if resource is not last:
            last = resource
            scan.keys.add(process_of({"resource": resource}))
        start = row.b
        if type(start) is not int or not 0 <= start < INT64_END:
            start = trace_time_ns(start)
        if start < origin:
            origin = start
    scan.origin = origin if origin < INT64_END else None
    return scan


def scan_file(path: str | os.PathLike[str]) -> Scan:
    return scan_rows(iter_rows(path, decode=decode_skim))


def head_file(path: str | os.PathLike[str]) -> Scan:
    """What a file's first lines tell: its process (a v2 header's, else the first span's), as ``origin``
    the header's ``since`` (no span of the file starts before it; None where the header has none), and
    whether its lines mark remote parents."""
    header, _ = read_head(path)
    if header is not None:
        resource, since = header.get("resource"), header.get("since")
        bound = since if type(since) is int and 0 <= since < INT64_END else None
        marked = header.get("remote_parents") is True
        return Scan({process_of({"resource": resource if type(resource) is dict else {}})}, bound, marked)
    for resource, _ in iter_rows(path, decode=decode_skim):  # a v1 file (or a header-less one)
        return Scan({process_of({"resource": resource})})
    return Scan()


def _steps_of(rows: Sequence[tuple[Mapping[str, Any], Row]]) -> dict[Any, Any]:
    """span id -> its step (own rl.step, else the nearest ancestor's in the same file)."""
    own = {row.s: (row.a or _NO_ATTRS).get("rl.step") for _, row in rows}
    parent = {row.s: row.p for _, row in rows}
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


def render_rows(rows: Sequence[tuple[Mapping[str, Any], Row]], opts: Options, callers: bool = True,
                number: int = 0, marked: bool = False) -> Chunk:  # fmt: skip
    """Events of one file's rows in ``opts.fmt`` (``callers``: locate all its spans; ``marked``: its lines
    mark remote parents, see :class:`_Places`; ``number``: the file's, unique in the run, for flow ids)."""
    if opts.steps is not None:
        steps = _steps_of(rows)
        lo, hi = opts.steps
        rows = [r for r in rows if isinstance(steps.get(r[1].s), int) and lo <= steps[r[1].s] <= hi]
    return _render(rows, opts, callers, number, marked)


def _render(rows: Rows, opts: Options, callers: bool, number: int, marked: bool) -> Chunk:
    chunk = Chunk()
    if opts.group is not None:
        group = opts.group
        rows = (r for r in rows if process_of({"resource": r[0]})[0] == group)
    render = _json_events if opts.fmt == "json" else _proto_events
    places = _Places(opts, chunk, callers, number, marked)
    if opts.spill is None:
        sink: Any = io.BytesIO()
        render(rows, places, sink.write)
        chunk.data = sink.getvalue()
    else:
        with tempfile.NamedTemporaryFile("wb", dir=opts.spill, suffix=".part", delete=False) as sink:
            chunk.path = sink.name
            render(rows, places, sink.write)
    return chunk


def _calls_out(path: str | os.PathLike[str]) -> bool:
    """Whether a file is a caller's: a driver's (it calls into the workers), located whole."""
    return Path(path).name.startswith("spans-driver-")


def render_file(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """One file's events. Chrome JSON streams (memory flat however large the file); the protobuf keeps
    what its packets need of each span (nested lanes), a ``steps`` window the whole rows (each
    span's step from its ancestors)."""
    number, marked = opts.numbers.get(str(path), 0), str(path) in opts.marked
    if opts.steps is None:
        return _render(iter_rows(path), opts, _calls_out(path), number, marked)
    return render_rows(list(iter_rows(path)), opts, _calls_out(path), number, marked)


def locate_file(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """The locations of the spans ``opts.wanted`` names in one file (no events)."""
    chunk = Chunk()
    for _ in _Places(opts, chunk, False, 0, str(path) in opts.marked).walk(iter_rows(path)):
        pass
    chunk.spans, chunk.callees = 0, Calls()
    return chunk


#: Span kinds whose spans call out (OpenTelemetry's): located wherever they are.
_CALLER_KINDS = frozenset({"CLIENT", "PRODUCER"})


class _Places:
    """Where each row goes: its process (pid) and thread (tid, named), and the ends of calls across files.

    :meth:`walk` yields ``(pid, tid, start, end, row)`` per row, recording the locations of
    the spans that may be called from another file (every span with ``callers``, else the
    client and producer spans and those ``opts.wanted`` names) and, as candidates, the
    spans with a parent from another process: in a ``marked`` file those whose line says
    so ("pr"); in an earlier writer's file every span with a parent, the call known at
    the end (:meth:`callees`) when the parent is not in the file (rows are read once, in
    file order: a file's spans are written as they end, children before their parents).
    A span whose parent was never written (a process killed mid-span) then passes for a
    call, whose caller the parent seeks in every other file.
    """

    def __init__(self, opts: Options, chunk: Chunk, callers: bool, number: int, marked: bool) -> None:
        self.opts, self.chunk, self.callers, self.marked = opts, chunk, callers, marked
        self.flows = number << 32  # a call's flow id: its file's number, then its own in the file
        self.pid_of: dict[int, int] = {}  # per resource object (v2: one per file)
        self.threads: dict[tuple[int, Any], int] = {}
        self.names: dict[tuple[int, Any], str] = {}
        self.ids: set[Any] = set()
        #: (span id, parent id, pid, tid, start) of each span with a parent
        self.calls: list[tuple[Any, Any, int, int, int]] = []

    def pid(self, resource: Mapping[str, Any]) -> int:
        pid = self.pid_of.get(id(resource))
        if pid is None:
            pid = self.opts.processes.get(process_of({"resource": resource}))
            if pid is None:  # (a re-init under another identity, past the file's first line)
                self.chunk.unknown, pid = True, len(self.opts.processes) + 1
            self.pid_of[id(resource)] = pid
        return pid

    def tid(self, pid: int, row: Row) -> int:
        thread = row.th or "main"
        tid = self.threads.get((pid, thread))
        if tid is None:
            tid = self.threads[(pid, thread)] = sum(1 for t in self.threads if t[0] == pid) + 1
            self.names[(pid, thread)] = row.tn or f"thread {thread}"
        return tid

    def walk(self, rows: Rows) -> Iterator[tuple[int, int, int, int, Row]]:
        """``(pid, tid, start, end, row)`` for each row (the hot loops' source); counts the chunk's spans."""
        wanted, kinds, everyone, unmarked = self.opts.wanted, _CALLER_KINDS, self.callers, not self.marked
        locations, call, add_id = self.chunk.locations, self.calls.append, self.ids.add
        here: Any = None  # the current thread's locations: ids, starts, ends
        resource_now: Any = None
        thread_now: Any = None
        pid = tid = spans = 0
        first = INT64_END
        for resource, row in rows:  # rows come in runs of one process and thread
            if resource is not resource_now:
                pid, resource_now, thread_now = self.pid(resource), resource, None
            thread = row.th
            if thread != thread_now or thread is None:
                tid, thread_now = self.tid(pid, row), thread
                here = locations.get((pid, tid))
            start = row.b or 0
            end = row.e or start
            if type(start) is not int or type(end) is not int or not (0 <= start < INT64_END and 0 <= end < INT64_END):
                start, end = trace_time_ns(start), trace_time_ns(end)
            if end < start:
                end = start
            if start < first:
                first = start
            span_id = row.s
            if unmarked:  # (its parents are told apart at the end, by the file's ids)
                add_id(span_id)
            if everyone or row.k in kinds or (wanted and str(span_id) in wanted):
                if here is None:
                    here = locations[(pid, tid)] = ([], array("q"), array("q"))
                here[0].append(str(span_id))
                here[1].append(start)
                here[2].append(end)
            if row.p is not None and (row.pr or unmarked):
                call((span_id, row.p, pid, tid, start))
            spans += 1
            yield pid, tid, start, end, row
        self.chunk.spans, self.chunk.first = spans, first  # (the reader yields each span id once)

    def callees(self) -> dict[Any, tuple[int, int, int, int]]:
        """Once every row is walked: child span id -> (flow id, pid, tid, start) for each span called from
        another process (also recorded in the chunk, for the caller's end of the arrow)."""
        out = {}
        ids, calls = self.ids, self.chunk.callees
        flows, callers, starts = calls.flows.append, calls.callers.append, calls.starts.append
        flow, marked = self.flows, self.marked
        for span_id, parent_id, pid, tid, start in self.calls:
            if marked or parent_id not in ids:
                flow += 1  # (unique in the run, and under 2**53: exact as a JSON number)
                out[span_id] = (flow, pid, tid, start)
                flows(flow)
                callers(str(parent_id))
                starts(start)
        return out


def _category(attrs: Mapping[str, Any]) -> str:
    """A slice's category: its bucket (any text), else ``phase``."""
    bucket = attrs.get("rl.bucket")
    return bucket if type(bucket) is str and bucket else "phase"


def _process_name(opts: Options, pid: int) -> str:
    group, rank, os_pid = next((k for k, v in opts.processes.items() if v == pid), ("?", 0, 0))  # (?: see Chunk.unknown)
    return f"{group} rank {rank} (pid {os_pid})"


_SLICE = 20_000  # events (or packets) encoded at a time: memory stays flat however large the file


def _json_events(rows: Rows, places: _Places, write: Callable[[bytes], Any]) -> None:
    opts = places.opts
    events: list[dict[str, Any]] = []
    append = events.append
    origin = opts.origin
    colors = BUCKET_COLORS
    for pid, tid, start, end, row in places.walk(rows):
        args = row.a
        if args is None:
            args = {}
        category = _category(args)
        args["trace_id"] = row.t
        args["span_id"] = row.s
        args["parent_span_id"] = row.p
        args["status"] = "UNSET" if row.st is None else row.st
        ts = (start - origin) / 1000.0
        append({"ph": "X", "name": row.n, "cat": category, "pid": pid, "tid": tid, "ts": ts,
                "dur": (end - start) / 1000.0, "cname": colors.get(category, "generic_work"), "args": args})  # fmt: skip
        if len(events) >= _SLICE:
            write(_event_lines(events))
            events.clear()
    for flow, pid, tid, start in places.callees().values():  # the callee ends of calls from other processes
        append({"ph": "f", "bp": "e", "id": flow, "name": "call", "cat": "flow", "pid": pid, "tid": tid,
                "ts": (start - origin) / 1000.0})  # fmt: skip
    for pid in sorted(set(places.pid_of.values())):
        append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": _process_name(opts, pid)}})
        append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for key, tid in places.threads.items():
        append({"ph": "M", "name": "thread_name", "pid": key[0], "tid": tid, "args": {"name": places.names[key]}})
    write(_event_lines(events))


def _event_lines(events: list[dict[str, Any]]) -> bytes:
    """Events as the comma-terminated members of the traceEvents array (one dumps call)."""
    if not events:
        return b""
    return _dumps(events)[1:-1] + b",\n"


def _proto_module() -> Any:
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError as exc:
        raise ImportError(f"writing .pftrace needs the perfetto package: {_EXTRA}") from exc
    return perfetto_trace_pb2


@functools.lru_cache(maxsize=65536)
def _uuid(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode()) | (zlib.adler32(repr(parts).encode()) << 32)


def _annotate(note: Any, value: Any) -> None:
    if isinstance(value, bool):
        note.bool_value = value
    elif isinstance(value, int) and -INT64_END <= value < INT64_END:
        note.int_value = value
    elif isinstance(value, float):
        note.double_value = value
    else:
        note.string_value = value if isinstance(value, str) else _dumps(value).decode()


def _lanes(spans: list[tuple[Any, ...]]) -> list[int]:
    """Sorts ``spans``, (start, -end, index, ...) of one thread's slices (the index unique), and returns
    each one's lane in that order, so that slices on one lane nest properly (concurrent tasks on one
    thread overlap). In that order a parent comes before its children.
    """
    lanes: list[list[int]] = []  # per lane, a stack of open end times
    out: list[int] = []
    keep = out.append
    spans.sort()
    for span in spans:
        start, end = span[0], -span[1]
        for number, stack in enumerate(lanes):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                keep(number)
                break
        else:
            keep(len(lanes))
            lanes.append([end])
    return out


def _descriptor(pb: Any, **fields: Any) -> Any:
    return pb.TracePacket(track_descriptor=pb.TrackDescriptor(**fields))


def _proto_events(rows: Rows, places: _Places, write: Callable[[bytes], Any]) -> None:
    pb = _proto_module()
    opts = places.opts
    # per thread, (start, -end, index, name, attributes, span id): what the packets need, not the rows
    by_thread: dict[tuple[int, int], list[tuple[int, int, int, Any, Any, Any]]] = defaultdict(list)
    for i, (pid, tid, start, end, row) in enumerate(places.walk(rows)):
        by_thread[(pid, tid)].append((start, -end, i, row.n, row.a, row.s))
    if not by_thread:
        return
    called = places.callees()
    threads, names, pids = places.threads, places.names, sorted(set(places.pid_of.values()))
    packets = [_descriptor(pb, uuid=_uuid("p", pid), process=pb.ProcessDescriptor(pid=pid, process_name=_process_name(opts, pid)))
               for pid in pids]  # fmt: skip
    thread_names = {(pid, tid): names[(pid, thread)] for (pid, thread), tid in threads.items()}
    for (pid, tid), name in thread_names.items():
        packets.append(_descriptor(pb, uuid=_uuid("t", pid, tid), parent_uuid=_uuid("p", pid),
                                   thread=pb.ThreadDescriptor(pid=pid, tid=pid * 10_000 + tid, thread_name=name)))  # fmt: skip
    write(pb.Trace(packet=packets).SerializeToString())  # concatenated Traces are one Trace (a repeated field)
    # Slices: a begin and an end packet each, a thread's slices in (start, -end) order, each on its lane:
    # Perfetto sorts a trace's packets by time, keeping the file's order at equal times, and an end closes
    # its track's innermost open slice, so parents open before their children and close after them.
    # Each slice is serialized on its own, as a Trace of its two packets (Traces concatenated are one
    # Trace): a slot per track, name, category, flow end and attribute keys holds them, their fixed
    # fields set once; a span's own values (and the flow it ends) are set in place and the slot serialized.
    shapes: dict[tuple[Any, ...], _SliceSlot] = {}
    out: list[bytes] = []
    keep = out.append
    while by_thread:  # (emptied as it goes: its lists are a tuple per span)
        (pid, tid), order = by_thread.popitem()
        lanes = _lanes(order)
        tracks = [_uuid("t", pid, tid)]
        for lane in range(1, max(lanes) + 1):
            tracks.append(_uuid("l", pid, tid, lane))
            keep(pb.Trace(packet=[_descriptor(pb, uuid=tracks[lane], parent_uuid=tracks[0],
                                              name=f"{thread_names[(pid, tid)]} (concurrent {lane})")]).SerializeToString())  # fmt: skip
        for (start, neg_end, _, span_name, attrs, span_id), lane in zip(order, lanes, strict=True):  # (names are text)
            track = tracks[lane]
            attrs = attrs or _NO_ATTRS
            category = _category(attrs)
            call = called.get(span_id)  # a call from another process: the slice ends its flow
            shape = (track, span_name, category, call is None, *attrs)
            slot = shapes.get(shape)
            if slot is None:
                if len(shapes) >= _SLOTS_MAX:
                    shapes.clear()
                slot = shapes[shape] = _SliceSlot(pb, track, span_name, category, attrs, call is not None)
            slot.packet.timestamp = start
            slot.closing.timestamp = -neg_end
            for note, value in zip(slot.notes, attrs.values(), strict=True):  # the shape fixes the keys
                if note is None:  # rl.bucket: the category
                    continue
                if type(value) is int and -INT64_END <= value < INT64_END:
                    note.int_value = value
                elif type(value) is str:
                    note.string_value = value
                else:
                    _annotate(note, value)
            slot.span_id.string_value = str(span_id)
            if call is not None:
                slot.flows[0] = call[0]
            keep(slot.serialize())
            if len(out) >= _SLICE:
                write(b"".join(out))
                out.clear()
        del order, lanes
    write(b"".join(out))


_SLOTS_MAX = 4096  # slice slots kept per file (a slot per span would be a message per span)


class _Slot:
    """A Trace of one packet, its fixed fields from ``template`` (set once): a packet's own values are set
    in ``packet`` and ``serialize()`` gives the Trace's bytes. ``flows``: the packet's flow ids, begun
    (an instant's) or ended (a slice's); a slot made ``with_flow`` holds one, set per packet in
    ``flows[0]``."""

    __slots__ = ("serialize", "packet", "flows", "trace")

    def __init__(self, pb: Any, template: bytes, flows: str, with_flow: bool) -> None:
        self.trace = pb.Trace()
        self.packet = self.trace.packet.add()
        self.packet.MergeFromString(template)
        # (Partial: the same bytes without walking the message for required fields, which it has none
        # of: ~0.4 us of the ~1.2 a slice's serialization costs)
        self.serialize: Callable[[], bytes] = self.trace.SerializePartialToString
        self.flows = getattr(self.packet.track_event, flows)
        if with_flow:
            self.flows.append(0)


class _SliceSlot(_Slot):
    """A slice of one shape (track, name, category, whether it ends a flow, attribute keys), filled per
    span: its begin packet, then its end packet (``closing``), serialized together."""

    __slots__ = ("notes", "span_id", "closing")

    def __init__(self, pb: Any, track: int, name: str | None, category: str, attrs: Mapping[str, Any],
                 with_flow: bool) -> None:  # fmt: skip
        super().__init__(pb, _template(pb, track, pb.TrackEvent.TYPE_SLICE_BEGIN, name, category),
                         "terminating_flow_ids", with_flow)  # fmt: skip
        self.closing = self.trace.packet.add()
        self.closing.MergeFromString(_template(pb, track, pb.TrackEvent.TYPE_SLICE_END))
        notes = self.packet.track_event.debug_annotations
        # one annotation per attribute, in the span's order (none for rl.bucket), then the span id
        self.notes = [None if key == "rl.bucket" else notes.add(name=key) for key in attrs]
        self.span_id = notes.add(name="span_id")


def _template(pb: Any, track: int, kind: int, name: str | None = None, category: str | None = None) -> bytes:
    """A slice packet's fixed fields, serialized: its sequence, track and type (a begin's name and category)."""
    packet = pb.TracePacket(trusted_packet_sequence_id=1)
    event = packet.track_event
    event.track_uuid = track
    event.type = kind
    if name is not None:
        event.name = name
    if category is not None:
        event.categories.append(category)
    return bytes(packet.SerializeToString())


class _Flows:
    """Joins callees to their callers' locations as files arrive, writing the caller ends as they are met.

    Files with callers come first (the driver's), so nearly every callee resolves at once:
    what is kept is the callers' locations (spans other files call into), not every callee,
    each made ready to write when it arrives (a JSON event's fixed text, a protobuf
    packet's slot), so the parent's one thread does little per call.
    """

    def __init__(self, fmt: str, origin: int, write: Callable[[bytes], Any]) -> None:
        self.fmt, self.origin, self.write = fmt, origin, write
        self.callers: dict[str, tuple[Any, int, int]] = {}  # span id -> (what its events start with, start, end)
        self.pending = Calls()  # callees whose caller was not met yet
        self._prefixes: dict[tuple[int, int], Any] = {}  # per caller thread

    def _prefix(self, pid: int, tid: int) -> Any:
        prefix = self._prefixes.get((pid, tid))
        if prefix is None:
            if self.fmt == "json":
                prefix = f'{{"ph":"s","name":"call","cat":"flow","pid":{pid},"tid":{tid},"id":'
            else:  # a slot for the instant (see _proto_events): each call's flow id is set in place
                pb = _proto_module()
                prefix = _Slot(pb, _template(pb, _uuid("t", pid, tid), pb.TrackEvent.TYPE_INSTANT, "call"), "flow_ids", True)
            self._prefixes[(pid, tid)] = prefix
        return prefix

    def add(self, chunk: Chunk) -> None:
        """Record a chunk's callers, and write the caller end of each call whose caller is known by now."""
        for (pid, tid), (ids, starts, ends) in chunk.locations.items():
            located = zip(itertools.repeat(self._prefix(pid, tid)), starts, ends)  # (ends with the starts)
            self.callers.update(zip(ids, located, strict=True))
        waiting = self.pending
        if chunk.locations and waiting:  # (the newly known callers may be theirs)
            self.pending = Calls()
        self._join(chunk.callees, self.pending)
        if waiting is not self.pending:
            self._join(waiting, self.pending)

    def _join(self, calls: Calls, pending: Calls) -> None:
        out: list[Any] = []  # JSON: text; the protobuf: bytes
        keep = out.append
        json_out = self.fmt == "json"
        write = (lambda: self.write("".join(out).encode())) if json_out else (lambda: self.write(b"".join(out)))
        origin = self.origin
        for flow, caller, start, span_id in zip(calls.flows, map(self.callers.get, calls.callers), calls.starts,
                                                calls.callers, strict=True):  # fmt: skip
            if caller is None:
                pending.flows.append(flow)
                pending.callers.append(span_id)
                pending.starts.append(start)
                continue
            prefix, lo, hi = caller
            at = lo if start < lo else hi if start > hi else start  # the moment, within the caller's slice
            if json_out:
                keep(f'{prefix}{flow},"ts":{(at - origin) / 1000.0!r}}},\n')
            else:
                prefix.packet.timestamp = at
                prefix.flows[0] = flow
                keep(prefix.serialize())
            if len(out) >= _SLICE:
                write()
                out.clear()
        if out:
            write()


def _options(scans: Iterable[Scan], fmt: str, steps: tuple[int, int] | None, group: str | None,
             paths: Sequence[Path] = (), marked: frozenset[str] = frozenset()) -> Options:  # fmt: skip
    keys: set[tuple[str, int, int]] = set()
    origins = []
    for scan in scans:
        keys |= scan.keys
        if scan.origin is not None:
            origins.append(scan.origin)
    processes = {key: i + 1 for i, key in enumerate(sorted(keys, key=lambda k: (k[0] != "driver", k)))}
    numbers = {str(path): i + 1 for i, path in enumerate(paths)}
    return Options(fmt, processes, min(origins, default=0), steps, group, numbers=numbers, marked=marked)


#: Output extensions and the format each writes.
FORMATS = {".json": "Chrome trace-event JSON", ".pftrace": "Perfetto protobuf", ".perfetto-trace": "Perfetto protobuf",
           ".pb": "Perfetto protobuf"}  # fmt: skip


def format_of(output: str | os.PathLike[str]) -> str | None:
    """``json`` or ``pftrace`` by the output's extension (:data:`FORMATS`); None for any other."""
    name = str(output).lower()
    if name.endswith(".json"):
        return "json"
    return "pftrace" if name.endswith((".pftrace", ".perfetto-trace", ".pb")) else None


def _append_file(path: str, out: Any) -> None:
    """Append the file at ``path`` to ``out``: copied inside the kernel where it can be
    (``copy_file_range``: no pass through this process's memory), else read and written."""
    with open(path, "rb") as part:
        out.flush()
        try:
            while os.copy_file_range(part.fileno(), out.fileno(), 1 << 30):
                pass
            return
        except (AttributeError, OSError):  # no such call here, or not between these files: copy the rest ourselves
            pass  # (the kernel moved both files' offsets past what it copied)
        shutil.copyfileobj(part, out, 1 << 20)


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
    if fmt is None:
        raise ValueError(f"{str(output)!r}: no trace format has that extension; allowed: {', '.join(FORMATS)}")
    if fmt == "pftrace":
        _proto_module()  # fail before any work when the extra is missing
    parallel: dict[str, Any] = {"jobs": jobs, "use_ray": use_ray, "ray_address": ray_address}
    with no_gc():  # (the parent too builds millions of acyclic objects: the callers' locations, the calls)
        heads = [head_file(path) for path in paths]  # the processes, when each file's spans may start, its marks
        marked = frozenset(str(path) for path, head in zip(paths, heads, strict=True) if head.marked)
        scans = list(heads)
        if fmt == "json":  # its times count from the run's first start: where a header does not bound it, read
            unbounded = [path for path, head in zip(paths, heads, strict=True) if head.origin is None]
            scans += map_files(scan_file, unbounded, **parallel, desc="perfetto: first starts")
        spans = _write(paths, output, _options(scans, fmt, steps, group, paths, marked), parallel)
        if spans < 0:  # a process past a file's first line (a re-init under another identity), or a span
            # starting before its header's bound (the clock set back): the processes and the origin from every line
            scans = list(map_files(scan_file, paths, **parallel, desc="perfetto: first starts"))
            spans = _write(paths, output, _options(scans, fmt, steps, group, paths, marked), parallel)
    return spans


def _write(paths: Sequence[Path], output: str | os.PathLike[str], opts: Options, parallel: dict[str, Any]) -> int:
    """The events of every file, then the caller ends of calls across processes; the spans written, or
    -1 when a file met a process ``opts`` does not number, or (JSON) a start before ``opts.origin``
    (the output is then incomplete)."""
    from lens_rl.analysis import map_files

    spans = 0
    # callers first (the driver's files), so callees resolve as they arrive
    ordered = sorted(paths, key=lambda p: not _calls_out(p))
    with open(output, "wb") as out, tempfile.TemporaryDirectory(dir=Path(output).parent, prefix=".lens-parts-") as spill:
        if not parallel["use_ray"]:  # local workers write their events next to the output; a Ray task sends them back
            opts.spill = spill
        if opts.fmt == "json":
            out.write(b'{"displayTimeUnit":"ms","otherData":{"source":"lens_rl"},"traceEvents":[\n')
        flows = _Flows(opts.fmt, opts.origin, out.write)
        for chunk in map_files(render_file, ordered, opts, **parallel, desc="perfetto"):
            if chunk.path is not None:
                _append_file(chunk.path, out)
                os.unlink(chunk.path)
            out.write(chunk.data)
            if chunk.unknown or (opts.fmt == "json" and chunk.first < opts.origin):
                return -1
            spans += chunk.spans
            flows.add(chunk)
        wanted = frozenset(flows.pending.callers)
        others = [path for path in ordered if not _calls_out(path)]
        if wanted and others:  # calls whose caller is neither a driver's span nor a client: one pass locates them
            located = dataclasses.replace(opts, wanted=wanted, spill=None)
            for chunk in map_files(locate_file, others, located, **parallel, desc="perfetto: callers"):
                flows.add(chunk)
        if opts.fmt == "json":
            out.write(b'{"ph":"M","name":"trace_end","pid":0,"tid":0,"args":{}}\n]}\n')
    return spans


def to_chrome_trace(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``{"traceEvents": [...]}`` document for these span records, in memory (small runs, tests)."""
    by_process: dict[tuple[str, int, int], list[tuple[Mapping[str, Any], Row]]] = defaultdict(list)
    for rec in records:
        row = to_row(rec)
        row.a = dict(row.a) if row.a else None  # the events' args are made from it: the caller's records stay as given
        by_process[process_of(rec)].append((rec.get("resource") or {}, row))
    groups = [by_process[k] for k in sorted(by_process)]
    opts = _options((scan_rows(g) for g in groups), "json", None, None)
    chunks = [render_rows(g, opts, True, i + 1) for i, g in enumerate(groups)]  # (callers located wherever they are)
    out = io.BytesIO()
    flows = _Flows("json", opts.origin, out.write)
    for chunk in chunks:
        out.write(chunk.data)
        flows.add(chunk)
    data = out.getvalue()
    return {"traceEvents": json.loads(b"[" + data.rstrip().rstrip(b",") + b"]"), "displayTimeUnit": "ms",
            "otherData": {"source": "lens_rl"}}  # fmt: skip
