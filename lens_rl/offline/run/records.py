"""The refresh cache's records as typed data: one declared schema per kind of record (msgspec ``Struct``s
encoded as MessagePack, :mod:`~lens_rl.offline.run.record_codec`). An entry file's records
(:class:`EntryRec`, :class:`DeltaRec`: both end in a file's :class:`StateRec`), the memo's
(:class:`MemoRec`, :class:`MemoDeltaRec`) and the read's counts (:class:`StatsRec`) are here; the parts they
carry are :mod:`~lens_rl.offline.run.part_schema`'s, converted by :mod:`~lens_rl.offline.run.part_records`.
This module (with those) is the cache's format: a new figure of a part is a field of its schema and a line of
its conversion, and :data:`~lens_rl.offline.run.disk.FORMAT` is not the layout of a class.

Decoding validates as it goes: a record of another shape or version (its tag), cut short, or claiming more
than its bytes hold is a :class:`msgspec.DecodeError`; arrays that do not add up are a ``ValueError``
(raised as a record is converted). Nothing read can run code.

Example::

    data = encode(part_record(part))
    assert part_from(decode(data, PartRec)) == part
"""

from __future__ import annotations

from typing import Any

import msgspec

from lens_rl.offline.run.part_records import UnreadSteps, part_from, part_record
from lens_rl.offline.run.part_schema import PartRec
from lens_rl.offline.run.record_codec import (
    UNENCODABLE,
    VERSION,
    Column,
    Id,
    Raw,
    Rec,
    Scalar,
    array_of,
    decode,
    encode,
    raw,
)
from lens_rl.store import ReadStats

__all__ = [
    "UNENCODABLE",
    "VERSION",
    "DeltaRec",
    "EntryRec",
    "MemoDeltaRec",
    "MemoRec",
    "PartRec",
    "StateRec",
    "StatsRec",
    "UnreadSteps",
    "array_of",
    "decode",
    "encode",
    "part_from",
    "part_record",
    "raw",
    "stats_from",
    "stats_record",
]


class StatsRec(Rec):
    """A :class:`~lens_rl.store.ReadStats`."""

    files: int
    lines: int
    skipped: int
    duplicates: int
    notes: list[str]
    cache_hits: int
    cache_notes: list[str]
    cache_reads: list[tuple[str, str | None, str | None, int | None]]


class StateRec(Rec):
    """A span file's state as a look left it (an entry's, and each delta's after it): its token, where the
    read stopped, the file's size and times then, the bytes of a line cut short at the end, the header dicts
    spans are under (and the one open at the end), the held lines' (offset, size, head) triples, the counts."""

    token: str | None
    end: int
    size: int
    mtime_ns: int
    ctime_ns: int
    tail: bytes
    heads: list[dict[str, Any]]
    head_at_end: int | None
    held: Raw
    stats: StatsRec


class EntryRec(Rec, tag=f"entry/{VERSION}"):
    """A whole cache entry (:class:`~lens_rl.offline.run.cache_files.Entry`): the first record of its file:
    the options and file it was made for, its state, its settled parts and their spans' ids (sorted)."""

    options: str
    identity: tuple[int, int, str]
    state: StateRec
    settled: list[PartRec]
    ids: Column


class DeltaRec(Rec, tag=f"delta/{VERSION}"):
    """What one look added to the entry whose token was ``parent``: the entry's state after it, the parts it
    settled and their ids (new ones)."""

    parent: str | None
    state: StateRec
    parts: list[PartRec]
    ids: list[Id]


def stats_record(stats: ReadStats) -> StatsRec:
    return StatsRec(
        stats.files,
        stats.lines,
        stats.skipped,
        stats.duplicates,
        list(stats.notes),
        stats.cache_hits,
        list(stats.cache_notes),
        [tuple(r) for r in stats.cache_reads],  # type: ignore[misc]
    )


def stats_from(rec: StatsRec) -> ReadStats:
    return ReadStats(
        rec.files,
        rec.lines,
        rec.skipped,
        rec.duplicates,
        rec.notes,
        rec.cache_hits,
        rec.cache_notes,
        list(rec.cache_reads),
    )


# ------------------------------------------------------------------------------------------- the memo


class MemoRec(msgspec.Struct, gc=False, tag=f"memo/{VERSION}"):
    """The critical path's memo whole (:mod:`~lens_rl.offline.run.memo_file`): the cache key it was made
    under, the tokens of the entries it was made from, its stretch keys, its per-step records and sums."""

    key: str
    tokens: dict[str, str | None]
    keys: list[list[Scalar]]
    records: list[list[Any]]
    sums: dict[int, list[int]] | None


class MemoDeltaRec(msgspec.Struct, gc=False, tag=f"memo-delta/{VERSION}"):
    """What one look added to the memo made from the tokens ``parent``."""

    parent: dict[str, str | None]
    tokens: dict[str, str | None]
    keys_from: int
    keys: list[list[Scalar]]
    records: list[list[Any]]
    dropped: list[tuple[str, str]]
    sums: dict[int, list[int]] | None
