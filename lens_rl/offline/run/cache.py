"""The refresh cache: a second look at a run reads only the bytes appended since the last one.

Per span file, the cache (``<run>/.lens_rl-cache/<file>.cache``, or the user's cache directory where the run
folder is read-only) keeps what the last read found, keyed by the file's identity (device, inode, its first
line) and lens_rl's version and the read's options:

* the **settled** part: the reduction (:class:`~lens_rl.offline.read.parts.ProcessPart`) of every span whose whole
  ancestor chain was written (up to a span with no parent, the job root, or a parent in another process).
  Whole subtrees reduce independently and parts merge exactly, so a grown file adds its new subtrees;
* the **held** spans: those whose parent is not written yet (children are written before their parents),
  kept as byte ranges of the file and read again with the new bytes until their chain is complete;
* the sorted ids of the settled spans: a new line repeating one is a duplicate (skipped, as a cold read
  skips it), and a new span whose parent is a settled span (a child that outlived its parent) sends the file
  to a cold read: its parent's exclusive time would change;
* where the last read stopped (the end of its last whole line), the size, mtime and the bytes before that end
  (a hash): a file that shrank, was rewritten or replaced is read cold.

A query's answer is the settled part, plus the held spans (and a last line still being written) reduced as a
cold read would reduce them: identical to a cold read, always. A cache that is corrupt, of another version or
another shape is ignored (never trusted: its records are typed data, :mod:`~lens_rl.offline.run.records`,
validated as they are decoded) and rewritten.

Example::

    parts, stats = cached_file_parts(path, (True, {}, True), cache_folder(run_dir))
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Mapping
from itertools import compress
from pathlib import Path
from typing import Any, NamedTuple

from lens_rl.offline.read.columns import Columns
from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.read.reduce import file_parts, reduce_columns
from lens_rl.offline.run.cache_files import (
    CACHE_DIR,
    FORMAT,
    Entry,
    cache_folder,
    grown_bytes,
    load_entry,
    options_key,
    save_entry,
    save_sizes,
)
from lens_rl.offline.run.chains import complete_chains
from lens_rl.offline.run.index import complete_end, file_identity, grown_only, tail_hash
from lens_rl.offline.run.kept import load_report, save_report, store_fingerprint
from lens_rl.offline.run.memo_file import load_memo, save_memo
from lens_rl.offline.run.settled_ids import id_key, merged_ids, settled_has, unsettled
from lens_rl.store import (
    BAD_LINE,
    LINE_MAX,
    Head,
    Process,
    ReadStats,
    decode_row,
    open_file,
    plausible,
    scan,
    scan_runs,
    unseen,
)

__all__ = [
    "CACHE_DIR",
    "FORMAT",
    "cache_folder",
    "cached_file_parts",
    "grown_bytes",
    "read_parts",
    "load_memo",
    "load_report",
    "save_memo",
    "save_report",
    "save_sizes",
    "store_fingerprint",
]


# ------------------------------------------------------------------------------------------- reads


def _columns_for(columns: dict[Process, Columns], head: Head) -> Columns:
    """The columns of ``head``'s process (made, and told the header, as needed)."""
    cols = columns.get(head.process)
    if cols is None:
        cols = columns[head.process] = Columns()
    if not cols.resources or cols.resources[-1] is not head.resource:
        cols.add_head(head)
    return cols


def _into(cols: Columns, row: Any) -> None:
    """``row`` into its process's columns."""
    if row.n == "rl.job":
        cols.add_job(row)
    cols.add(row.n, row.s, row.p, row.b, row.e, row.a, row.pr, row.sc)
    if row.st == "ERROR":  # (a span that ended in error: a step umbrella's makes its step failed, as extend keeps it)
        cols.add_errors([row], len(cols.names) - 1)


class _Batch:
    """The spans one read reduces, per process: their columns, where each line is in the file, the headers
    they are under (numbered as the entry keeps them) and the span ids met."""

    def __init__(self, heads: list[Head]) -> None:
        self.columns: dict[Process, Columns] = {}
        self.where: dict[Process, array] = {}  # (offset, size, head index), flat, in row order
        self.heads = heads
        self.numbers = {id(h): n for n, h in enumerate(heads)}
        self.seen: set[Any] = set()

    def number(self, head: Head) -> int:
        """``head``'s number among the entry's headers (a header met for the first time is added)."""
        n = self.numbers.get(id(head), -1)
        if n == -1:
            n = self.numbers[id(head)] = len(self.heads)
            self.heads.append(head)
        return n

    def read_held(self, path: str | os.PathLike[str], held: array) -> None:
        """The lines an earlier read held (their parents not written then), first, in file order."""
        for k in range(0, len(held), 3):
            offset, size, h = held[k], held[k + 1], held[k + 2]
            for head, row, at, length in scan(path, ReadStats(), start=offset, head=self.heads[h], stop=offset + size):
                self.seen.add(row.s)
                _into(_columns_for(self.columns, head), row)
                self.where.setdefault(head.process, array("q")).extend((at, length, h))

    def read_new(self, path: str | os.PathLike[str], entry: Entry | None, end: int, read: ReadStats) -> list[Head]:
        """The lines from where ``entry``'s read stopped (None: the file's start) to ``end``, a span id met
        before (here or settled) skipped as a cold read skips it; the headers met, in order."""
        met: list[Head] = []
        if entry is None:
            runs = scan_runs(path, read, stop=end, heads=met)
        else:
            start_head = None if entry.head_at_end is None else self.heads[entry.head_at_end]
            runs = scan_runs(path, read, start=entry.end, head=start_head, stop=end, heads=met)
        settled = None if entry is None or not len(entry.ids) else entry.ids  # (none: no lookup per row)
        last, h = None, -1
        for head, rows, ats, lengths in runs:
            if head is not last:  # (a header's rows come in runs: its number looked up once)
                last, h = head, self.number(head)
            if settled is not None:  # (a span settled by an earlier read: a repeat)
                keep = unsettled(settled, [row.s for row in rows])
                if not all(keep):
                    read.duplicates += len(keep) - sum(keep)
                    rows, ats, lengths = (
                        list(compress(rows, keep)),
                        list(compress(ats, keep)),
                        list(compress(lengths, keep)),
                    )
            repeats, rows, (ats, lengths) = unseen(self.seen, rows, ats, lengths)
            read.duplicates += repeats  # (a cold read keeps a span id's first line)
            if not rows:  # (columns made at a header's first new row: none for a header of repeats alone)
                continue
            _columns_for(self.columns, head).extend(rows)
            places = array("q", bytes(24 * len(rows)))
            places[0::3], places[1::3] = array("q", ats), array("q", lengths)
            places[2::3] = array("q", [h]) * len(rows)
            self.where.setdefault(head.process, array("q")).extend(places)
        return met

    def split(self, settled: Any) -> tuple[dict[Process, Columns], dict[Process, Columns], array, Any] | None:
        """The batch's spans whose whole ancestor chain is in it (settled now) and the rest (held): their
        columns, the held lines' places, the settled spans' ids (an int array where every process keeps its
        ids as ints, else a list); None where a span hangs from one an earlier read settled (``settled``:
        their ids; the file is read cold)."""
        done: dict[Process, Columns] = {}
        pending: dict[Process, Columns] = {}
        still = array("q")
        numbers, given = array("Q"), list[Any]()
        for process, cols in self.columns.items():
            keep, late = complete_chains(cols, settled)
            if late:
                return None
            every = all(keep)
            if type(cols.ids) is array:
                numbers.extend(cols.ids if every else compress(cols.ids, keep))
            else:
                given.extend(id_key(i) if type(i) is str else i for i in compress(cols.ids, keep))
            if every:
                done[process] = cols
                continue
            places = self.where[process]
            for n, k in enumerate(keep):
                if not k:
                    still.extend(places[3 * n : 3 * n + 3])
            if any(keep):
                done[process] = cols.subset(keep)
                pending[process] = cols.subset(bytearray(1 - k for k in keep))
            else:
                pending[process] = cols
        return done, pending, _in_file_order(still), [*numbers, *given] if given else numbers


def read_parts(
    path: str | os.PathLike[str],
    driver_in_run: bool = False,
    superseded: Mapping[int, frozenset[Any]] | None = None,
    critical: bool = True,
    cache: str | None = None,
    phase_steps: bool = True,
) -> tuple[list[ProcessPart], ReadStats]:
    """:func:`lens_rl.offline.read.reduce.file_parts` through the cache in folder ``cache`` (None: a cold read);
    ``phase_steps`` False: the settled parts' phases per step, what only ``--steps A-B`` reads, may be left out
    (an empty :class:`~lens_rl.offline.run.records.UnreadSteps`, or what was new since)."""
    if cache is None:
        return file_parts(path, driver_in_run, superseded, critical)
    return cached_file_parts(path, (driver_in_run, superseded or {}, critical), cache, phase_steps)


def cached_file_parts(
    path: str | os.PathLike[str],
    options: tuple[bool, Mapping[int, frozenset[Any]], bool],
    folder: str,
    phase_steps: bool = True,
) -> tuple[list[ProcessPart], ReadStats]:
    """:func:`lens_rl.offline.read.reduce.file_parts` through the cache in ``folder``: what is new is read; the
    answer is a cold read's (``phase_steps`` False: see :func:`read_parts`)."""
    key = options_key(options)
    try:
        stat, identity = file_identity(path)
    except OSError:  # gone or unreadable since it was listed: a cold read says so
        return file_parts(path, *options)
    where = Path(folder) / f"{Path(path).name}.cache"
    entry, why = load_entry(where, key, identity, phase_steps)
    if entry is not None:
        try:
            return _through(_Look(path, stat, key, identity, options), entry, where)
        except Exception as exc:  # an entry of the right shape outside, wrong inside: never trusted
            why = f"corrupt ({type(exc).__name__})"
        finally:
            entry.unread = None  # (the bytes read: kept only until the entry is saved)
    return _through(_Look(path, stat, key, identity, options), None, where, why)


class _Look(NamedTuple):
    """One file as a look found it: its path and stat, the cache key of the read's options, its identity."""

    path: str | os.PathLike[str]
    stat: os.stat_result
    key: str
    identity: tuple[Any, ...]
    options: tuple[bool, Mapping[int, frozenset[Any]], bool]


def _through(
    look: _Look, entry: Entry | None, where: Path, why: str | None = None
) -> tuple[list[ProcessPart], ReadStats]:
    """One file's parts through its cache ``entry`` (None: cold), saved back to ``where``; ``why``: why an
    entry there was not used, for the read's notes."""
    path, stat = look.path, look.stat
    stats = ReadStats()
    if why is not None:
        stats.cache_notes.append(f"{where.name}: {why}; read cold")
    if entry is not None and not grown_only(
        path, stat, (entry.size, entry.mtime_ns, entry.ctime_ns), entry.end, entry.tail
    ):
        entry = None  # shrunk, written to without growing (rewritten in place), or its tail rewritten: cold
    if entry is not None and _unchanged(stat, entry) and not entry.held:
        stats.add(entry.stats)  # unchanged, nothing held: the settled parts are the answer
        stats.cache_hits += 1
        stats.cache_reads.append((where.name, entry.token, entry.token, None))
        return list(entry.settled.values()), stats
    before = None if entry is None else entry.token
    result = _refresh(look, entry) if entry is not None else None
    if result is None:  # cold, or a late child sent it cold
        before = None  # (what an earlier look made of this file does not hold)
        result = _refresh(look, None)
    assert result is not None
    fresh, parts, answer, fresh_from, delta = result
    if fresh is not None:
        save_entry(where, fresh, delta)  # (before the rollup merges into the parts it is given)
    stats.add(answer)
    stats.cache_hits += before is not None
    stats.cache_reads.append((where.name, before, None if fresh is None else fresh.token, fresh_from))
    return parts, stats


def _refresh(
    look: _Look, entry: Entry | None
) -> tuple[Entry | None, list[ProcessPart], ReadStats, int | None, bytes | None] | None:
    """One read from where ``entry`` stopped (None: from the start): the new entry (None: nothing to keep),
    the answer's parts and stats, the earliest start of the spans it reduced (None: none) and the delta record
    to append (None: the entry is written whole); None when the file must be read cold after all (a late child)."""
    path, stat, key, identity, options = look
    driver_in_run, superseded, critical = options
    cold = entry is None
    end = complete_end(path, stat.st_size)
    batch = _Batch([] if entry is None else [Head(h) for h in entry.heads])
    read = ReadStats()
    met: list[Head] = []
    if entry is not None:
        batch.read_held(path, entry.held)
    if entry is None or end > entry.end:
        met = batch.read_new(path, entry, end, read)
        if cold and read.notes:  # no store file: nothing to keep, the read says why
            return None, [], read, None, None
    entry = entry if entry is not None else Entry(key, identity)
    for head in met:  # (headers met after the last span line too: the last is the one in effect at the end)
        entry.head_at_end = batch.number(head)
    split = batch.split(entry.ids)
    if split is None:
        return None
    settled, pending, entry.held, new_ids = split
    fresh_from = _earliest(settled)
    new_parts = reduce_columns(settled, driver_in_run, superseded, critical)
    entry.heads = [dict(h.header) for h in batch.heads]
    delta = _settle(entry, look, end, read, new_parts, new_ids, cold)
    answer = ReadStats()
    answer.add(entry.stats)
    tail = _tail_row(path, end, stat.st_size, answer, batch.seen, entry.ids)
    if tail is not None and entry.head_at_end is not None:  # reduced with the held spans, kept by no one
        _into(_columns_for(pending, batch.heads[entry.head_at_end]), tail)
    fresh_from = min((t for t in (fresh_from, _earliest(pending)) if t is not None), default=None)
    parts = list(entry.settled.values()) + reduce_columns(pending, driver_in_run, superseded, critical)
    return entry, parts, answer, fresh_from, delta


def _settle(
    entry: Entry, look: _Look, end: int, read: ReadStats, parts: list[ProcessPart], ids: Any, cold: bool
) -> bytes | None:
    """What a read settled (``parts``, their spans' ``ids``) and where it stopped (``end``, ``read``'s counts)
    into ``entry``, under a new token; the :class:`~.Delta` record from the state it was read in (None: read
    cold, nothing to append to)."""
    stat = look.stat
    entry.stats.add(read)
    entry.end, entry.size, entry.mtime_ns, entry.ctime_ns = end, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns
    entry.tail = tail_hash(look.path, end)
    parent, entry.token = entry.token, os.urandom(8).hex()
    delta = None if cold else entry.delta(parent, {part.key: part for part in parts}, ids)
    for part in parts:  # (after the delta is encoded: merged, they are entry's)
        mine = entry.settled.get(part.key)
        if mine is None:
            entry.settled[part.key] = part
        else:
            mine.merge(part)
    entry.ids = merged_ids(entry.ids, ids)
    return delta


def _unchanged(stat: os.stat_result, entry: Entry) -> bool:
    """Whether the file is as the entry's read left it: the same size, mtime and ctime (any write changes
    one of them, even one in place at the same size and with the same first line and tail)."""
    return stat.st_size == entry.size and stat.st_mtime_ns == entry.mtime_ns and stat.st_ctime_ns == entry.ctime_ns


def _earliest(columns: Mapping[Process, Columns]) -> int | None:
    """The earliest start (ns) of these columns' spans (None: no span)."""
    return min((min(cols.starts) for cols in columns.values() if len(cols.starts)), default=None)


def _in_file_order(flat: array) -> array:
    """(offset, size, head) triples sorted by offset, flat again."""
    out = array("q")
    for triple in sorted(zip(flat[0::3], flat[1::3], flat[2::3], strict=True)):
        out.extend(triple)
    return out


def _tail_row(path: str | os.PathLike[str], end: int, size: int, stats: ReadStats, seen: set[Any], ids: Any) -> Any:
    """A last line still being written, as a cold read takes it: a span row if it decodes (and repeats no
    id), else a skipped line; counted in ``stats``."""
    if size <= end:
        return None
    stats.lines += 1
    if size - end >= LINE_MAX:  # longer than any line a reader takes (a cold read skips it too)
        stats.skipped += 1
        return None
    with open_file(path) as handle:
        handle.seek(end)
        raw = handle.read(size - end)
    try:
        row = decode_row(raw)
    except BAD_LINE:  # (half a line: not JSON, or not a row)
        stats.skipped += 1
        return None
    if row.s is None or row.n is None or row.v is not None:
        stats.skipped += 0 if row.header is True and row.v == 2 else 1
        return None
    if not plausible(row):
        stats.skipped += 1
        return None
    if row.s in seen or settled_has(ids, id_key(row.s)):
        stats.duplicates += 1
        return None
    return row
