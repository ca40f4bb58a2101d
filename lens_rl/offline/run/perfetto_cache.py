"""Perfetto's entries in the refresh cache (``<cache>/<file>.perfetto-<fmt>``): per span file, its rendered
events under the options that drew them (:func:`render_key`), and where a grown file's new lines may be drawn
after them. A file as an earlier look left it costs no read; a file that only grew is read from where that look
stopped (Chrome JSON without ``--steps``: a span's event is its own line, whatever its parent; a protobuf's
lanes and a window's steps depend on every span, so such a file is drawn again whole).

An entry is a kept answer used as it is, so it is sealed with the user's secret
(:func:`~lens_rl.offline.run.kept.sealed`), then typed data (:mod:`~lens_rl.offline.run.perfetto_records`)
validated as it is decoded: one planted, cut short or of another version is named in one line and the file is
drawn cold.

Example::

    entry, why = load_entry(where, render_key(opts, number, callers), identity)
"""

from __future__ import annotations

import hashlib
import os
from array import array
from collections.abc import Iterator, Mapping
from itertools import compress
from pathlib import Path
from typing import Any

from lens_rl._version import __version__
from lens_rl.offline.read.runs import from_hex
from lens_rl.offline.run.disk import FORMAT
from lens_rl.offline.run.index import file_identity
from lens_rl.offline.run.perfetto import Chunk, Options, locate_file
from lens_rl.offline.run.perfetto_records import EntryRec, chunk_from, chunk_record, load_sealed, save_sealed
from lens_rl.offline.run.record_codec import VERSION, array_of, raw
from lens_rl.offline.run.settled_ids import id_key, merged_ids, unsettled
from lens_rl.store import Head, ReadStats, Row, scan_runs, unseen

__all__ = [
    "cached_locate",
    "entry_path",
    "ids_column",
    "ids_from",
    "load_entry",
    "read_rows",
    "render_key",
    "save_entry",
    "sorted_ids",
]

#: the layout of this kind's records (2: a chunk keeps its last end, ``ChunkRec.last``); an entry of another is
#: named in one line and its file drawn cold
ENTRY_VERSION = 2
_MAGIC = f"lens_rl.perfetto/{VERSION}.{ENTRY_VERSION}\n".encode()


def render_key(opts: Options, number: int, callers: bool) -> str:
    """What a file's events depend on besides its lines: lens_rl's version, the format, the window, the group,
    the processes' numbers, the origin, the file's number and whether every span of it is located."""
    processes = sorted((tuple(map(repr, key)), pid) for key, pid in opts.processes.items())
    return repr((__version__, FORMAT, opts.fmt, opts.steps, opts.group, processes, opts.origin, number, callers))


def entry_path(folder: str, path: str | os.PathLike[str], opts: Options, kind: str | None = None) -> Path:
    """Where a file's entry for ``opts`` is: one per format (or ``kind``), and one for a second pass
    (``opts.again``)."""
    return Path(folder) / f"{Path(path).name}.perfetto-{kind or opts.fmt}{'-again' if opts.again else ''}"


def cached_locate(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """:func:`~lens_rl.offline.run.perfetto.locate_file` through the cache in ``opts.cache``: a file as the last
    look left it, asked for the same spans, is not read (what is wanted changes as the run grows: then the
    file is read whole, as a cold read reads it)."""
    assert opts.cache is not None
    try:
        stat, identity = file_identity(path)
    except OSError:
        return locate_file(path, opts)
    wanted = hashlib.sha1("\n".join(sorted(opts.wanted)).encode()).hexdigest()
    key = f"{render_key(opts, 0, False)}|{wanted}"
    where = entry_path(opts.cache, path, opts, "where")
    rec, why = load_entry(where, key, identity)
    state = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    chunk = None
    if rec is not None and (rec.size, rec.mtime_ns, rec.ctime_ns) == state:
        try:
            chunk = chunk_from(rec.chunk)
        except ValueError as exc:  # sealed by this user, yet wrong inside: never trusted
            why = f"corrupt ({type(exc).__name__})"
    if chunk is None:
        chunk = locate_file(path, opts)
        save_entry(where, EntryRec(key, identity, *state, chunk_record(chunk, b""), None))  # type: ignore[arg-type]
    if why is not None:
        chunk.notes.append(f"{where.name}: {why}")
    return chunk


def load_entry(where: Path, key: str, identity: tuple[Any, ...]) -> tuple[EntryRec | None, str | None]:
    """The entry at ``where`` if this user's lens_rl kept it for this file and these options; else None and
    why, where that is worth a line (None: none kept, another file under the name, other options)."""
    rec, why = load_sealed(where, _MAGIC, EntryRec, identity)
    if rec is not None and rec.key != key:
        return None, None if rec.key.startswith(repr((__version__,))[:-1]) else "of another lens_rl version"
    return rec, why


def save_entry(where: Path, rec: EntryRec) -> None:
    """Keep ``rec`` at ``where``, sealed (:func:`~lens_rl.offline.run.perfetto_records.save_sealed`)."""
    save_sealed(where, _MAGIC, rec)


def ids_column(ids: Any) -> Any:
    """Sorted span ids (:func:`~lens_rl.offline.run.settled_ids.merged_ids`) as a record holds them."""
    return raw(ids, "Q") if type(ids) is array else list(ids)


def ids_from(column: Any) -> Any:
    """The sorted span ids a record holds (ValueError: a buffer cut mid-item)."""
    return array_of("Q", column) if type(column) is memoryview else list(column)


def read_rows(
    path: str | os.PathLike[str],
    stop: int,
    start: int = 0,
    head: Mapping[str, Any] | None = None,
    drawn: Any = None,
    met: list[Any] | None = None,
    heads: list[Head] | None = None,
) -> Iterator[tuple[Head, Row]]:
    """``(head, row)`` for the span lines of a file up to byte ``stop``, as :func:`lens_rl.store.iter_rows`
    yields them: from its start, or from ``start`` under the header ``head`` (a read going on where an earlier one
    stopped), a span id met before skipped (``drawn``: the sorted ids earlier reads met); each id yielded is
    appended to ``met``, each header met to ``heads``."""
    under = None if head is None else Head(head)
    seen: set[Any] = set()
    for run_head, rows, _at, _size in scan_runs(path, ReadStats(), start=start, head=under, stop=stop, heads=heads):
        if drawn is not None and len(drawn):
            keep = unsettled(drawn, [row.s for row in rows])
            if not all(keep):
                rows = list(compress(rows, keep))
        _repeats, rows, _places = unseen(seen, rows)
        if met is not None:
            met.extend(row.s for row in rows)
        for row in rows:
            yield run_head, row


def sorted_ids(drawn: Any, met: list[Any]) -> Any:
    """The sorted ids of ``drawn`` with those ``met`` (as lines hold them): in bulk where they are all lens_rl's
    16 hex digits (numpy, as :func:`~lens_rl.offline.run.settled_ids.unsettled` reads them), else one by one
    (:func:`~lens_rl.offline.run.settled_ids.merged_ids`)."""
    if type(drawn) is array and met and all(type(i) is str and len(i) == 16 for i in met):
        numbers = from_hex(met)  # (None: not all lens_rl's form)
        if numbers is not None:
            import numpy as np

            ids = np.concatenate([np.frombuffer(drawn, np.uint64), np.frombuffer(numbers, np.uint64)])
            ids.sort()
            return array("Q", ids.tobytes())
    return merged_ids(drawn, [id_key(i) for i in met])
