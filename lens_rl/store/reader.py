"""The file store's reader: a file's lines decoded into :class:`Row` s under their header's :class:`Head`.

Readers skip and count a truncated or garbage line (a killed process leaves at most one unfinished last
line) and a span id seen twice in one file (a batch retried after a partial write); a span line with no
name, or with a key of another JSON type than the format's (:data:`lens_rl.store.format.FIELD_TYPES`), is
garbage. A line is decoded into a Row by :mod:`lens_rl.store.rows`; a header into a Head by
:mod:`lens_rl.store.heads`. A file that does not start with a v2 header is skipped whole, with one note
naming it.

Example::

    stats = ReadStats()
    for head, row in iter_rows("lens_traces/run42/spans-driver-0-123.jsonl", stats):
        print(head.process.group, row.n, row.e - row.b)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from functools import partial
from itertools import compress, repeat
from pathlib import Path
from typing import IO, Any

from lens_rl.store.files import (
    LINE_MAX,
    UnreadableError,
    count_lines,
    first_line,
    listed,
    open_file,
    read_capped,
    rest_of_line,
    why_not,
)
from lens_rl.store.heads import HEADER_PREFIX, Head, driver_attempts, head_of, heads, later_head, read_head
from lens_rl.store.rows import (
    BAD_LINE,
    BAD_STEP,
    INT64_END,
    Row,
    decode_row,
    loads,
    plausible,
    time_ns,
    trace_time_ns,
)

# (the headers and the rows are read in lens_rl.store.heads and lens_rl.store.rows; their names stay importable
# from here)
__all__ = [
    "BAD_LINE",
    "CacheRead",
    "INT64_END",
    "HEADER_PREFIX",
    "Head",
    "ReadStats",
    "Row",
    "decode_row",
    "driver_attempts",
    "heads",
    "iter_rows",
    "loads",
    "not_a_store_file",
    "plausible",
    "read_head",
    "read_live",
    "RUN_ROWS",
    "scan",
    "scan_runs",
    "unseen",
    "span_files",
    "time_ns",
    "trace_time_ns",
]


#: one file's read through the refresh cache: (its entry's name, the entry's token before, after, the
#: earliest start of the spans it reduced afresh)
CacheRead = tuple[str, str | None, str | None, int | None]


@dataclasses.dataclass
class ReadStats:
    """What a read of the store found: files and lines read, lines skipped (truncated or garbage), duplicates,
    and notes for a reader (a file that is no store file, a driver file with no spans), one line each."""

    files: int = 0
    lines: int = 0
    skipped: int = 0
    duplicates: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)
    #: the refresh cache's doings (not part of any report): files answered from it, caches ignored and why
    cache_hits: int = 0
    cache_notes: list[str] = dataclasses.field(default_factory=list)
    #: per file read through the cache: (its entry's name, the entry's token before the read (None: none
    #: was used), after it, the earliest start (ns) of the spans it reduced afresh (None: none))
    cache_reads: list[CacheRead] = dataclasses.field(default_factory=list)

    def add(self, other: ReadStats) -> None:
        self.files += other.files
        self.lines += other.lines
        self.skipped += other.skipped
        self.duplicates += other.duplicates
        self.notes.extend(other.notes)
        self.cache_hits += other.cache_hits
        self.cache_notes.extend(other.cache_notes)
        self.cache_reads.extend(other.cache_reads)


def read_live(run_dir: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every heartbeat (``live-*.json``) of one run's folder, in a stable order, and notes on the files that
    are not (unreadable, not JSON, another format), one line each. Each heartbeat gains ``path`` and
    ``mtime_ns`` (its file's modification time). A heartbeat is rewritten whole by a rename: a reader sees the
    last one or the one before, never part of one."""
    from lens_rl.store.format import LIVE_FORMAT

    beats: list[dict[str, Any]] = []
    notes: list[str] = []
    for path in sorted(Path(run_dir).glob("live-*.json")):
        try:
            beat = loads(read_capped(path))
        except UnreadableError as exc:
            notes.append(f"{path.name}: {exc}; skipped")
            continue
        except OSError as exc:
            notes.append(f"{path.name}: {why_not(path, exc)}; skipped")
            continue
        except (ValueError, RecursionError):
            notes.append(f"{path.name}: not JSON; skipped")
            continue
        if type(beat) is not dict or beat.get("format") != LIVE_FORMAT:
            notes.append(f"{path.name}: not a lens_rl heartbeat ({LIVE_FORMAT}); skipped")
            continue
        beat["path"] = str(path)
        try:  # (when it was written by this machine's clock: a writer's clock can run ahead)
            beat["mtime_ns"] = path.stat().st_mtime_ns
        except OSError:
            beat["mtime_ns"] = None
        beats.append(beat)
    return beats, notes


def span_files(trace_dir: str | os.PathLike[str], notes: list[str] | None = None) -> list[Path]:
    """Every span file under ``trace_dir`` (any depth) that can be read, in a stable order; each entry named
    like one that cannot (a directory, a FIFO, a device, a dangling link or a link loop, no permission) is
    left out and named in one line of ``notes``."""
    return listed(trace_dir, "spans-*.jsonl", notes, recursive=True)


def iter_rows(path: str | os.PathLike[str], stats: ReadStats | None = None) -> Iterator[tuple[Head, Row]]:
    """``(head, row)`` for every span line of one file: the one loop every reader builds on.

    Bad lines and repeated span ids are skipped and counted in ``stats``; a later header applies to the
    lines after it. A file that does not start with a v2 header (or cannot be read) yields nothing, with a
    note in ``stats``.
    """
    stats = stats if stats is not None else ReadStats()
    seen: set[Any] = set()
    for head, rows, _at, _size in scan_runs(path, stats):
        repeats, rows, _places = unseen(seen, rows)
        stats.duplicates += repeats
        for row in rows:
            yield head, row


def unseen(seen: set[Any], rows: list[Row], *places: list[int]) -> tuple[int, list[Row], tuple[list[int], ...]]:
    """A run's rows whose span id is not in ``seen`` nor repeated before it in the run (a file keeps a span
    id's first line: a retried batch's repeat is skipped), their ids added to ``seen``; how many were
    repeats, the rows left (``rows`` itself where none repeats) and the matching entries of each of
    ``places`` (lists beside the rows, filtered alike)."""
    ids = [row.s for row in rows]  # (an id is text or a number: a list or object made the line garbage)
    fresh = set(ids)
    if len(fresh) == len(ids) and seen.isdisjoint(fresh):  # (the common case: no repeat, nothing per row)
        seen |= fresh
        return 0, rows, places
    keep = bytearray(len(ids))
    add = seen.add
    for n, span_id in enumerate(ids):
        if span_id not in seen:
            add(span_id)
            keep[n] = 1
    return len(ids) - sum(keep), list(compress(rows, keep)), tuple(list(compress(p, keep)) for p in places)


#: span lines a run of :func:`scan_runs` holds at most (its rows are alive until the run is used)
RUN_ROWS = 4096


def scan(
    path: str | os.PathLike[str],
    stats: ReadStats,
    *,
    start: int = 0,
    head: Head | None = None,
    stop: int | None = None,
    heads: list[Head] | None = None,
) -> Iterator[tuple[Head, Row, int, int]]:
    """``(head, row, offset, length)`` for every span line of a file (:func:`scan_runs`'s runs, a line at a
    time)."""
    for run_head, rows, offsets, lengths in scan_runs(path, stats, start=start, head=head, stop=stop, heads=heads):
        yield from zip(repeat(run_head), rows, offsets, lengths)


def scan_runs(
    path: str | os.PathLike[str],
    stats: ReadStats,
    *,
    start: int = 0,
    head: Head | None = None,
    stop: int | None = None,
    heads: list[Head] | None = None,
) -> Iterator[tuple[Head, list[Row], list[int], list[int]]]:
    """``(head, rows, offsets, lengths)`` for the span lines of a file, in runs of at most :data:`RUN_ROWS`
    lines under one header, with no duplicate check: from its start (its first line must be a v2 header), or
    from byte ``start`` under ``head`` (a read resumed where an earlier one ended), up to byte ``stop`` (the
    end of the file). Lines and bad lines are counted in ``stats`` (the header line too, on a read from the
    start); a file counts once, on a read from its start. ``heads`` gets every header met, in order (the
    first one too).

    A bad line is one that is not JSON, longer than :data:`LINE_MAX`, nested deeper than the parser allows,
    has a key of another JSON type than the format's (an ``rl.step`` that is not an int too), no name or id, or times that are not integers in
    [:data:`TIME_MIN_NS`, :data:`TIME_MAX_NS`) with the end not before the start."""
    handle = _opened(path, stats, noted=head is None)
    if handle is None:
        return
    lines = skipped = 0
    decode, bad, bad_step = decode_row, BAD_LINE, BAD_STEP
    rows: list[Row] = []
    offsets: list[int] = []
    lengths: list[int] = []
    try:
        with handle:
            if head is None:
                head, at = _first_head(handle, path, stats, heads)
                if head is None:
                    return
            else:
                at = start
                handle.seek(start)
            for raw in iter(partial(handle.readline, LINE_MAX), b""):
                size = len(raw)
                if size == LINE_MAX and raw[-1] != 10:  # longer than any line a reader takes: skipped
                    size += rest_of_line(handle)
                    raw = b""
                if stop is not None and at + size > stop:
                    break
                lines += 1
                offset, at = at, at + size
                try:
                    row = decode(raw)
                except bad:
                    skipped += 1
                    continue
                if row.s is None or row.n is None or row.v is not None:
                    later = later_head(raw, row)
                    if later is not None:  # a re-init in the same process: applies from here
                        if rows:
                            yield head, rows, offsets, lengths
                            rows, offsets, lengths = [], [], []
                        head = later
                        skipped += head.dropped
                        if heads is not None:
                            heads.append(head)
                    else:
                        skipped += 1
                    continue
                try:  # (each time an int in the plausible range, or none: the decoder checked)
                    if row.b > row.e:
                        skipped += 1
                        continue
                except TypeError:  # a time missing
                    skipped += 1
                    continue
                if row.a is not None and row.a.get("rl.step").__class__ in bad_step:  # a step that is no int
                    skipped += 1
                    continue
                rows.append(row)
                offsets.append(offset)
                lengths.append(size)
                if len(rows) == RUN_ROWS:
                    yield head, rows, offsets, lengths
                    rows, offsets, lengths = [], [], []
            if rows:
                yield head, rows, offsets, lengths
    finally:
        stats.lines += lines
        stats.skipped += skipped


def _opened(path: str | os.PathLike[str], stats: ReadStats, noted: bool) -> IO[bytes] | None:
    """``path`` opened for a scan; None when it cannot be (named in ``stats.notes`` if ``noted``)."""
    try:
        return open_file(path, _SCAN_BUFFER)
    except OSError as exc:
        if noted:
            stats.notes.append(
                f"{Path(path).name}: {exc if isinstance(exc, UnreadableError) else why_not(path, exc)}; skipped"
            )
        return None


def not_a_store_file(path: str | os.PathLike[str]) -> str:
    """What every command says of a file whose first line is no v2 header (SPEC "Scale": one message naming it)."""
    return f"{Path(path).name}: not a lens_rl store file (its first line is no v2 header); skipped"


def _first_head(
    handle: IO[bytes], path: str | os.PathLike[str], stats: ReadStats, heads: list[Head] | None
) -> tuple[Head | None, int]:
    """A scan from a file's start: its first header and the offset after it, the file and its header line
    counted in ``stats``; None for a file that does not start with a v2 header (noted, and every line of
    it counted bad)."""
    stats.files += 1
    first, at = first_line(handle)
    head = head_of(first)
    if head is None:
        if at:
            stats.notes.append(not_a_store_file(path))
            lines = 1 + count_lines(handle)
            stats.lines += lines
            stats.skipped += lines
        return None, at
    stats.lines += 1
    stats.skipped += head.dropped
    if heads is not None:
        heads.append(head)
    return head, at


_SCAN_BUFFER = 1 << 20  # (line by line with a cap, a larger buffer reads as fast as plain iteration)
