"""The refresh cache on disk (:mod:`lens_rl.offline.run.cache` reads through it): where a run's cache lives, one
entry per span file, and the critical path's per-step results. Whole answers kept per store are
:mod:`~lens_rl.offline.run.kept`'s.

An entry file grows by appending: its first record is a whole :class:`Entry`, each later one a :class:`Delta`
(what one look added: the parts of the spans it settled, their ids, where it stopped), chained to the state
it extends by that state's token. A look writes only its delta, in one ``O_APPEND`` write; the file is
rewritten whole (compacted) after :data:`MAX_RECORDS` records, or when its deltas outgrow half its first
record. A reader applies each delta whose parent is the state it has (of two looks that appended at once, the
second's delta is skipped: its spans are read again) and stops at a record cut short (a look killed while
writing). Every record is read back after a check that it allocates no more than its size, by an unpickler
that builds nothing but the cache's own classes (:mod:`~lens_rl.offline.run.safe_pickle`).

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
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl._version import __version__
from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.run.disk import CACHE_DIR, FORMAT, append_to, json_bytes, read_bytes, write_atomic
from lens_rl.offline.run.safe_pickle import ClassUnpickler, framed, unpickled
from lens_rl.store import Process, ReadStats, loads

__all__ = [
    "CACHE_DIR",
    "FORMAT",
    "LENGTH",
    "MAX_RECORDS",
    "Delta",
    "Entry",
    "cache_folder",
    "grown_bytes",
    "id_key",
    "load_entry",
    "merged_ids",
    "after_length",
    "records_in",
    "options_key",
    "save_entry",
    "save_sizes",
    "settled_has",
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

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.__slots__[:-1])

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for key, value in zip(self.__slots__[:-1], state, strict=True):
            setattr(self, key, value)
        self.disk = None

    def delta(self, parent: str | None, parts: Mapping[Process, ProcessPart], ids: Any) -> bytes:
        """A :class:`Delta` record from the state whose token is ``parent`` to this entry's: ``parts`` and
        ``ids``, what the look settled (pickled now, before they are merged into others)."""
        meta = tuple(getattr(self, k) for k in Delta.META)
        return _record(Delta(parent, self.token, meta, dict(parts), ids))

    def apply(self, delta: Delta) -> None:
        """``delta``'s spans merged in, its state taken."""
        for key, part in delta.parts.items():
            mine = self.settled.get(key)
            if mine is None:
                self.settled[key] = part
            else:
                mine.merge(part)
        self.ids = merged_ids(self.ids, list(delta.ids))
        for key, value in zip(Delta.META, delta.meta, strict=True):
            setattr(self, key, value)
        self.token = delta.token


class Delta:
    """What one look added to an :class:`Entry` whose token was ``parent``: the parts of the spans it settled,
    their ids, and the entry's state after it (the fields :attr:`META` names, and its new ``token``)."""

    META = ("end", "size", "mtime_ns", "ctime_ns", "tail", "heads", "head_at_end", "held", "stats")
    __slots__ = ("parent", "token", "meta", "parts", "ids")

    def __init__(self, parent: str | None, token: str | None, meta: tuple[Any, ...], parts: dict[Any, Any], ids: Any):
        self.parent, self.token, self.meta, self.parts, self.ids = parent, token, meta, parts, ids

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.parent, self.token, self.meta, self.parts, self.ids)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.parent, self.token, self.meta, self.parts, self.ids = state


def id_key(span_id: Any) -> Any:
    """A span id as the settled ids keep it: an int for lens_rl's 16 hex digits, else as given."""
    if type(span_id) is str and len(span_id) == 16:
        try:
            return int(span_id, 16)
        except ValueError:
            return span_id
    return span_id


def settled_has(ids: Any, key: Any) -> bool:
    """Whether the settled ids (sorted: see :func:`merged_ids`) hold ``key`` (an :func:`id_key`)."""
    if type(ids) is array:
        if type(key) is not int:
            return False
        at = bisect_left(ids, key)
        return at < len(ids) and ids[at] == key
    try:
        at = bisect_left(ids, key)
    except TypeError:
        return key in ids
    return at < len(ids) and ids[at] == key


def merged_ids(ids: Any, new: list[Any]) -> Any:
    """The settled ids with ``new`` ones, sorted (an int array while every id is lens_rl's form)."""
    if not new:
        return ids
    if type(ids) is array and all(type(i) is int and 0 <= i < 2**64 for i in new):
        new.sort()
        out, at = array("Q"), 0  # (the few new ones slotted in: no sort of the whole run)
        for i in new:
            to = bisect_left(ids, i, at)
            out += ids[at:to]
            out.append(i)
            at = to
        out += ids[at:]
        return out
    merged = list(ids) + new
    try:
        return sorted(merged)
    except TypeError:  # ids of several types: kept as they are (looked up one by one)
        return merged


def _record(value: Any) -> bytes:
    """``value`` as a :func:`~lens_rl.offline.run.safe_pickle.framed` record, after its length."""
    return after_length(framed(value))


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


def load_entry(path: Path, options: str, identity: tuple[Any, ...]) -> tuple[Entry | None, str | None]:
    """The cache entry at ``path``, its deltas applied, if it is this lens_rl's and this file's; else None and
    why (None: none)."""
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not data.startswith(_MAGIC):
        return None, "of another lens_rl version" if data.startswith(b"lens_rl.cache/") else "not a lens_rl cache"
    records = records_in(data, len(_MAGIC))
    try:
        entry = unpickled(ClassUnpickler, data, *next(records))
    except Exception as exc:  # a corrupt or foreign file: never trusted
        return None, f"corrupt ({type(exc).__name__})"
    if not isinstance(entry, Entry):
        return None, "not a cache entry"
    if entry.options != options:
        return None, None if entry.options.startswith(repr((__version__,))[:-1]) else "of another lens_rl version"
    if entry.identity != identity:
        return None, None  # another file under that name: read cold, quietly
    _apply_deltas(entry, data, records, path)
    return entry, None


def _apply_deltas(entry: Entry, data: bytes, records: Iterator[tuple[int, int]], path: Path) -> None:
    """Each delta record whose parent is ``entry``'s state applied (another's, from a look that appended at
    once, skipped); at a record cut short or corrupt, the state before it stands and ``entry`` is left with no
    file to append to (written whole next)."""
    count, appended = 1, 0
    try:
        for start, stop in records:
            delta = unpickled(ClassUnpickler, data, start, stop)
            count, appended = count + 1, appended + LENGTH + stop - start
            if isinstance(delta, Delta) and delta.parent == entry.token:
                entry.apply(delta)
    except Exception as exc:  # (never trusted: whatever a record holds, the state before it is a cold read's)
        _log.debug("lens-rl: %s: read up to a record cut short or corrupt (%s)", path.name, type(exc).__name__)
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
    whole = _MAGIC + _record(entry)
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
