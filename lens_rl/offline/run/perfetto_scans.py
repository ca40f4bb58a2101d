"""Perfetto's first looks read from every line (:func:`~lens_rl.offline.run.perfetto.scan_file`: a file whose
header does not bound its starts, or a run where a process re-initialised under another identity past a file's
first line) through the refresh cache (``<cache>/<file>.perfetto-scan``): a file as the last look left it is not
read, one that only grew is read from where that look stopped (a span id met before skipped, as a cold read
skips it), any other read whole. Typed data (:class:`~lens_rl.offline.run.perfetto_records.ScanRec`) behind the
user's seal (:func:`~lens_rl.offline.run.kept.seal_line`: the processes' numbers and the trace's origin come from
it), validated as it is decoded: one that is not is named in one line and the file read cold.

Example::

    scan = cached_scan(path, cache_folder(run_dir))   # == scan_file(path)
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path
from typing import Any

from lens_rl.offline.run.disk import cache_key
from lens_rl.offline.run.index import complete_end, file_identity, grown_only, tail_hash
from lens_rl.offline.run.perfetto import Scan, scan_file, scan_rows
from lens_rl.offline.run.perfetto_cache import ids_column, ids_from, read_rows, sorted_ids
from lens_rl.offline.run.perfetto_records import ScanRec, load_sealed, save_sealed
from lens_rl.offline.run.record_codec import VERSION
from lens_rl.store import Process

__all__ = ["cached_scan"]

_MAGIC = f"lens_rl.perfetto-scan/{VERSION}\n".encode()


def cached_scan(path: str | os.PathLike[str], folder: str) -> Scan:
    """:func:`~lens_rl.offline.run.perfetto.scan_file` through the cache in ``folder``."""
    try:
        stat, identity = file_identity(path)
        end = complete_end(path, stat.st_size)
    except OSError:  # gone or unreadable since it was listed: a cold read says so
        return scan_file(path)
    if end != stat.st_size:  # a last line still being written: read as a cold read reads it, not kept
        return scan_file(path)
    where = Path(folder) / f"{Path(path).name}.perfetto-scan"
    rec, why = _load(where, identity)
    now = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    found: tuple[Scan, ScanRec] | None = None
    if rec is not None:
        try:
            if (rec.size, rec.mtime_ns, rec.ctime_ns) == now:
                return _scan_of(rec)
            if rec.head is not None and grown_only(
                path, stat, (rec.size, rec.mtime_ns, rec.ctime_ns), rec.end, rec.tail
            ):
                found = _read(path, identity, now, end, rec)
        except Exception as exc:  # wrong inside: never trusted
            why, found = f"corrupt ({type(exc).__name__})", None
    scan, fresh = found if found is not None else _read(path, identity, now, end, None)
    _save(where, fresh)
    if why is not None:
        scan.notes.append(f"{where.name}: {why}")
    return scan


def _scan_of(rec: ScanRec) -> Scan:
    return Scan({Process(*key) for key in rec.keys}, rec.origin, rec.driver)


def _read(
    path: str | os.PathLike[str], identity: Any, now: tuple[int, int, int], end: int, rec: ScanRec | None
) -> tuple[Scan, ScanRec]:
    """The file's scan, its lines read from where ``rec``'s read stopped (None: its start) to ``end``; its
    record."""
    met: list[Any] = []
    heads: list[Any] = []
    if rec is None:
        drawn: Any = array("Q")
        scan = scan_rows(read_rows(path, end, met=met, heads=heads))
    else:
        drawn = ids_from(rec.ids)
        scan = scan_rows(read_rows(path, end, rec.end, rec.head, drawn, met, heads))
        before = _scan_of(rec)
        scan.keys |= before.keys
        scan.driver = scan.driver or before.driver
        origins = [o for o in (scan.origin, before.origin) if o is not None]
        scan.origin = min(origins) if origins else None
    head = heads[-1].header if heads else None if rec is None else rec.head
    fresh = ScanRec(
        cache_key(),
        identity,
        *now,
        end,
        tail_hash(path, end),
        None if head is None else dict(head),
        ids_column(sorted_ids(drawn, met)),
        sorted(tuple(key) for key in scan.keys),  # type: ignore[misc]
        scan.origin,
        scan.driver,
    )
    return scan, fresh


def _load(where: Path, identity: Any) -> tuple[ScanRec | None, str | None]:
    """The record at ``where`` if it is this lens_rl's and this file's; else None and why (None: none kept,
    another file under the name)."""
    rec, why = load_sealed(where, _MAGIC, ScanRec, tuple(identity))
    if rec is not None and rec.key != cache_key():
        return None, "of another lens_rl version"
    return rec, why


def _save(where: Path, rec: ScanRec) -> None:
    save_sealed(where, _MAGIC, rec)  # (sealed as the drawn events are: one anybody else wrote reads as none)
