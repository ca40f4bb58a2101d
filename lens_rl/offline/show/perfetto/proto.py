"""Perfetto's native protobuf trace, built with the ``perfetto`` package's trace protos (the ``analysis``
extra; no hand-written wire encoder).

Each span is a slice: a begin and an end packet on its thread's track, a thread's slices written in
(start, -end) order, each on its lane: Perfetto's trace processor sorts a trace's packets by time, keeping
the file's order at equal times, and an end closes its track's innermost open slice, so parents open before
their children and close after them. Concurrent tasks on one thread get lanes of their own. Each slice is
serialized on its own, as a Trace of its two packets (Traces concatenated are one Trace), from a slot per
shape whose fixed fields were set once: no message built per packet.

Example::

    proto_events(rows, places, out.write)
"""

from __future__ import annotations

import functools
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from lens_rl._errors import require
from lens_rl.offline.run.perfetto import INT64_END, Places, Rows
from lens_rl.offline.show.perfetto.places import NO_ATTRS, SLICE, category, dumps, process_name

__all__ = [
    "Slot",
    "assign_lanes",
    "by_thread",
    "lane_tracks",
    "proto_events",
    "proto_module",
    "slices",
    "template",
    "thread_names",
    "tracks_packet",
    "uuid_of",
]


def proto_module() -> Any:
    return require("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "analysis", "writing .pftrace")


@functools.lru_cache(maxsize=65536)
def uuid_of(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode()) | (zlib.adler32(repr(parts).encode()) << 32)


def _annotate(note: Any, value: Any) -> None:
    if isinstance(value, bool):
        note.bool_value = value
    elif isinstance(value, int) and -INT64_END <= value < INT64_END:
        note.int_value = value
    elif isinstance(value, float):
        note.double_value = value
    else:
        note.string_value = value if isinstance(value, str) else dumps(value).decode()


def assign_lanes(spans: list[tuple[Any, ...]], lanes: list[list[int]] | None = None) -> list[int]:
    """Sorts ``spans``, (start, -end, index, ...) of one thread's slices (the index unique), and returns
    each one's lane in that order, so that slices on one lane nest properly (concurrent tasks on one
    thread overlap). In that order a parent comes before its children. ``lanes``: per lane, the stack of
    open end times, as the thread's earlier slices left it (kept up to date)."""
    lanes = [] if lanes is None else lanes
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


def by_thread(rows: Rows, places: Places, first: int = 0) -> dict[tuple[int, int], list[tuple[Any, ...]]]:
    """Per thread (in the order met), (start, -end, index, name, attributes, span id) of each of its rows'
    slices (what the packets need, not the rows); ``first``: the index of the first row."""
    threads: dict[tuple[int, int], list[tuple[Any, ...]]] = defaultdict(list)
    for i, (pid, tid, start, end, row) in enumerate(places.walk(rows), first):
        threads[(pid, tid)].append((start, -end, i, row.n, row.a, row.s))
    return threads


def proto_events(rows: Rows, places: Places, write: Callable[[bytes], Any]) -> None:
    """The trace of ``rows`` (placed by ``places``) as protobuf bytes, handed to ``write`` in pieces: the
    process and thread tracks, then each thread's slices (see the module docstring)."""
    pb = proto_module()
    threads = by_thread(rows, places)
    if not threads:
        return
    write(tracks_packet(pb, places))  # concatenated Traces are one Trace (a repeated field)
    called = places.callees()
    # a slot per track, name, category, flow end and attribute keys: its fixed fields set once, a span's own
    # values (and the flow it ends) set in place and the slot serialized
    shapes: dict[tuple[Any, ...], SliceSlot] = {}
    out: list[bytes] = []
    names = thread_names(places)
    while threads:  # (emptied as it goes: its lists are a tuple per span)
        (pid, tid), order = threads.popitem()
        lanes = assign_lanes(order)
        tracks = lane_tracks(pb, pid, tid, max(lanes), names[(pid, tid)], out)
        slices(pb, order, lanes, tracks, called, shapes, out, write)
        del order, lanes
    write(b"".join(out))


def thread_names(places: Places) -> dict[tuple[int, int], str]:
    """Each thread's name by (pid, tid)."""
    return {(pid, tid): places.names[(pid, thread)] for (pid, thread), tid in places.threads.items()}


def tracks_packet(pb: Any, places: Places) -> bytes:
    """The process and thread tracks' descriptors, serialized as one Trace."""
    return bytes(pb.Trace(packet=_tracks(pb, places)).SerializeToString())


def _tracks(pb: Any, places: Places) -> list[Any]:
    """A track descriptor per process and per thread."""
    pids = sorted(set(places.pid_of.values()))
    packets = [
        _descriptor(
            pb,
            uuid=uuid_of("p", pid),
            process=pb.ProcessDescriptor(pid=pid, process_name=process_name(places.opts, pid)),
        )
        for pid in pids
    ]
    for (pid, tid), name in thread_names(places).items():
        packets.append(
            _descriptor(
                pb,
                uuid=uuid_of("t", pid, tid),
                parent_uuid=uuid_of("p", pid),
                thread=pb.ThreadDescriptor(pid=pid, tid=pid * 10_000 + tid, thread_name=name),
            )
        )
    return packets


def lane_tracks(pb: Any, pid: int, tid: int, last: int, name: str, out: list[bytes], first: int = 1) -> list[int]:
    """The tracks of a thread's lanes 0 to ``last`` (0: the thread's own), the descriptor of each lane from
    ``first`` on appended to ``out``."""
    tracks = [uuid_of("t", pid, tid)]
    for lane in range(1, last + 1):
        tracks.append(uuid_of("l", pid, tid, lane))
        if lane < first:
            continue
        descriptor = _descriptor(pb, uuid=tracks[lane], parent_uuid=tracks[0], name=f"{name} (concurrent {lane})")
        out.append(pb.Trace(packet=[descriptor]).SerializeToString())
    return tracks


def slices(
    pb: Any,
    order: list[tuple[Any, ...]],
    lanes: list[int],
    tracks: list[int],
    called: Mapping[Any, Any],
    shapes: dict[tuple[Any, ...], SliceSlot],
    out: list[bytes],
    write: Callable[[bytes], Any],
) -> None:
    """One thread's slices (``order``, on ``lanes``), each serialized from its shape's slot into ``out``,
    which is handed to ``write`` every :data:`SLICE` slices."""
    keep = out.append
    for (start, neg_end, _, span_name, attrs, span_id), lane in zip(order, lanes, strict=True):  # (names are text)
        track = tracks[lane]
        attrs = attrs or NO_ATTRS
        cat = category(attrs)
        call = called.get(span_id)  # a call from another process: the slice ends its flow
        shape = (track, span_name, cat, call is None, *attrs)
        slot = shapes.get(shape)
        if slot is None:
            if len(shapes) >= _SLOTS_MAX:
                shapes.clear()
            slot = shapes[shape] = SliceSlot(pb, track, span_name, cat, attrs, call is not None)
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
        if len(out) >= SLICE:
            write(b"".join(out))
            out.clear()


_SLOTS_MAX = 4096  # slice slots kept per file (a slot per span would be a message per span)


class Slot:
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


class SliceSlot(Slot):
    """A slice of one shape (track, name, category, whether it ends a flow, attribute keys), filled per
    span: its begin packet, then its end packet (``closing``), serialized together."""

    __slots__ = ("notes", "span_id", "closing")

    def __init__(
        self, pb: Any, track: int, name: str | None, category: str, attrs: Mapping[str, Any], with_flow: bool
    ) -> None:
        super().__init__(
            pb, template(pb, track, pb.TrackEvent.TYPE_SLICE_BEGIN, name, category), "terminating_flow_ids", with_flow
        )
        self.closing = self.trace.packet.add()
        self.closing.MergeFromString(template(pb, track, pb.TrackEvent.TYPE_SLICE_END))
        notes = self.packet.track_event.debug_annotations
        # one annotation per attribute, in the span's order (none for rl.bucket), then the span id
        self.notes = [None if key == "rl.bucket" else notes.add(name=key) for key in attrs]
        self.span_id = notes.add(name="span_id")


def template(pb: Any, track: int, kind: int, name: str | None = None, category: str | None = None) -> bytes:
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
