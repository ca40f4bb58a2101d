"""The file store's reader: a file's lines decoded into :class:`Row` s under their header's :class:`Head`.

Readers skip and count a truncated or garbage line (a killed process leaves at most one unfinished last
line) and a span id seen twice in one file (a batch retried after a partial write); a span line with no
name, or with a key of another JSON type than the format's (:data:`lens_rl.store.format.FIELD_TYPES`), is
garbage. A line is decoded straight into a Row (its short keys as attributes, None where absent) by
``msgspec`` (the ``analysis`` extra; it builds nothing for keys no reader uses), else into the same shape
from ``orjson`` or the standard library's parser. A file that does not start with a v2 header is skipped
whole, with one note naming it.

Example::

    stats = ReadStats()
    for head, row in iter_rows("lens_traces/run42/spans-driver-0-123.jsonl", stats):
        print(head.process.group, row.n, row.e - row.b)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import IO, Annotated, Any

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
from lens_rl.store.format import FIELD_TYPES, ROW_KEYS, TIME_MAX_NS, TIME_MIN_NS, Process, process_of

__all__ = [
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
    "plausible",
    "read_head",
    "read_live",
    "scan",
    "span_files",
    "time_ns",
    "trace_time_ns",
]

#: Past the last int64: a time in ns is an int in [-INT64_END, INT64_END).
INT64_END = 2**63

loads: Any
try:  # the analysis extra: a parser several times faster than the standard library's
    import orjson as _orjson

    loads = _orjson.loads
except ImportError:  # pragma: no cover - exercised where the extra is missing
    loads = json.loads

_msgspec: Any
try:  # the analysis extra: msgspec decodes a line straight into a Row, skipping what no reader needs
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - exercised where the extra is missing
    _msgspec = None

if _msgspec is not None:
    # (checked as the line is decoded: a time that is no int in the plausible range makes the line garbage)
    _Time = Annotated[int, _msgspec.Meta(ge=TIME_MIN_NS, lt=TIME_MAX_NS)]

    class Row(_msgspec.Struct, gc=False):  # type: ignore[call-arg]  # gc=False: rows form no cycle
        """One line of a span file, by its short keys (a key the line lacks is None); times in ns."""

        n: str | None = None
        t: str | None = None
        s: str | int | None = None
        p: str | int | None = None
        pr: bool | None = None
        b: _Time | None = None  # type: ignore[valid-type]
        e: _Time | None = None  # type: ignore[valid-type]
        a: dict[str, Any] | None = None
        th: int | str | None = None
        tn: str | None = None
        k: str | None = None
        st: str | None = None
        sm: str | None = None
        ev: list[dict[str, Any]] | None = None
        ln: list[dict[str, Any]] | None = None
        sc: str | None = None
        v: Any = None
        header: Any = None
        resource: Any = None
        root: Any = None

    decode_row: Any = _msgspec.json.Decoder(Row).decode
    # (RecursionError: a value nested deeper than the parser allows)
    _BAD_LINE: tuple[type[Exception], ...] = (ValueError, RecursionError, _msgspec.DecodeError)
else:  # pragma: no cover - exercised where the extra is missing

    class Row:  # type: ignore[no-redef]
        """One line of a span file, by its short keys (a key the line lacks is None)."""

        __slots__ = ROW_KEYS

        def __init__(self, **fields: Any) -> None:
            for key in ROW_KEYS:
                setattr(self, key, fields.get(key))

        def __eq__(self, other: object) -> bool:
            return type(other) is Row and all(getattr(self, k) == getattr(other, k) for k in ROW_KEYS)

        def __repr__(self) -> str:
            return (
                "Row(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in ROW_KEYS if getattr(self, k) is not None) + ")"
            )

    def decode_row(raw: bytes) -> Row:
        fields = loads(raw)
        if type(fields) is not dict:
            raise ValueError("a span line is a JSON object")
        return _checked(Row(**{k: v for k, v in fields.items() if k in _KEY_SET}))

    def _checked(row: Row) -> Row:
        """``row``, or ``ValueError`` when a key has another JSON type than the format allows (what msgspec
        checks as it decodes)."""
        for key, types in FIELD_TYPES.items():
            value = getattr(row, key)
            if value is not None and type(value) not in types:
                raise ValueError(f"a span line's {key!r} is no {' or '.join(t.__name__ for t in types)}")
        if any(t is not None and not TIME_MIN_NS <= t < TIME_MAX_NS for t in (row.b, row.e)):
            raise ValueError("a span line's time is out of the plausible range")
        if any(type(item) is not dict for key in ("ev", "ln") for item in getattr(row, key) or ()):
            raise ValueError("a span line's events and links are objects")
        return row

    _KEY_SET = frozenset(ROW_KEYS)
    _BAD_LINE = (ValueError, RecursionError)

#: what ``decode_row`` raises on a line that is no span row (half a line, garbage, a wrong type)
BAD_LINE = _BAD_LINE


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


class Head:
    """A header as read: the header itself, the process's resource and :class:`~lens_rl.store.Process`,
    and the job root's span id (the driver's; None elsewhere). Every row under it shares this object.
    A header field no reader can hold (an integer past 64 bits, a resource value that is no attribute value)
    is left out and counted in ``dropped``."""

    __slots__ = ("header", "resource", "process", "root", "dropped")

    def __init__(self, header: Mapping[str, Any]) -> None:
        header, self.dropped = _held(header)
        self.header = header
        resource = header.get("resource")
        self.resource: dict[str, Any] = resource if type(resource) is dict else {}
        self.process: Process = process_of(self.resource, header)
        root = header.get("root")
        self.root: str | None = root if type(root) is str else None

    def __repr__(self) -> str:
        return f"Head({self.process})"


def _plain(value: Any) -> bool:
    """Whether ``value`` is an attribute value a reader can hold: text, a bool, a float, an int64, or a
    list of those."""
    kind = type(value)
    if kind is int:
        return -INT64_END <= value < INT64_END
    if kind is list:
        return all(type(v) is not list and _plain(v) for v in value)
    return kind in (str, bool, float) or value is None


#: Header and resource fields that are integers: another number there (a parser reads an integer past 64
#: bits as a float) is left out.
_INTS = frozenset({"v", "pid", "since", "nv.dl.rank", "nv.dl.world_size", "rl.attempt", "process.pid", "rl.num_gpus"})


def _kept(key: str, value: Any) -> bool:
    return _plain(value) and not (type(value) is float and key in _INTS)


def _held(header: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """``header`` without the fields no reader can hold (see :class:`Head`), and how many were left out."""
    out = {k: v for k, v in header.items() if type(v) is dict or _kept(k, v)}
    resource = out.get("resource")
    if type(resource) is dict:
        out["resource"] = {k: v for k, v in resource.items() if _kept(k, v)}
        dropped_resource = len(resource) - len(out["resource"])
    else:
        dropped_resource = 0
    return out, len(header) - len(out) + dropped_resource


def read_head(path: str | os.PathLike[str]) -> tuple[Head | None, bool]:
    """A file's first header (None when its first line is no v2 header, or the file cannot be read) and
    whether any line follows it."""
    try:
        with open_file(path) as handle:
            first = handle.readline(LINE_MAX)  # (an overlong first line is no header: not read further)
            more = first[-1:] != b"\n" and len(first) == LINE_MAX or bool(handle.read(1))
    except OSError:
        return None, False
    return _head(first), more


#: How every header line starts (its first key is ``v``; a span line's is ``n``): a scan for later headers
#: looks for it at a line's start, then decodes that line.
HEADER_PREFIX = b'{"v"'


def heads(path: str | os.PathLike[str], start: int = 0, stop: int | None = None) -> list[Head]:
    """Every header of a file, in order: its first, then any a re-init appended (a process of a later attempt
    with the same pid writes the same file). Found by a byte scan, without decoding a span line; none for a
    file that cannot be read. From byte ``start`` (a line's start past the first line: a scan resumed where an
    earlier one stopped), only the headers from there; up to byte ``stop`` (a line's end), only those before."""
    found: list[Head] = []
    try:
        with open_file(path) as handle:
            _scan_heads(handle, found, start, stop)
    except OSError:
        pass
    return found


def _scan_heads(handle: IO[bytes], found: list[Head], start: int, stop: int | None) -> None:
    needle = b"\n" + HEADER_PREFIX
    if start:
        offset = start
        handle.seek(start)
    else:
        first = handle.readline(LINE_MAX)
        offset = len(first)
        head = _head(first)  # (an overlong first line is no header: nothing more is read)
        if head is None:
            return
        found.append(head)
    tail = b"\n"  # the scan window starts with the byte before it
    while stop is None or offset < stop:
        chunk = handle.read(1 << 20 if stop is None else min(1 << 20, stop - offset))
        if not chunk:
            break
        window = tail + chunk
        at = window.find(needle)
        while at != -1:
            handle.seek(offset - len(tail) + at + 1)
            later = _head(handle.readline(LINE_MAX))
            if later is not None:
                found.append(later)
            at = window.find(needle, at + 1)
        offset += len(chunk)
        handle.seek(offset)
        tail = window[-len(needle) :]


def _head(raw: bytes) -> Head | None:
    try:
        header = loads(raw)
    except (ValueError, RecursionError):
        return None
    if type(header) is dict and header.get("header") is True and header.get("v") == 2:
        return Head(header)
    return None


def driver_attempts(run_dir: str | os.PathLike[str]) -> tuple[set[int], int | None]:
    """The attempts of the driver files in one run's folder (from their headers: a file whose first header
    is a driver's is scanned for the later ones), and the latest write to any of its files (ns since the
    epoch; None when there is none). Empty for a folder that does not exist."""
    found: set[int] = set()
    latest: int | None = None
    folder = Path(run_dir)
    if not folder.is_dir():
        return found, latest
    for path in folder.glob("*-*.json*"):
        try:
            written = path.stat().st_mtime_ns
            latest = written if latest is None or written > latest else latest
            if not path.name.startswith("spans-"):
                continue
            head, _ = read_head(path)
            if head is not None and head.process.driver:
                found.update(h.process.attempt for h in heads(path) if h.process.driver)
        except OSError:
            continue  # a file that went away or cannot be read says nothing about attempts
    return found, latest


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
    seen_add = seen.add
    duplicates = 0
    try:
        for head, row, _at, _size in scan(path, stats):
            span_id = row.s
            if span_id in seen:  # (an id is text or a number: a list or object made the line garbage)
                duplicates += 1
                continue
            seen_add(span_id)
            yield head, row
    finally:
        stats.duplicates += duplicates


def scan(
    path: str | os.PathLike[str],
    stats: ReadStats,
    *,
    start: int = 0,
    head: Head | None = None,
    stop: int | None = None,
    heads: list[Head] | None = None,
) -> Iterator[tuple[Head, Row, int, int]]:
    """``(head, row, offset, length)`` for every span line of a file, with no duplicate check: from its start
    (its first line must be a v2 header), or from byte ``start`` under ``head`` (a read resumed where an
    earlier one ended), up to byte ``stop`` (the end of the file). Lines and bad lines are counted in
    ``stats`` (the header line too, on a read from the start); a file counts once, on a read from its start.
    ``heads`` gets every header met, in order (the first one too).

    A bad line is one that is not JSON, longer than :data:`LINE_MAX`, nested deeper than the parser allows,
    has a key of another JSON type than the format's, no name or id, or times that are not integers in
    [:data:`TIME_MIN_NS`, :data:`TIME_MAX_NS`) with the end not before the start."""
    try:
        handle = open_file(path, _SCAN_BUFFER)
    except OSError as exc:
        if head is None:
            stats.notes.append(
                f"{Path(path).name}: {exc if isinstance(exc, UnreadableError) else why_not(path, exc)}; skipped"
            )
        return
    lines = skipped = 0
    decode, bad = decode_row, BAD_LINE
    try:
        with handle:
            at = start
            if head is None:
                stats.files += 1
                first, at = first_line(handle)
                head = _head(first)
                if head is None:
                    if at:
                        stats.notes.append(
                            f"{Path(path).name}: not a lens_rl store file (its first line is no v2 header); skipped"
                        )
                        lines += 1 + count_lines(handle)
                        skipped += lines
                    return
                lines += 1
                skipped += head.dropped
                if heads is not None:
                    heads.append(head)
            else:
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
                    later = _later_head(raw, row)
                    if later is not None:  # a re-init in the same process: applies from here
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
                yield head, row, offset, size
    finally:
        stats.lines += lines
        stats.skipped += skipped


def plausible(row: Row) -> bool:
    """Whether a span row's times are integers in [:data:`TIME_MIN_NS`, :data:`TIME_MAX_NS`), the end not
    before the start (:func:`scan` skips any other as a bad line)."""
    b, e = row.b, row.e
    return type(b) is int and type(e) is int and TIME_MIN_NS <= b <= e < TIME_MAX_NS


_SCAN_BUFFER = 1 << 20  # (line by line with a cap, a larger buffer reads as fast as plain iteration)


def _later_head(raw: bytes, row: Row) -> Head | None:
    """A later header line as a Head (a Row keeps only a header's resource and root); None for any other
    line with no span."""
    if row.header is not True or row.v != 2:
        return None
    try:
        header = loads(raw)
    except (ValueError, RecursionError):
        return None
    return Head(header) if type(header) is dict else None


def time_ns(value: Any) -> int:
    """A time in ns as the int64 arrays hold it: a bad or out-of-range value reads as 0."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return number if -INT64_END <= number < INT64_END else 0


def trace_time_ns(value: Any) -> int:
    """A time as a trace holds it (ns, 0 <= t < 2**63): a bad, negative or out-of-range value reads as 0."""
    return max(time_ns(value), 0)
