"""The refresh cache on disk (:mod:`lens_rl.offline.run.cache` reads through it): where a run's cache lives, one
entry per span file, and the critical path's per-step results. Whole answers kept per store are
:mod:`~lens_rl.offline.run.kept`'s.

An entry file grows by appending: its first record is a whole :class:`Entry`, each later one a delta
(:class:`~lens_rl.offline.run.records.DeltaRec`: what one look added: the parts of the spans it settled, their ids, where it stopped), chained to the state
it extends by that state's token. A look writes only its delta, in one ``O_APPEND`` write; the file is
rewritten whole (compacted) after :data:`MAX_RECORDS` records, or when its deltas outgrow half its first
record. A reader applies each delta whose parent is the state it has (of two looks that appended at once, the
second's delta is skipped: its spans are read again) and stops at a record cut short (a look killed while
writing). Every record is typed data (:mod:`~lens_rl.offline.run.records`: MessagePack of a declared schema,
arrays as raw buffers), validated as it is decoded: nothing read can run code, and a record claiming more
than its bytes hold is refused before anything is allocated.

Example::

    folder = cache_folder("lens_traces/run42")
    entry, why = load_entry(Path(folder) / "spans-driver-0-1.jsonl.cache", options_key((True, {}, True)), identity)
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl._version import __version__
from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.run.disk import CACHE_DIR, FORMAT, append_to, json_bytes, read_bytes, read_kept, write_atomic
from lens_rl.offline.run.records import (
    UNENCODABLE,
    DeltaRec,
    EntryRec,
    StateRec,
    array_of,
    decode,
    encode,
    part_from,
    part_record,
    raw,
    stats_from,
    stats_record,
)
from lens_rl.offline.run.settled_ids import merged_ids
from lens_rl.store import Process, ReadStats, loads

__all__ = [
    "CACHE_DIR",
    "FORMAT",
    "LENGTH",
    "MAX_RECORDS",
    "Entry",
    "cache_folder",
    "after_length",
    "grown_bytes",
    "load_entry",
    "options_key",
    "records_in",
    "save_entry",
    "save_sizes",
]

_log = logging.getLogger("lens_rl")
_MAGIC = FORMAT.encode() + b"\n"
#: records an entry file holds before a look rewrites it whole
MAX_RECORDS = 32
LENGTH = 8  # bytes of a record's length, before it


def cache_folder(run_dir: str | os.PathLike[str]) -> str:
    """Where a run's cache lives: ``<run>/.lens_rl-cache/``, else (a read-only run folder) a folder of the
    user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``) named after the run folder's path."""
    run = Path(run_dir).resolve()
    inside = run / CACHE_DIR
    try:
        inside.mkdir(exist_ok=True)
        if os.access(inside, os.W_OK):
            return str(inside)
    except OSError:
        pass
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "lens_rl" / hashlib.sha1(str(run).encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


class Entry:
    """What the cache keeps of one file (see :mod:`lens_rl.offline.run.cache`)."""

    __slots__ = (
        "options",
        "identity",
        "end",
        "size",
        "mtime_ns",
        "ctime_ns",
        "tail",
        "heads",
        "head_at_end",
        "settled",
        "held",
        "ids",
        "stats",
        "token",
        "disk",
        "unread",
    )

    def __init__(self, options: str, identity: tuple[Any, ...]) -> None:
        self.options = options
        self.identity = identity
        self.end = 0
        self.size = 0
        self.mtime_ns = 0
        self.ctime_ns = 0
        self.tail = b""
        self.heads: list[dict[str, Any]] = []  # the header dicts spans are under, by index
        self.head_at_end: int | None = None
        self.settled: dict[Process, ProcessPart] = {}
        self.held = array("q")  # (offset, size, head index) of each held line, flat
        self.ids: Any = array("Q")  # the settled spans' ids, sorted (a list if one is not 16 hex digits)
        self.stats = ReadStats()
        #: new at every save: what a look's per-step results were made from (:class:`~.Memo`)
        self.token: str | None = None
        #: (records, bytes of the first, bytes after it) of the file it was read from or written to; None: neither
        self.disk: tuple[int, int, int] | None = None
        #: the bytes it was read from where its parts' phases per step were left unread (:func:`load_entry`):
        #: read from them again only if it is written whole
        self.unread: bytes | None = None

    def record(self) -> EntryRec:
        """The entry as its record (what its file's first record holds); phases per step left unread are read
        first (ValueError: the bytes they were left in no longer read as they did)."""
        if self.unread is not None:
            self._read_steps()
        return EntryRec(
            self.options,
            self.identity,  # type: ignore[arg-type]
            self._state(),
            [part_record(part) for part in self.settled.values()],
            raw(self.ids, "Q") if type(self.ids) is array else list(self.ids),
        )

    def _read_steps(self) -> None:
        """The phases per step :func:`load_entry` left unread, read from the bytes it read, with what was merged
        into them since (a part's tables merge exactly in any order)."""
        data, self.unread = self.unread, None
        assert data is not None
        whole, _why = _entry_in(data, self.options, self.identity, None, True)
        if whole is None:
            raise ValueError("an entry's bytes that no longer read as they did")
        for key, part in self.settled.items():
            since, found = part.phase_steps, whole.settled.get(key)
            part.phase_steps = {} if found is None else found.phase_steps
            for name, table in since.items():
                if name in part.phase_steps:
                    part.phase_steps[name].merge(table)
                else:
                    part.phase_steps[name] = table

    @staticmethod
    def of(rec: EntryRec, phase_steps: bool = True) -> Entry:
        """The entry ``rec`` records (ValueError: columns that do not add up); ``phase_steps`` False leaves its
        parts' phases per step unread (:func:`~lens_rl.offline.run.records.part_from`)."""
        entry = Entry(rec.options, tuple(rec.identity))
        entry.settled = {part.key: part for part in (part_from(p, phase_steps) for p in rec.settled)}
        entry.ids = array_of("Q", rec.ids) if type(rec.ids) is memoryview else rec.ids
        entry._take(rec.state, _held(rec.state.held))
        return entry

    def _state(self) -> StateRec:
        """The file's state as this entry holds it (an entry's record and a delta's end in it)."""
        return StateRec(
            self.token,
            self.end,
            self.size,
            self.mtime_ns,
            self.ctime_ns,
            self.tail,
            self.heads,
            self.head_at_end,
            raw(self.held, "q"),
            stats_record(self.stats),
        )

    def _take(self, state: StateRec, held: array) -> None:
        """``state`` taken (``held``: its held lines, checked)."""
        self.end, self.size, self.mtime_ns, self.ctime_ns = state.end, state.size, state.mtime_ns, state.ctime_ns
        self.tail, self.heads, self.head_at_end, self.held = state.tail, state.heads, state.head_at_end, held
        self.stats = stats_from(state.stats)
        self.token = state.token

    def delta(self, parent: str | None, parts: Mapping[Process, ProcessPart], ids: Any) -> bytes | None:
        """A :class:`~lens_rl.offline.run.records.DeltaRec` record from the state whose token is ``parent``
        to this entry's: ``parts`` and ``ids``, what the look settled (encoded now, before they are merged
        into others); None where a value is one the schema cannot hold (the entry is then written whole)."""
        try:
            return self._delta(parent, parts, ids)
        except UNENCODABLE:  # (an int past 64 bits, say)
            return None

    def _delta(self, parent: str | None, parts: Mapping[Process, ProcessPart], ids: Any) -> bytes:
        return _record(
            DeltaRec(
                parent,
                self._state(),
                [part_record(part) for part in parts.values()],
                list(ids),
            )
        )

    def apply(self, delta: DeltaRec) -> None:
        """``delta``'s spans merged in, its state taken."""
        read = self.unread is None  # (phases per step left unread: a delta's too)
        held, parts = _held(delta.state.held), [part_from(part, read) for part in delta.parts]  # (all or nothing)
        for part in parts:
            mine = self.settled.get(part.key)
            if mine is None:
                self.settled[part.key] = part
            else:
                mine.merge(part)
        self.ids = merged_ids(self.ids, list(delta.ids))
        self._take(delta.state, held)


def _held(buffer: memoryview) -> array:
    """The held lines' (offset, size, head) triples (ValueError: not whole triples)."""
    held = array_of("q", buffer)
    if len(held) % 3:
        raise ValueError("held lines that do not add up")
    return held


def _record(value: Any) -> bytes:
    """``value`` encoded (:func:`~lens_rl.offline.run.records.encode`), after its length."""
    return after_length(encode(value))


def after_length(data: bytes) -> bytes:
    """A record as a cache file holds it: its length (:data:`LENGTH` bytes, little-endian), then it."""
    return len(data).to_bytes(LENGTH, "little") + data


def records_in(data: bytes, at: int) -> Iterator[tuple[int, int]]:
    """Where the records of an entry file from offset ``at`` lie in ``data`` (start, stop); ValueError at one
    cut short."""
    while at < len(data):
        length = int.from_bytes(data[at : at + LENGTH], "little")
        at += LENGTH
        if length > len(data) - at:
            raise ValueError("a record cut short")
        yield at, at + length
        at += length


def options_key(options: tuple[bool, Mapping[int, frozenset[Any]], bool]) -> str:
    driver_in_run, superseded, critical = options
    later = sorted((attempt, sorted(map(repr, steps))) for attempt, steps in superseded.items())
    return repr((__version__, FORMAT, bool(driver_in_run), later, bool(critical)))


def load_entry(
    path: Path, options: str, identity: tuple[Any, ...], phase_steps: bool = True
) -> tuple[Entry | None, str | None]:
    """The cache entry at ``path``, its deltas applied, if it is this lens_rl's and this file's; else None and
    why (None: none). ``phase_steps`` False: its parts' phases per step (what only ``--steps A-B`` reads, a
    third of a run's records) are left unread, kept in the bytes read until the entry is written whole
    (:attr:`Entry.unread`; a look that appends its delta never reads them: drop them when it is done)."""
    data, why = read_kept(path)
    if data is None:
        return None, why
    return _entry_in(data, options, identity, path, phase_steps)


def _entry_in(
    data: bytes, options: str, identity: tuple[Any, ...], path: Path | None, phase_steps: bool
) -> tuple[Entry | None, str | None]:
    """:func:`load_entry` of the bytes ``data`` read from ``path`` (None: read again)."""
    if not data.startswith(_MAGIC):
        return None, "of another lens_rl version" if data.startswith(b"lens_rl.cache/") else "not a lens_rl cache"
    records = records_in(data, len(_MAGIC))
    try:
        start, stop = next(records)
        rec = decode(memoryview(data)[start:stop], EntryRec | DeltaRec)
    except Exception as exc:  # a corrupt or foreign file, another schema's record: never trusted
        return None, f"corrupt ({type(exc).__name__})"
    if not isinstance(rec, EntryRec):
        return None, "not a cache entry"
    if rec.options != options:
        return None, None if rec.options.startswith(repr((__version__,))[:-1]) else "of another lens_rl version"
    if tuple(rec.identity) != identity:
        return None, None  # another file under that name: read cold, quietly
    try:
        entry = Entry.of(rec, phase_steps)
    except Exception as exc:  # columns that do not add up: never trusted
        return None, f"corrupt ({type(exc).__name__})"
    if not phase_steps:
        entry.unread = data
    _apply_deltas(entry, data, records, path)
    return entry, None


def _apply_deltas(entry: Entry, data: bytes, records: Iterator[tuple[int, int]], path: Path | None) -> None:
    """Each delta record whose parent is ``entry``'s state applied (another's, from a look that appended at
    once, skipped); at a record cut short or corrupt, the state before it stands and ``entry`` is left with no
    file to append to (written whole next)."""
    count, appended = 1, 0
    view = memoryview(data)
    try:
        for start, stop in records:
            delta = decode(view[start:stop], EntryRec | DeltaRec)
            count, appended = count + 1, appended + LENGTH + stop - start
            if isinstance(delta, DeltaRec) and delta.parent == entry.token:
                entry.apply(delta)
    except Exception as exc:  # (never trusted: whatever a record holds, the state before it is a cold read's)
        where = "an entry" if path is None else path.name
        _log.debug("lens-rl: %s: read up to a record cut short or corrupt (%s)", where, type(exc).__name__)
        return
    entry.disk = (count, len(data) - appended, appended)


def save_entry(path: Path, entry: Entry, delta: bytes | None = None) -> None:
    """Keep ``entry`` at ``path``: ``delta`` (its :meth:`Entry.delta` from the state it was read in) appended
    to the file it was read from while that takes one more record, else the entry whole (atomically). A cache
    that cannot be written is no error: the next read is cold."""
    if delta is not None and entry.disk is not None:
        records, first, appended = entry.disk
        if records < MAX_RECORDS and appended + len(delta) <= max(first // 2, 1 << 16) and append_to(path, delta):
            entry.disk = (records + 1, first, appended + len(delta))
            return
    try:
        whole = _MAGIC + _record(entry.record())
    except UNENCODABLE:  # a value the schema cannot hold: nothing kept, read cold next
        return
    write_atomic(path, whole)
    entry.disk = (1, len(whole), 0)


_SIZES = "sizes.json"


def grown_bytes(folder: str, paths: Sequence[str | os.PathLike[str]]) -> float:
    """Bytes the files hold beyond what the last look through this cache saw (a file it did not see: all of
    its bytes; no record of a last look: infinity)."""
    try:
        seen = loads(read_bytes(Path(folder) / _SIZES))
        if type(seen) is not dict:
            return math.inf
        return sum(max(os.stat(p).st_size - int(seen.get(str(p), 0)), 0) for p in paths)
    except (OSError, ValueError, TypeError, RecursionError):
        return math.inf


def save_sizes(folder: str, paths: Sequence[str | os.PathLike[str]]) -> None:
    """What this look saw of each file, for :func:`grown_bytes`."""
    try:
        sizes = {str(p): os.stat(p).st_size for p in paths}
    except OSError:
        return
    write_atomic(Path(folder) / _SIZES, json_bytes(sizes))
