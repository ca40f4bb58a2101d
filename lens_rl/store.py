"""The embedded file store's format and its reader (no OpenTelemetry needed to read it).

Layout: ``trace_dir/<run_id>/spans-<group>-<rank>-<pid>.jsonl`` and
``metrics-<group>-<rank>-<pid>.jsonl``, one file per process and signal.

**Format v2** (what lens_rl writes): the first line of a file is a header carrying the
process's resource; span lines carry none, and use short keys (a typical phase
span is ~250 bytes)::

    {"v": 2, "header": true, "format": "lens_rl.spans/2", "resource": {...}, "pid": int}
    {"n": name, "t": trace id (32 hex), "s": span id (16 hex), "p": parent span id | absent,
     "b": start ns, "e": end ns, "a": {attributes} | absent, "th": thread id, "tn": thread name,
     "k": kind (absent: INTERNAL), "st": status (absent: UNSET), "sm": status message,
     "ev": [{"n", "ts", "a"}], "ln": [{"t", "s", "a"}], "sc": scope (absent: "lens_rl")}

A header may appear again later in a file (a re-init in the same process); it applies
to the lines after it. **Format v1** (earlier versions) has ``"v": 1`` and long keys on
every line, with the resource repeated. Readers accept both, mixed in one run, and
yield one record shape: the v1 keys (``name``, ``span_id``, ``start_ns`` ...) with
``resource`` pointing at the file's one resource dict (shared, never copied).

Every line is strict JSON. Readers skip and count a truncated or garbage line and a
span id seen twice in one file (a batch retried after a partial write). The fastest
JSON parser at hand reads (``orjson``, from the ``analysis`` extra), else the
standard library's.

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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["FORMAT_VERSION", "HEADER_FORMAT", "Columns", "ReadStats", "iter_file_records", "iter_rows", "iter_span_records", "to_row",
           "loads", "process_of", "read_columns", "span_files"]  # fmt: skip

FORMAT_VERSION = 2
HEADER_FORMAT = "lens_rl.spans/2"
OWN_SCOPE = "lens_rl"

loads: Any
try:  # the analysis extra: a parser several times faster than the standard library's
    import orjson as _orjson

    loads = _orjson.loads
except ImportError:  # pragma: no cover - exercised where the extra is missing
    loads = json.loads


@dataclasses.dataclass
class ReadStats:
    """What a read of the store found: files and lines read, lines skipped (truncated or garbage), duplicates."""

    files: int = 0
    lines: int = 0
    skipped: int = 0
    duplicates: int = 0

    def add(self, other: ReadStats) -> None:
        self.files += other.files
        self.lines += other.lines
        self.skipped += other.skipped
        self.duplicates += other.duplicates


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


def span_files(trace_dir: str | os.PathLike[str]) -> list[Path]:
    """Every span file under ``trace_dir`` (any depth), in a stable order."""
    return sorted(Path(trace_dir).rglob("spans-*.jsonl"))


_EMPTY: dict[str, Any] = {}


def _from_v2(row: dict[str, Any], resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": row.get("n"), "trace_id": row.get("t"), "span_id": row["s"], "parent_span_id": row.get("p"),
        "start_ns": row.get("b"), "end_ns": row.get("e"), "attributes": row.get("a") or _EMPTY,
        "thread": row.get("th"), "thread_name": row.get("tn"), "kind": row.get("k", "INTERNAL"),
        "status": row.get("st", "UNSET"), "status_message": row.get("sm"),
        "events": [{"name": e.get("n"), "time_ns": e.get("ts"), "attributes": e.get("a") or _EMPTY}
                   for e in row["ev"]] if "ev" in row else [],
        "links": [{"trace_id": link.get("t"), "span_id": link.get("s"), "attributes": link.get("a") or _EMPTY}
                  for link in row["ln"]] if "ln" in row else [],
        "scope": row.get("sc", OWN_SCOPE), "resource": resource,
    }  # fmt: skip


def to_row(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 line (or a record of the reader's shape) in the v2 short-key row shape."""
    row = {"n": rec.get("name"), "t": rec.get("trace_id"), "s": rec.get("span_id"), "b": rec.get("start_ns"),
           "e": rec.get("end_ns"), "a": rec.get("attributes") or None, "th": rec.get("thread"),
           "tn": rec.get("thread_name"), "k": rec.get("kind", "INTERNAL"), "st": rec.get("status", "UNSET"),
           "sm": rec.get("status_message"), "sc": rec.get("scope", OWN_SCOPE)}  # fmt: skip
    if rec.get("parent_span_id"):
        row["p"] = rec["parent_span_id"]
    if rec.get("events"):
        row["ev"] = [{"n": e.get("name"), "ts": e.get("time_ns"), "a": e.get("attributes")} for e in rec["events"]]
    if rec.get("links"):
        row["ln"] = [{"t": x.get("trace_id"), "s": x.get("span_id"), "a": x.get("attributes")} for x in rec["links"]]
    return row


def iter_rows(path: str | os.PathLike[str], stats: ReadStats | None = None) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(resource, row)`` for every span line of one file, v1 or v2, in the v2 short-key row shape.

    The one loop every reader builds on: headers applied, bad lines and repeated span
    ids skipped and counted. A v2 file's rows share one resource dict (the header's).
    """
    stats = stats if stats is not None else ReadStats()
    stats.files += 1
    seen: set[Any] = set()
    seen_add = seen.add
    resource: dict[str, Any] = {}
    lines = skipped = duplicates = 0
    parse = loads
    try:
        with open(path, "rb") as handle:
            for raw in handle:
                lines += 1
                try:
                    row = parse(raw)
                    span_id = row.get("s")
                except (ValueError, AttributeError):
                    skipped += 1
                    continue
                if span_id is not None and "v" not in row:  # v2: the header's resource
                    line_resource = resource
                elif row.get("header"):
                    resource = row.get("resource") or {}
                    continue
                elif row.get("v") == 1 and row.get("span_id") is not None:  # v1: its own resource, long keys
                    span_id, line_resource, row = row["span_id"], row.get("resource") or {}, to_row(row)
                else:
                    skipped += 1
                    continue
                if span_id in seen:
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

    __slots__ = ("resources", "names", "ids", "parent_ids", "starts", "ends", "buckets", "steps", "tokens", "_shared")

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
        self._shared: dict[Any, Any] = {}

    def add(self, name: Any, span_id: Any, parent_id: Any, start: Any, end: Any, attrs: Any) -> None:
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
            self.starts.append(_ns(start))
        try:
            self.ends.append(end)
        except (TypeError, OverflowError):
            self.ends.append(_ns(end))
        if attrs:
            bucket, step = attrs.get("rl.bucket"), attrs.get("rl.step")
            self.buckets.append(_BUCKET_NAMES.get(bucket, bucket) if type(bucket) is str else bucket)
            self.steps.append(shared(step, step) if type(step) is int else step)
            self.tokens.append(attrs.get("rl.num_tokens"))
        else:
            self.buckets.append(None)
            self.steps.append(None)
            self.tokens.append(None)

    def _ids_as_given(self) -> None:
        """Keep ids as they come from now on (those so far back in lens_rl's 16-hex-digit form)."""
        self.ids = [f"{number:016x}" for number in self.ids]
        self.parent_ids = [f"{number:016x}" if number else None for number in self.parent_ids]


_INT64 = 2**63


_BUCKET_NAMES = {name: name for name in ("productive", "overhead", "idle", "wasted")}


def _ns(value: Any) -> int:
    """A time in ns as the int64 arrays hold it: a bad or out-of-range value reads as 0."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return number if -_INT64 <= number < _INT64 else 0


def read_columns(path: str | os.PathLike[str], stats: ReadStats | None = None) -> dict[tuple[str, int, int], Columns]:
    """One file's spans by process, as :class:`Columns` (the same lines :func:`iter_rows` yields).

    The analysis fast path: no record dict per span kept.
    """
    out: dict[tuple[str, int, int], Columns] = {}
    last: Any = None
    cols = Columns()
    for resource, row in iter_rows(path, stats):
        if resource is not last:
            last = resource
            key = process_of({"resource": resource})
            cols = out.get(key) or out.setdefault(key, Columns())
            cols.resources.setdefault(id(resource), resource)
        cols.add(row.get("n"), row["s"], row.get("p"), row.get("b"), row.get("e"), row.get("a"))
    return out


def iter_span_records(trace_dir: str | os.PathLike[str], stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """Every span record under ``trace_dir`` (any depth), file by file."""
    stats = stats if stats is not None else ReadStats()
    for path in span_files(trace_dir):
        yield from iter_file_records(path, stats)
