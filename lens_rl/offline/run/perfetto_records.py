"""The declared schema of Perfetto's entries in the refresh cache: one file's rendered events and what drawing
them learnt (:class:`ChunkRec`, a :class:`~lens_rl.offline.run.perfetto.Chunk` field by field), and, where a
grown file's new lines can be drawn after them (no ``--steps`` window), where its read stopped and
what its :class:`~lens_rl.offline.run.perfetto.Places` held (:class:`GoOnRec`). Typed data (msgspec ``Struct``
in MessagePack, arrays as raw little-endian buffers: :mod:`~lens_rl.offline.run.record_codec`), validated as it
is decoded; nothing read can run code.

Example::

    rec = chunk_record(chunk)
    chunk = chunk_from(decode(encode(rec), ChunkRec))
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

from lens_rl.offline.run.disk import read_kept, write_atomic
from lens_rl.offline.run.kept import seal_line, unsealed
from lens_rl.offline.run.perfetto import Calls, Chunk, Places
from lens_rl.offline.run.record_codec import UNENCODABLE, Column, Id, Raw, Rec, Scalar, array_of, decode, encode, raw

__all__ = [
    "ChunkRec",
    "EntryRec",
    "GoOnRec",
    "ScanRec",
    "SectionRec",
    "chunk_from",
    "chunk_record",
    "places_from",
    "places_record",
]


class LocRec(Rec):
    """One thread's located spans: (pid, tid), their ids (as text), starts and ends."""

    pid: int
    tid: int
    ids: list[str]
    starts: Raw
    ends: Raw


class ChunkRec(Rec):
    """A :class:`~lens_rl.offline.run.perfetto.Chunk` (its events in ``data``)."""

    data: bytes
    spans: int
    first: int
    last: int
    unknown: bool
    locations: list[LocRec]
    flows: Raw
    callers: list[str]
    starts: Raw


class ThreadRec(Rec):
    """A thread :class:`~lens_rl.offline.run.perfetto.Places` numbered: its process, name as written, number
    and name as drawn."""

    pid: int
    thread: Scalar
    tid: int
    name: str


class SectionRec(Rec):
    """A thread's part of a file's protobuf trace (:class:`~lens_rl.offline.show.perfetto.proto.Section`)."""

    pid: int
    tid: int
    lanes: int
    slices: int
    stacks: list[list[int]]
    last: tuple[int, int, int]


class GoOnRec(Rec):
    """What drawing a grown file's new lines after the events kept needs: where the read stopped (``end``,
    the hash of the bytes before it, the header in effect there), the ids of the spans drawn (sorted: a
    repeat is skipped), the bytes of the span events (the first ``body`` of the chunk's; the protobuf: its
    tracks' descriptors) and of the callee ends after them (``called``; the protobuf: 0), the places' state (the processes and threads met, the calls from other processes in order)."""

    end: int
    tail: bytes
    head: dict[str, Any]
    ids: Column
    body: int
    called: int
    pids: list[int]
    threads: list[ThreadRec]
    call_ids: list[Id]
    call_parents: list[Id]
    call_pids: Raw
    call_tids: Raw
    call_starts: Raw
    sections: list[SectionRec] | None  # the protobuf's threads' parts, in the order written (JSON: None)


class EntryRec(Rec):
    """One file's entry: the key of the options that drew it, the file's identity and state (size, mtime,
    ctime) when it was drawn, its chunk, and how to go on (None: a grown file is drawn again whole)."""

    key: str
    identity: tuple[int, int, str]
    size: int
    mtime_ns: int
    ctime_ns: int
    chunk: ChunkRec
    go_on: GoOnRec | None


class ScanRec(Rec):
    """One file's first look read from every line (:class:`~lens_rl.offline.run.perfetto.Scan`: its processes,
    first start, whether it is the driver's), with where that read stopped (``end``, the hash of the bytes
    before it, the header in effect there) and the ids of the spans it met (sorted), under the cache's key and
    the file's identity and state."""

    key: str
    identity: tuple[int, int, str]
    size: int
    mtime_ns: int
    ctime_ns: int
    end: int
    tail: bytes
    head: dict[str, Any] | None
    ids: Column
    keys: list[tuple[str, int, int, int, bool]]
    origin: int | None
    driver: bool


def chunk_record(chunk: Chunk, data: bytes) -> ChunkRec:
    """``chunk`` (its events ``data``) as its record."""
    locations = [
        LocRec(pid, tid, ids, raw(starts, "q"), raw(ends, "q"))
        for (pid, tid), (ids, starts, ends) in chunk.locations.items()
    ]
    calls = chunk.callees
    return ChunkRec(
        data,
        chunk.spans,
        chunk.first,
        chunk.last,
        chunk.unknown,
        locations,
        raw(calls.flows, "Q"),
        list(calls.callers),
        raw(calls.starts, "q"),
    )


def _columns(*arrays: array) -> None:
    """ValueError where columns meant to lie side by side do not."""
    if len({len(a) for a in arrays}) > 1:
        raise ValueError("columns that do not add up")


def chunk_from(rec: ChunkRec) -> Chunk:
    """The chunk ``rec`` records, its events in ``data`` (ValueError: columns that do not add up)."""
    chunk = Chunk(data=rec.data, spans=rec.spans, unknown=rec.unknown, first=rec.first, last=rec.last)
    for loc in rec.locations:
        starts, ends = array_of("q", loc.starts), array_of("q", loc.ends)
        _columns(starts, ends, array("q", bytes(8 * len(loc.ids))))
        chunk.locations[(loc.pid, loc.tid)] = (list(loc.ids), starts, ends)
    calls = Calls(array_of("Q", rec.flows), list(rec.callers), array_of("q", rec.starts))
    _columns(calls.flows, calls.starts, array("q", bytes(8 * len(calls.callers))))
    chunk.callees = calls
    return chunk


def places_record(places: Places) -> dict[str, Any]:
    """The fields of a :class:`GoOnRec` that ``places`` (every row walked) holds."""
    calls = places.calls
    return {
        "pids": sorted(set(places.pid_of.values())),
        "threads": [
            ThreadRec(pid, thread, tid, places.names[(pid, thread)]) for (pid, thread), tid in places.threads.items()
        ],
        "call_ids": [c[0] for c in calls],
        "call_parents": [c[1] for c in calls],
        "call_pids": raw(array("q", [c[2] for c in calls]), "q"),
        "call_tids": raw(array("q", [c[3] for c in calls]), "q"),
        "call_starts": raw(array("q", [c[4] for c in calls]), "q"),
    }


def places_from(rec: GoOnRec, places: Places) -> None:
    """``places`` (new) as the walk ``rec`` records left it (ValueError: columns that do not add up)."""
    pids, tids, starts = array_of("q", rec.call_pids), array_of("q", rec.call_tids), array_of("q", rec.call_starts)
    _columns(pids, tids, starts, array("q", bytes(8 * len(rec.call_ids))), array("q", bytes(8 * len(rec.call_parents))))
    for n, pid in enumerate(rec.pids):  # (keys no header object's id can be: each walk's headers are met anew)
        places.pid_of[-1 - n] = pid
    for t in rec.threads:
        places.threads[(t.pid, t.thread)] = t.tid
        places.names[(t.pid, t.thread)] = t.name
    places.calls = list(zip(rec.call_ids, rec.call_parents, pids, tids, starts, strict=True))


def load_sealed(where: Path, magic: bytes, kind: type[Rec], identity: tuple[Any, ...]) -> tuple[Any, str | None]:
    """The record of type ``kind`` at ``where`` under ``magic`` (a line naming its family and schema
    version), sealed by this user, for the file of ``identity``; else None and why, where that is worth a
    line (None: none kept, or another file under the name). Its ``key`` is for the caller to check."""
    data, why = read_kept(where)
    if data is None:
        return None, why
    if not data.startswith(magic):
        family = magic[: magic.index(b"/") + 1]
        return None, "of another lens_rl version" if data.startswith(family) else "not a lens_rl cache"
    body = unsealed(memoryview(data)[len(magic) :])
    if body is None:
        return None, "not sealed by this user's lens_rl"
    try:
        rec = decode(body, kind)
    except Exception as exc:  # sealed by this user, yet not as this lens_rl writes it: never trusted
        return None, f"corrupt ({type(exc).__name__})"
    if tuple(rec.identity) != identity:
        return None, None  # another file under that name: read cold, quietly
    return rec, None


def save_sealed(where: Path, magic: bytes, rec: Rec) -> None:
    """Keep ``rec`` at ``where`` under ``magic``, sealed (nothing without the user's key, or for a value the
    schema cannot hold: the next look reads the file cold)."""
    try:
        data = encode(rec)
    except UNENCODABLE:
        return
    seal = seal_line(data)
    if seal is not None:
        write_atomic(where, (magic, seal, data))  # (in pieces: no copy of a file's events to join them)
