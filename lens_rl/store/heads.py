"""A store file's headers: each read as a :class:`Head` (the process it names, its resource, the job root), the
first alone (:func:`read_head`) or every one a re-init appended (:func:`heads`), and the attempts a run's
driver files name (:func:`driver_attempts`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from lens_rl.store.files import LINE_MAX, open_file
from lens_rl.store.format import Process, process_of
from lens_rl.store.rows import INT64_END, Row, loads

__all__ = ["HEADER_PREFIX", "Head", "driver_attempts", "head_of", "heads", "later_head", "read_head"]


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
    return head_of(first), more


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
        head = head_of(first)  # (an overlong first line is no header: nothing more is read)
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
            later = head_of(handle.readline(LINE_MAX))
            if later is not None:
                found.append(later)
            at = window.find(needle, at + 1)
        offset += len(chunk)
        handle.seek(offset)
        tail = window[-len(needle) :]


def head_of(raw: bytes) -> Head | None:
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
            if path.name.startswith("spans-"):
                found.update(_driver_attempts_of(path))
        except OSError:
            continue  # a file that went away or cannot be read says nothing about attempts
    return found, latest


def _driver_attempts_of(path: Path) -> set[int]:
    """The attempts a span file's driver headers name (none: its first header is no driver's)."""
    head, _ = read_head(path)
    if head is None or not head.process.driver:
        return set()
    return {h.process.attempt for h in heads(path) if h.process.driver}


def later_head(raw: bytes, row: Row) -> Head | None:
    """A later header line as a Head (a Row keeps only a header's resource and root); None for any other
    line with no span."""
    if row.header is not True or row.v != 2:
        return None
    try:
        header = loads(raw)
    except (ValueError, RecursionError):
        return None
    return Head(header) if type(header) is dict else None
