"""A grown file's protobuf trace from the one an earlier look drew: the new spans' slices after each thread's
kept ones. A thread's slices are written sorted by (start, -end, index), each on the lane the ones before it
left free (:func:`~.proto.assign_lanes`), so where every new span of a thread sorts after its kept ones, the
kept slices keep their bytes and lanes, and the new ones go on from the kept lanes' stacks; new lanes' tracks
follow the kept ones, a new thread's part comes first (threads are written last met first). A new span that
sorts before a kept one (a parent written after its children started earlier than they did) makes the file
drawn again whole. Byte for byte :func:`~.proto.proto_events`' trace.

Example::

    drawn = proto_more(rows, places, kept, head, sections, spans)   # None: draw the file whole
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from lens_rl.offline.run.perfetto import Places, Rows
from lens_rl.offline.show.perfetto.proto import (
    SliceSlot,
    assign_lanes,
    by_thread,
    lane_tracks,
    proto_module,
    slices,
    thread_names,
    tracks_packet,
)

__all__ = ["Section", "proto_more"]


class Section(NamedTuple):
    """A thread's part of a file's trace: its (pid, tid), the bytes of its further lanes' descriptors and of
    its slices, its lanes' stacks of open end times, and the (start, -end, index) of its last slice."""

    pid: int
    tid: int
    lanes: int
    slices: int
    stacks: list[list[int]]
    last: tuple[int, int, int]


def proto_more(
    rows: Rows, places: Places, kept: bytes, head: int, sections: Sequence[Any], first: int
) -> tuple[bytes, int, list[Section]] | None:
    """The trace of a file whose earlier rows drew ``kept`` (its first ``head`` bytes the tracks' descriptors,
    then ``sections``' parts in order; ``places`` as that walk left it, ``first`` rows walked) with ``rows``
    after them: its bytes, its descriptors' length and its sections; None where a new span sorts before a
    kept one of its thread."""
    pb = proto_module()
    threads = by_thread(rows, places, first)
    old = {(s.pid, s.tid): s for s in sections}
    for key, order in threads.items():
        was = old.get(key)
        if was is not None and min(order)[:3] <= tuple(was.last):
            return None
    if not threads and not sections:
        return b"", 0, []
    tracks = tracks_packet(pb, places)
    called = places.callees()
    names = thread_names(places)
    shapes: dict[tuple[Any, ...], SliceSlot] = {}
    at, where = head, {}
    for s in sections:
        where[(s.pid, s.tid)] = at
        at += s.lanes + s.slices
    # written last met first: the new threads, then the kept ones in the order they were written
    written = [key for key in reversed(threads) if key not in old] + [(s.pid, s.tid) for s in sections]
    pieces, out, parts = [tracks], list[bytes](), []
    for pid, tid in written:
        was, spans = old.get((pid, tid)), threads.get((pid, tid))
        if was is None:
            descriptors, drawn, stacks, last = b"", b"", [], (0, 0, 0)
        else:
            at = where[(pid, tid)]
            descriptors, drawn = kept[at : at + was.lanes], kept[at + was.lanes : at + was.lanes + was.slices]
            stacks, last = [list(stack) for stack in was.stacks], tuple(was.last)
        if spans:
            known = len(stacks)
            lanes = assign_lanes(spans, stacks)
            track_ids = lane_tracks(pb, pid, tid, len(stacks) - 1, names[(pid, tid)], out, max(known, 1))
            descriptors += b"".join(out)
            out.clear()
            full: list[bytes] = []  # (what slices hands on every SLICE slices, then the rest in ``out``)
            slices(pb, spans, lanes, track_ids, called, shapes, out, full.append)
            drawn += b"".join(full) + b"".join(out)
            out.clear()
            last = spans[-1][:3]
        pieces.append(descriptors + drawn)
        parts.append(Section(pid, tid, len(descriptors), len(drawn), stacks, last))  # type: ignore[arg-type]
    return b"".join(pieces), len(tracks), parts
