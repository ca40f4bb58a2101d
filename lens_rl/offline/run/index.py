"""What a look needs of each span file before it reduces the spans: its headers (which process of which
attempt wrote it; a driver restarted under the same pid appends a header to the same file) and, in a run of
several attempts, the steps each attempt's view ran (what tells re-run steps apart). Kept between looks in the
refresh cache's folder (``index.json``), per file with where its scan stopped, so a resumed job's look reads
only the bytes appended since: a header scan is a byte search, steps decode the rows. A file that shrank,
was rewritten or replaced is scanned again from its start (the same checks as the cache's entries: identity,
size, mtime and ctime, and a hash of the bytes before where the scan stopped).

Example::

    index = Index(cache_folder(run_dir))
    heads = index.heads(path)                 # every header, scanning only what is new
    steps = index.steps(path, driven)         # attempt -> steps, as file_steps reads them
    index.save()
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.offline.run.disk import cache_key, json_bytes, read_bytes, write_atomic
from lens_rl.store import LINE_MAX, Head, ReadStats, heads, loads, open_file, scan

__all__ = ["INDEX", "FileIndex", "Index", "complete_end", "file_identity", "grown_only", "tail_hash"]

INDEX = "index.json"
_TAIL = 4096  # bytes before where a scan stopped, hashed: a rewrite there is caught


def complete_end(path: str | os.PathLike[str], size: int) -> int:
    """The end of the file's last whole line (what a read may settle; the rest is still being written)."""
    with open_file(path) as handle:
        at = size
        while at > 0:
            start = max(at - 65536, 0)
            handle.seek(start)
            chunk = handle.read(at - start)
            newline = chunk.rfind(b"\n")
            if newline != -1:
                return start + newline + 1
            at = start
    return 0


def file_identity(path: str | os.PathLike[str]) -> tuple[os.stat_result, tuple[int, int, str]]:
    """The file's stat and its identity: (device, inode, a hash of its first line); OSError where it is gone
    or unreadable."""
    with open_file(path) as handle:
        stat = os.fstat(handle.fileno())
        first = handle.readline(LINE_MAX)
    return stat, (stat.st_dev, stat.st_ino, hashlib.sha1(first).hexdigest())


def tail_hash(path: str | os.PathLike[str], end: int) -> bytes:
    """A hash of the (up to 4 KiB of) bytes before ``end``."""
    with open_file(path) as handle:
        handle.seek(max(end - _TAIL, 0))
        return hashlib.sha1(handle.read(min(end, _TAIL))).digest()


def grown_only(path: str | os.PathLike[str], stat: os.stat_result, was: Sequence[int], end: int, tail: bytes) -> bool:
    """Whether the file (``stat`` now) is as a read that stopped at ``end`` left it, or only grew since:
    ``was`` its size, mtime and ctime then (at the same size, any write changes one of them: rewritten in
    place), ``tail`` :func:`tail_hash` at ``end`` then (a rewrite before where the read stopped)."""
    size, mtime_ns, ctime_ns = was
    if stat.st_size < max(size, end):
        return False
    if stat.st_size == size:
        return (stat.st_mtime_ns, stat.st_ctime_ns) == (mtime_ns, ctime_ns)
    return tail_hash(path, end) == tail


class FileIndex:
    """One file's headers and steps, as far as its scan went: ``state`` (identity, then size, mtime and ctime
    when scanned), ``end`` (where the scan stopped: a line's end), ``tail`` (:func:`tail_hash` there),
    ``heads``, and ``steps`` ((attempt, driver) -> the steps its rows carry; None: its rows were never read)."""

    __slots__ = ("state", "end", "tail", "heads", "steps")

    def __init__(self, state: list[Any]) -> None:
        self.state = state
        self.end = 0
        self.tail = ""
        self.heads: list[Head] = []
        self.steps: dict[tuple[int, bool], set[Any]] | None = None

    def plain(self) -> dict[str, Any]:
        """This index as JSON values."""
        steps = None if self.steps is None else [[a, d, list(found)] for (a, d), found in self.steps.items()]
        return {
            "state": self.state,
            "end": self.end,
            "tail": self.tail,
            "heads": [h.header for h in self.heads],
            "steps": steps,
        }

    @classmethod
    def of(cls, plain: Mapping[str, Any]) -> FileIndex:
        """The index :meth:`plain` wrote (KeyError, TypeError or ValueError where it is not one)."""
        out = cls(list(plain["state"]))
        if len(out.state) != 6:
            raise ValueError("not an index's state")
        out.end, out.tail = int(plain["end"]), str(plain["tail"])
        out.heads = [Head(header) for header in plain["heads"]]
        steps = plain["steps"]
        out.steps = None if steps is None else {(int(a), bool(d)): set(found) for a, d, found in steps}
        return out


class Index:
    """Every file's :class:`FileIndex` kept in ``folder`` (None: nothing kept, every file scanned whole)."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder
        self.files: dict[str, FileIndex] = {}
        if folder is not None:
            self.files = _loaded(Path(folder) / INDEX)

    def save(self) -> None:
        """Keep what this look scanned (atomically; nothing where the folder cannot be written)."""
        if self.folder is not None:
            files = {name: index.plain() for name, index in self.files.items()}
            write_atomic(Path(self.folder) / INDEX, json_bytes({"key": cache_key(), "files": files}))

    def heads(self, path: str | os.PathLike[str]) -> list[Head]:
        """Every header of the file at ``path``, as :func:`lens_rl.store.heads` finds them."""
        return self._scanned(path, steps=False).heads

    def steps(self, path: str | os.PathLike[str], driven: frozenset[int]) -> dict[int, set[Any]]:
        """attempt -> the steps the file's processes ran, as the job's view sees them (as
        :func:`lens_rl.offline.read.reduce.file_steps` reads them): of an attempt in ``driven`` (it has a
        driver file), its driver's only; of any other, every process's. A worker file of a driven attempt
        with one header is not read past it."""
        index = self._scanned(path, steps=False)
        found = index.heads
        if not found or (not found[0].process.driver and found[0].process.attempt in driven and len(found) == 1):
            return {}
        if index.steps is None:  # (its rows never read: read now)
            index = self._scanned(path, steps=True)
        out: dict[int, set[Any]] = {}
        for (attempt, driver), values in (index.steps or {}).items():
            if values and (driver or attempt not in driven):
                out.setdefault(attempt, set()).update(values)
        return out

    def _scanned(self, path: str | os.PathLike[str], steps: bool) -> FileIndex:
        """The file's index, brought up to its last whole line (its rows read too where ``steps``)."""
        name = Path(path).name
        try:
            stat, ident = file_identity(path)
            identity = list(ident)
            end = complete_end(path, stat.st_size)
        except OSError:  # gone or unreadable since it was listed: as heads() and file_steps() find it
            self.files.pop(name, None)
            return FileIndex([])
        index = self.files.get(name)
        now = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
        if index is None or not _holds(index, identity, stat, path) or (steps and index.steps is None):
            index = FileIndex(identity)  # (new, changed, or its rows wanted now: scanned from the start)
        if index.state[3:] != now:
            _scan(index, path, end, steps or index.steps is not None)
            index.state = identity + now
        self.files[name] = index
        return index


def _holds(index: FileIndex, identity: list[Any], stat: os.stat_result, path: str | os.PathLike[str]) -> bool:
    """Whether the file is the one ``index`` scanned, grown at most (:func:`grown_only`)."""
    return index.state[:3] == identity and grown_only(path, stat, index.state[3:], index.end, bytes.fromhex(index.tail))


def _scan(index: FileIndex, path: str | os.PathLike[str], end: int, steps: bool) -> None:
    """``index`` brought from where its scan stopped to ``end``: the headers met, and the rows' steps where
    ``steps``."""
    if index.end < end and (index.heads or not index.end):  # (a file whose first line is no header has none)
        if steps:
            _scan_rows(index, path, end)
        else:
            index.heads += heads(path, index.end, end)
    index.end, index.tail = end, tail_hash(path, end).hex()


def _scan_rows(index: FileIndex, path: str | os.PathLike[str], end: int) -> None:
    """The rows from where ``index``'s scan stopped to ``end``: their steps per (attempt, driver), and the
    headers met."""
    found = index.steps if index.steps is not None else {}
    met: list[Head] = []
    last = index.heads[-1] if index.end and index.heads else None
    current = None if last is None else found.setdefault((last.process.attempt, last.process.driver), set())
    for head, row, _at, _size in scan(path, ReadStats(), start=index.end, head=last, stop=end, heads=met):
        if head is not last:
            last = head
            current = found.setdefault((head.process.attempt, head.process.driver), set())
        step = row.a.get("rl.step") if row.a else None
        if current is not None and (type(step) is int or type(step) is str):
            current.add(step)
    index.heads += met
    index.steps = found


def _loaded(path: Path) -> dict[str, FileIndex]:
    """The indexes kept at ``path``, where they are this lens_rl's and of the shape it writes (else none)."""
    try:
        kept = loads(read_bytes(path))
        if type(kept) is not dict or kept.get("key") != cache_key() or type(kept.get("files")) is not dict:
            return {}
        return {str(name): FileIndex.of(plain) for name, plain in kept["files"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return {}
