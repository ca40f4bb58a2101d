"""The report's timeline kept between looks, in the refresh cache's folder (``timeline.json``, sealed like
the kept answers): a ``report`` of a store that grew reads only the bytes appended since the timeline was
drawn, and draws it again only where they can change it.

A kept timeline holds its window of steps, every process's spans in it (a page shows some processes: which
may change from look to look), and per file where its read stopped (identity, end, the hash before it, the
header its last span is under); also the ids of the drawn spans and their ancestors, and the parent ids their chains
end at unwritten (``open``). The new lines of every file are then read, and the timeline is drawn again
(every file read whole) when one of them can belong to it: a span whose step, by the tree rule over the new
lines, is in the window; one whose chain leaves the new lines at a drawn span or its ancestor (its step may
be theirs); or one that is the parent a drawn chain waited for (its depths change). A file shrunk, rewritten
or replaced, another window, or a timeline cut at its span limit are drawn again too. Otherwise the kept
spans are those a cold read would draw.

Example::

    drawn = reused(cache, paths, window)      # None: draw it again (and keep() what is drawn)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lens_rl.offline.read.tree import rows_tree
from lens_rl.offline.run.disk import cache_key, json_bytes, read_bytes, write_atomic
from lens_rl.offline.run.index import complete_end, file_identity, grown_only, tail_hash
from lens_rl.offline.run.kept import sealed, unsealed
from lens_rl.store import Head, ReadStats, loads, read_head, scan

__all__ = ["KEPT", "file_mark", "keep", "reused"]

KEPT = "timeline.json"


def file_mark(
    path: str | os.PathLike[str], rows: Sequence[tuple[Head, Any]], parents: Any, drawn: Sequence[int], end: int
) -> dict[str, Any]:
    """What a kept timeline keeps of one file whose lines up to ``end`` (a line's end, taken before they were
    read) were drawn from ``rows`` (their tree ``parents``; ``drawn``: the rows drawn): its identity and
    where the read stopped, the ids of the drawn spans and their ancestors, the parent ids their chains end at."""
    ids: set[Any] = set()
    open_ends: set[Any] = set()
    for n in drawn:
        j = n
        while rows[j][1].s not in ids:  # (up its chain, to the top or to a span walked already)
            ids.add(rows[j][1].s)
            if parents[j] == -1:
                row = rows[j][1]
                if row.p is not None and not row.pr:
                    open_ends.add(row.p)
                break
            j = parents[j]
    head = rows[-1][0] if rows else read_head(path)[0]  # (the header the file's last span is under)
    stat, identity = file_identity(path)
    return {
        "name": Path(path).name,
        "state": [*identity, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns],
        "end": end,
        "tail": tail_hash(path, end).hex(),
        "head": None if head is None else head.header,
        "ids": sorted(ids, key=repr),
        "open": sorted(open_ends, key=repr),
    }


def keep(folder: str, window: Any, timeline: list[dict[str, Any]], marks: Sequence[dict[str, Any] | None]) -> None:
    """Keep a timeline just drawn, every process's spans (none where a file's spans were cut at the limit:
    ``marks`` holds a None)."""
    if any(mark is None for mark in marks):
        return
    files = {mark["name"]: mark for mark in marks if mark is not None}
    kept = {"key": cache_key(), "window": window, "timeline": timeline, "files": files}
    data = sealed(json_bytes(kept))
    if data is not None:
        write_atomic(Path(folder) / KEPT, data)


def reused(folder: str, paths: Sequence[Path], window: Any) -> list[dict[str, Any]] | None:
    """The kept timeline (every process's spans), where the lines appended since it was drawn cannot change
    it (kept again, marked at their end); None: draw it again."""
    kept = _kept(folder, window)
    if kept is None:
        return None
    files: dict[str, Any] = kept["files"]
    if not set(files) <= {Path(path).name for path in paths}:
        return None  # (a file drawn from is gone: its spans are no longer the store's)
    ids = {i for mark in files.values() for i in mark["ids"]}
    open_ends = {i for mark in files.values() for i in mark["open"]}
    marks: list[dict[str, Any] | None] = []
    for path in paths:
        mark = _grown(path, files.get(Path(path).name), window, ids, open_ends)
        if mark is None:
            return None
        marks.append(mark)
    keep(folder, window, kept["timeline"], marks)
    return list(kept["timeline"])


def _kept(folder: str, window: Any) -> dict[str, Any] | None:
    """The timeline kept in ``folder`` for ``window`` by this user's lens_rl (sealed), or None."""
    try:
        data = unsealed(read_bytes(Path(folder) / KEPT))
        kept = None if data is None else loads(data)
    except (OSError, ValueError, RecursionError):
        return None
    if type(kept) is not dict or kept.get("key") != cache_key():
        return None
    return kept if kept.get("window") == (list(window) if window is not None else None) else None


def _grown(
    path: Path, mark: dict[str, Any] | None, window: Any, ids: set[Any], open_ends: set[Any]
) -> dict[str, Any] | None:
    """``mark`` brought to the file's end, or None where its new lines can change the timeline (or the file
    is not the one marked)."""
    try:
        stat, identity = file_identity(path)
        state = [*identity, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
        end = complete_end(path, stat.st_size)
        start = _resumed(path, mark, stat, state)
    except OSError:
        return None
    if start is None:
        return None
    met: list[Head] = []
    head = Head(mark["head"]) if mark is not None and mark["head"] is not None else None
    rows = [(h, row) for h, row, _at, _size in scan(path, ReadStats(), start=start, head=head, stop=end, heads=met)]
    if _touches(rows, window, ids, open_ends):
        return None
    last = met[-1] if met else head
    out: dict[str, Any] = dict(mark) if mark is not None else {"name": path.name, "ids": [], "open": []}
    out.update(state=state, end=end, tail=tail_hash(path, end).hex(), head=None if last is None else last.header)
    return out


def _resumed(path: Path, mark: dict[str, Any] | None, stat: os.stat_result, state: list[Any]) -> int | None:
    """Where the new lines of the file start (0: a file the timeline never read), or None where it is not
    the file marked, grown at most (another identity, shrunk, rewritten: :func:`grown_only`; no header)."""
    if mark is None:
        return 0
    was = mark["state"]
    if was[:3] != state[:3] or not grown_only(path, stat, was[3:], mark["end"], bytes.fromhex(mark["tail"])):
        return None
    return None if mark["end"] and mark["head"] is None else int(mark["end"])


def _touches(rows: list[tuple[Head, Any]], window: Any, ids: set[Any], open_ends: set[Any]) -> bool:
    """Whether new ``rows`` can change the timeline (see the module docstring)."""
    if not rows:
        return False
    parents, steps, _cycles = rows_tree([row for _, row in rows])
    for n, (_head, row) in enumerate(rows):
        step = steps[n]
        if row.s in open_ends or window is None or (type(step) is int and window[0] <= step <= window[1]):
            return True
        if step is None and rows[_top(parents, n)][1].p in ids:
            return True
    return False


def _top(parents: Any, n: int) -> int:
    """The top of row ``n``'s chain among the rows (``parents``: -1 where it leaves them)."""
    while parents[n] != -1:
        n = parents[n]
    return n
