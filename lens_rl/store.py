"""The embedded file store's format and its reader (no OpenTelemetry needed to read it).

Layout: ``trace_dir/<run_id>/spans-<group>-<rank>-<pid>.jsonl`` and
``metrics-<group>-<rank>-<pid>.jsonl``, one file per process and signal.

**Format v2** (what lens_rl writes): the first line of a file is a header carrying the
process's resource; span lines carry none, and use short keys (a typical phase
span is ~250 bytes)::

    {"v": 2, "header": true, "format": "lens_rl.spans/2", "resource": {...}, "pid": int,
     "since": ns (no span in the file starts before it), "remote_parents": true (the lines mark
     a parent from another process with "pr"; both absent from earlier writers' files)}
    {"n": name, "t": trace id (32 hex), "s": span id (16 hex), "p": parent span id | absent,
     "pr": true when that parent was carried in from another process (absent: local),
     "b": start ns, "e": end ns, "a": {attributes} | absent, "th": thread id, "tn": thread name,
     "k": kind (absent: INTERNAL), "st": status (absent: UNSET), "sm": status message,
     "ev": [{"n", "ts", "a"}], "ln": [{"t", "s", "a"}], "sc": scope (absent: "lens_rl")}

A header may appear again later in a file (a re-init in the same process); it applies
to the lines after it. **Format v1** (earlier versions) has ``"v": 1`` and long keys on
every line, with the resource repeated. Readers accept both, mixed in one run, and
yield one record shape: the v1 keys (``name``, ``span_id``, ``start_ns`` ...) with
``resource`` pointing at the file's one resource dict (shared, never copied).

Every line is strict JSON. Readers skip and count a truncated or garbage line and a
span id seen twice in one file (a batch retried after a partial write); a span line
with no name, or with a key of another JSON type than the above (:data:`FIELD_TYPES`:
a list for a name, text for the attributes), is garbage. A line is
decoded straight into a :class:`Row` (its short keys as attributes, None where absent)
by ``msgspec`` (the ``analysis`` extra; it builds nothing for keys no reader uses), else
into the same shape from ``orjson`` or the standard library's parser.

Example::

    stats = ReadStats()
    for record in iter_span_records("lens_traces/run42", stats):
        print(record["name"], record["end_ns"] - record["start_ns"])
"""

from __future__ import annotations

import dataclasses
import json
import os
from array import array
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["FORMAT_VERSION", "HEADER_FORMAT", "Columns", "INT64_END", "ROW_KEYS", "ReadStats", "Row", "iter_file_records", "iter_rows", "iter_span_records", "to_row",
           "decode_skim", "loads", "process_of", "read_columns", "span_files", "time_ns", "trace_time_ns"]  # fmt: skip

FORMAT_VERSION = 2
HEADER_FORMAT = "lens_rl.spans/2"
OWN_SCOPE = "lens_rl"

loads: Any
try:  # the analysis extra: a parser several times faster than the standard library's
    import orjson as _orjson

    loads = _orjson.loads
except ImportError:  # pragma: no cover - exercised where the extra is missing
    loads = json.loads

#: The keys a line may carry: a v2 span line's, and what tells a header or a v1 line apart.
ROW_KEYS = ("n", "t", "s", "p", "pr", "b", "e", "a", "th", "tn", "k", "st", "sm", "ev", "ln", "sc", "v", "header",
            "resource", "root")  # fmt: skip
#: The JSON types a span line's keys may have (besides null; times are any, read by time_ns): a line with
#: another is garbage, skipped and counted, so no reader meets a list for a name or text for attributes.
FIELD_TYPES: Mapping[str, tuple[type, ...]] = {
    "n": (str,), "t": (str,), "s": (str, int), "p": (str, int), "pr": (bool,), "a": (dict,), "th": (int, str), "tn": (str,),
    "k": (str,), "st": (str,), "sm": (str,), "ev": (list,), "ln": (list,), "sc": (str,),
}  # fmt: skip

_msgspec: Any
try:  # the analysis extra: msgspec decodes a line straight into a Row, skipping what no reader needs
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - exercised where the extra is missing
    _msgspec = None

if _msgspec is not None:

    class Row(_msgspec.Struct, gc=False):  # type: ignore[call-arg]  # gc=False: rows form no cycle
        """One line of a span file, by its v2 short keys (a key the line lacks is None).

        A key of another JSON type than these makes the line garbage (:data:`FIELD_TYPES`);
        times are read by :func:`time_ns`.
        """

        n: str | None = None
        t: str | None = None
        s: str | int | None = None
        p: str | int | None = None
        pr: bool | None = None
        b: Any = None
        e: Any = None
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
        root: Any = None  # a header's: the job root's span id (the driver's top-level spans' parent)

    decode_row: Any = _msgspec.json.Decoder(Row).decode

    class _Object(_msgspec.Struct, gc=False):  # type: ignore[call-arg]
        """A JSON object, its members skipped unbuilt."""

    # Of a span line, what links spans (id, parent, start) and tells lines apart, its types checked as a
    # Row checks them and nothing else built (objects checked as objects): a first pass's read of the same
    # lines. Row's fields, bar the end time, with objects as _Object.
    _AS_OBJECT = {dict[str, Any] | None: _Object | None, list[dict[str, Any]] | None: list[_Object] | None}
    Skim: Any = _msgspec.defstruct(
        "Skim", [(f.name, _AS_OBJECT.get(f.type, f.type), None) for f in _msgspec.structs.fields(Row) if f.name != "e"],
        gc=False, module=__name__,
    )  # fmt: skip
    decode_skim: Any = _msgspec.json.Decoder(Skim).decode
    _BAD_LINE: tuple[type[Exception], ...] = (ValueError, _msgspec.DecodeError)
else:  # pragma: no cover - exercised where the extra is missing

    class Row:  # type: ignore[no-redef]
        """One line of a span file, by its v2 short keys (a key the line lacks is None)."""

        __slots__ = ROW_KEYS

        def __init__(self, **fields: Any) -> None:
            for key in ROW_KEYS:
                setattr(self, key, fields.get(key))

        def __eq__(self, other: object) -> bool:
            return type(other) is Row and all(getattr(self, k) == getattr(other, k) for k in ROW_KEYS)

        def __repr__(self) -> str:
            return "Row(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in ROW_KEYS if getattr(self, k) is not None) + ")"

    def decode_row(raw: bytes) -> Row:
        fields = loads(raw)
        if type(fields) is not dict:
            raise ValueError("a span line is a JSON object")
        return _checked(Row(**{k: v for k, v in fields.items() if k in _KEY_SET}))

    _KEY_SET = frozenset(ROW_KEYS)
    _BAD_LINE = (ValueError,)
    decode_skim = decode_row


@dataclasses.dataclass
class ReadStats:
    """What a read of the store found: files and lines read, lines skipped (truncated or garbage), duplicates."""

    files: int = 0
    lines: int = 0
    skipped: int = 0
    duplicates: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)  # what a reader should be told (one line each)

    def add(self, other: ReadStats) -> None:
        self.files += other.files
        self.lines += other.lines
        self.skipped += other.skipped
        self.duplicates += other.duplicates
        self.notes.extend(other.notes)


def process_of(record: Mapping[str, Any]) -> tuple[str, int, int]:
    """(worker group, rank, pid) of the process that wrote ``record``; bad values read as defaults."""
    res = record.get("resource") or {}
    values = []
    for key in ("nv.dl.rank", "process.pid"):
        try:
            values.append(int(res.get(key, 0) or 0))
        except (TypeError, ValueError):
            values.append(0)
    return str(res.get("rl.worker_group", "worker")), values[0], values[1]


_HEAD_MAX = 1 << 24  # bytes of a file's first line read for its header (~1 KB typically)


def read_head(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, bool]:
    """A file's header (its first line, when it is one) and whether any line follows it (its spans)."""
    with open(path, "rb") as handle:
        first = handle.readline(_HEAD_MAX)
        more = bool(handle.readline(1))
    try:
        header = loads(first)
    except ValueError:
        return None, more
    return (header if type(header) is dict and header.get("header") is True else None), more


def span_files(trace_dir: str | os.PathLike[str]) -> list[Path]:
    """Every span file under ``trace_dir`` (any depth), in a stable order."""
    return sorted(Path(trace_dir).rglob("spans-*.jsonl"))


_EMPTY: dict[str, Any] = {}


def _from_v2(row: Row, resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": row.n, "trace_id": row.t, "span_id": row.s, "parent_span_id": row.p,
        "start_ns": row.b, "end_ns": row.e, "attributes": row.a or _EMPTY,
        "thread": row.th, "thread_name": row.tn, "kind": _or(row.k, "INTERNAL"),
        "status": _or(row.st, "UNSET"), "status_message": row.sm,
        "events": [{"name": e.get("n"), "time_ns": e.get("ts"), "attributes": e.get("a") or _EMPTY}
                   for e in row.ev] if row.ev else [],
        "links": [{"trace_id": link.get("t"), "span_id": link.get("s"), "attributes": link.get("a") or _EMPTY}
                  for link in row.ln] if row.ln else [],
        "scope": _or(row.sc, OWN_SCOPE), "resource": resource,
    }  # fmt: skip


def _or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where the line lacked the key (a row holds None for a missing key)."""
    return default if value is None else value


def _checked(row: Row) -> Row:
    """``row``, or ``ValueError`` when a key has another JSON type than :data:`FIELD_TYPES` allows (what
    ``msgspec`` checks as it decodes: the rule of the lines it does not decode)."""
    for key, types in FIELD_TYPES.items():
        value = getattr(row, key)
        if value is not None and type(value) not in types:
            raise ValueError(f"a span line's {key!r} is no {' or '.join(t.__name__ for t in types)}")
    if any(type(item) is not dict for key in ("ev", "ln") for item in getattr(row, key) or ()):
        raise ValueError("a span line's events and links are objects")
    return row


def to_row(rec: Mapping[str, Any]) -> Row:
    """A v1 line (or a record of the reader's shape) as a v2 :class:`Row`; ``ValueError`` for a span with
    no name or a key of another JSON type than :data:`FIELD_TYPES` allows."""
    attributes = rec.get("attributes") or None
    if attributes is not None and type(attributes) is not dict and isinstance(attributes, Mapping):
        attributes = dict(attributes)  # a record in memory (to_chrome_trace) may hold any mapping
    events, links = rec.get("events") or None, rec.get("links") or None
    row = _checked(Row(  # (the events and links as given: checked as lists of objects, then given short keys)
        n=rec.get("name"), t=rec.get("trace_id"), s=rec.get("span_id"), p=rec.get("parent_span_id") or None,
        b=rec.get("start_ns"), e=rec.get("end_ns"), a=attributes, th=rec.get("thread"), tn=rec.get("thread_name"),
        k=rec.get("kind"), st=rec.get("status"), sm=rec.get("status_message"), sc=rec.get("scope"),
        ev=events, ln=links,
    ))  # fmt: skip
    if events:
        row.ev = [{"n": e.get("name"), "ts": e.get("time_ns"), "a": e.get("attributes")} for e in events]
    if links:
        row.ln = [{"t": x.get("trace_id"), "s": x.get("span_id"), "a": x.get("attributes")} for x in links]
    if row.n is None:
        raise ValueError("a span has a name")
    return row


def iter_rows(path: str | os.PathLike[str], stats: ReadStats | None = None, *,
              decode: Callable[[bytes], Any] | None = None,
              headers: list[Row] | None = None) -> Iterator[tuple[dict[str, Any], Row]]:  # fmt: skip
    """``(resource, row)`` for every span line of one file, v1 or v2, as a v2 :class:`Row`.

    The one loop every reader builds on: headers applied, bad lines and repeated span
    ids skipped and counted. A v2 file's rows share one resource dict (the header's).
    ``decode=decode_skim`` reads only ids, parents and starts of v2 lines (the same lines
    are yielded). ``headers``: each header line met is appended to it, as read.
    """
    stats = stats if stats is not None else ReadStats()
    stats.files += 1
    seen: set[Any] = set()
    seen_add = seen.add
    resource: dict[str, Any] = {}
    lines = skipped = duplicates = 0
    decode, bad = decode or decode_row, _BAD_LINE
    try:
        with open(path, "rb") as handle:
            for raw in handle:
                lines += 1
                try:
                    row = decode(raw)
                except bad:
                    skipped += 1
                    continue
                span_id = row.s
                if span_id is not None and row.v is None and row.n is not None:  # v2: the header's resource
                    line_resource = resource
                elif row.header:
                    resource = row.resource if type(row.resource) is dict else {}
                    if headers is not None:
                        headers.append(row)
                    continue
                elif row.v == 1 and type(record := loads(raw)) is dict and record.get("span_id") is not None:
                    try:
                        row = to_row(record)  # v1
                    except ValueError:
                        skipped += 1
                        continue
                    given = record.get("resource")
                    span_id, line_resource = row.s, given if type(given) is dict else {}
                else:
                    skipped += 1
                    continue
                if span_id in seen:  # (an id is text or a number: a list or object made the line garbage)
                    duplicates += 1
                    continue
                seen_add(span_id)
                yield line_resource, row
    finally:
        stats.lines += lines
        stats.skipped += skipped
        stats.duplicates += duplicates


def iter_file_records(path: str | os.PathLike[str], stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """The span records of one file (v1 or v2) in the record shape, bad lines and repeated span ids skipped."""
    for resource, row in iter_rows(path, stats):
        yield _from_v2(row, resource)


class Columns:
    """One process's spans as flat columns: what the offline tools' hot loops read (no object per span).

    Of the attributes only what the analysis reads is kept (``rl.bucket``, ``rl.step``,
    ``rl.num_tokens``): a run's attribute dicts would be most of its memory. Times are
    int64 arrays (a missing or bad value reads as 0); repeated values (names, parent ids, buckets, steps) share
    one object. Span and parent ids, 16 hex digits as lens_rl writes them, are kept as
    numbers in uint64 arrays (8 bytes a span, not ~70; a missing parent is 0); at the
    first id of another form the columns switch to keeping them as they came.
    """

    __slots__ = ("resources", "names", "ids", "parent_ids", "starts", "ends", "buckets", "steps", "tokens", "flags", "root",
                 "_shared")  # fmt: skip

    def __init__(self) -> None:
        self.resources: dict[int, dict[str, Any]] = {}
        self.names: list[Any] = []
        self.ids: Any = array("Q")  # a list once an id is not 16 hex digits
        self.parent_ids: Any = array("Q")
        self.starts = array("q")
        self.ends = array("q")
        self.buckets: list[Any] = []
        self.steps: list[Any] = []
        self.tokens: list[Any] = []
        #: per span: REMOTE_PARENT (its parent was carried in from another process), ENDED_BY_SHUTDOWN
        self.flags = bytearray()
        #: the job root's span id (as the ids are kept), from the file's header: a parent that is no orphan
        self.root: Any = None
        self._shared: dict[Any, Any] = {}

    def add(self, name: Any, span_id: Any, parent_id: Any, start: Any, end: Any, attrs: Any,
            remote: Any = None) -> None:  # fmt: skip
        shared = self._shared.setdefault
        self.names.append(shared(name, name) if type(name) is str else name)
        ids = self.ids
        if type(ids) is array:
            try:
                if len(span_id) != 16 or (parent_id is not None and len(parent_id) != 16):
                    raise ValueError(span_id)
                number, parent = int(span_id, 16), int(parent_id, 16) if parent_id is not None else 0
                if number <= 0 or parent < 0 or (parent_id is not None and not parent):
                    raise ValueError(span_id)  # (0 stands for "no parent"; a sign is not lens_rl's form)
            except (TypeError, ValueError):
                self._ids_as_given()
            else:
                ids.append(number)
                self.parent_ids.append(parent)
        if type(self.ids) is list:
            self.ids.append(span_id)
            self.parent_ids.append(shared(parent_id, parent_id) if type(parent_id) is str else parent_id)  # siblings share
        try:
            self.starts.append(start)
        except (TypeError, OverflowError):
            self.starts.append(time_ns(start))
        try:
            self.ends.append(end)
        except (TypeError, OverflowError):
            self.ends.append(time_ns(end))
        flag = REMOTE_PARENT if remote is True else 0
        if attrs:
            if attrs.get("rl.ended_by_shutdown") is True:
                flag |= ENDED_BY_SHUTDOWN
            bucket, step = attrs.get("rl.bucket"), attrs.get("rl.step")
            self.buckets.append(_BUCKET_NAMES.get(bucket, bucket) if type(bucket) is str else None)  # text or none
            if type(step) is int:
                step = shared(step, step) if -INT64_END <= step < INT64_END else None  # past int64: no step
            elif type(step) in _NO_KEY:
                step = None
            self.steps.append(step)
            tokens = attrs.get("rl.num_tokens")  # a number (an int within int64), else none
            self.tokens.append(tokens if type(tokens) is float or (type(tokens) is int and -INT64_END <= tokens < INT64_END)
                               else None)  # fmt: skip
        else:
            self.buckets.append(None)
            self.steps.append(None)
            self.tokens.append(None)
        self.flags.append(flag)

    def set_root(self, root: Any) -> None:
        """The job root's span id, as the header gives it (16 hex digits), kept as the ids are."""
        if type(root) is not str:
            return
        if type(self.ids) is array:
            try:
                self.root = int(root, 16) if len(root) == 16 else None
            except ValueError:
                self.root = None
        else:
            self.root = root

    def _ids_as_given(self) -> None:
        """Keep ids as they come from now on (those so far back in lens_rl's 16-hex-digit form)."""
        self.ids = [f"{number:016x}" for number in self.ids]
        self.parent_ids = [f"{number:016x}" if number else None for number in self.parent_ids]
        if self.root is not None:
            self.root = f"{self.root:016x}"


#: :attr:`Columns.flags` bits.
REMOTE_PARENT = 1
ENDED_BY_SHUTDOWN = 2


#: Past the last int64: a time in ns is an int in [-INT64_END, INT64_END).
INT64_END = 2**63


_BUCKET_NAMES = {name: name for name in ("productive", "overhead", "idle", "wasted")}
_NO_KEY = (list, dict)  # JSON values that key nothing (a step of these reads as none)


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


def read_columns(path: str | os.PathLike[str], stats: ReadStats | None = None) -> dict[tuple[str, int, int], Columns]:
    """One file's spans by process, as :class:`Columns` (the same lines :func:`iter_rows` yields).

    The analysis fast path: no record dict per span kept.
    """
    out: dict[tuple[str, int, int], Columns] = {}
    last: Any = None
    cols = Columns()
    headers: list[Row] = []
    for resource, row in iter_rows(path, stats, headers=headers):
        if resource is not last:
            last = resource
            key = process_of({"resource": resource})
            cols = out.get(key) or out.setdefault(key, Columns())
            cols.resources.setdefault(id(resource), resource)
            if headers and headers[-1].resource is resource:
                cols.set_root(headers[-1].root)
        cols.add(row.n, row.s, row.p, row.b, row.e, row.a, row.pr)
    return out


def iter_span_records(trace_dir: str | os.PathLike[str], stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """Every span record under ``trace_dir`` (any depth), file by file."""
    stats = stats if stats is not None else ReadStats()
    for path in span_files(trace_dir):
        yield from iter_file_records(path, stats)
