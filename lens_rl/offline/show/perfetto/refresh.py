"""One file's events through the refresh cache (SPEC "Refresh"): a file as the last look left it is not read
(its kept events are the answer); one that only grew is read from where that look stopped, its new spans'
events drawn after the kept ones (no ``--steps`` window: Chrome JSON's every span's event is a line of its
own, whatever its parent, so a child whose parent is not written yet needs nothing held; a protobuf's thread
goes on where its new spans sort after its kept ones, :mod:`.proto_more`); any other is drawn whole and
kept. The events are a cold read's, byte for byte. The entries are :mod:`~lens_rl.offline.run.perfetto_cache`'s.

Example::

    chunk = cached_render(path, dataclasses.replace(opts, cache=cache_folder(run_dir)))
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
from array import array
from collections.abc import Sequence
from typing import Any

from lens_rl.offline.run.index import complete_end, file_identity, grown_only, tail_hash
from lens_rl.offline.run.perfetto import Calls, Chunk, Options, Places, Rows, file_rows
from lens_rl.offline.run.perfetto_cache import (
    entry_path,
    ids_column,
    ids_from,
    load_entry,
    read_rows,
    render_key,
    save_entry,
    sorted_ids,
)
from lens_rl.offline.run.perfetto_records import (
    EntryRec,
    GoOnRec,
    SectionRec,
    chunk_from,
    chunk_record,
    places_from,
    places_record,
)
from lens_rl.offline.show.perfetto.chrome import json_body, json_tail
from lens_rl.offline.show.perfetto.proto_more import proto_more
from lens_rl.offline.show.perfetto.render import grouped, render_rows, spilled

__all__ = ["cached_render", "say_notes"]

_log = logging.getLogger("lens_rl")


def say_notes(notes: Sequence[str]) -> None:
    """The cache entries a look did not use, said once on stderr (the trace is the same either way)."""
    if notes:
        more = ", ..." if len(notes) > 1 else ""
        _log.warning("lens-rl: %d cache file(s) not used (%s%s): read cold", len(notes), notes[0], more)


class _File:
    """One file as this look found it: its path, number and callers flag, stat, identity and whole lines' end."""

    def __init__(self, path: str | os.PathLike[str], opts: Options) -> None:
        self.path = path
        self.number, self.callers = opts.numbers.get(str(path), 0), str(path) in opts.callers
        self.stat, self.identity = file_identity(path)
        self.end = complete_end(path, self.stat.st_size)


def cached_render(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """:func:`~.render.render_file` through the cache in ``opts.cache``: what is new is read, the events are a
    cold read's."""
    assert opts.cache is not None
    try:
        file = _File(path, opts)
    except OSError:  # gone or unreadable since it was listed: a cold read says so
        return render_rows(file_rows(path, opts.steps), opts, *_flags(path, opts))
    if file.end != file.stat.st_size:  # a last line still being written: drawn as a cold read draws it, not kept
        return render_rows(file_rows(path, opts.steps), opts, file.callers, file.number)
    key = render_key(opts, file.number, file.callers)
    where = entry_path(opts.cache, path, opts)
    rec, why = load_entry(where, key, file.identity)
    chunk: Chunk | None = None
    if rec is not None:
        try:
            chunk, rec = _from_entry(file, opts, rec, key)
        except Exception as exc:  # an entry sealed by this user, yet wrong inside: never trusted
            why, chunk = f"corrupt ({type(exc).__name__})", None
    if chunk is None:
        chunk, rec = _drawn(file, opts, key)
    if rec is not None:
        save_entry(where, rec)
    if why is not None:
        chunk.notes.append(f"{where.name}: {why}")
    return spilled(chunk, opts)


def _flags(path: str | os.PathLike[str], opts: Options) -> tuple[bool, int]:
    return str(path) in opts.callers, opts.numbers.get(str(path), 0)


def _state(file: _File) -> tuple[int, int, int]:
    return file.stat.st_size, file.stat.st_mtime_ns, file.stat.st_ctime_ns


def _from_entry(file: _File, opts: Options, rec: EntryRec, key: str) -> tuple[Chunk | None, EntryRec | None]:
    """The chunk ``rec`` keeps (the file unchanged: None for the entry, nothing to save), or drawn on from it
    (the file only grew, and ``rec`` can go on); (None, None): drawn whole."""
    if (rec.size, rec.mtime_ns, rec.ctime_ns) == _state(file):
        return chunk_from(rec.chunk), None
    go = rec.go_on
    if go is None or not grown_only(file.path, file.stat, (rec.size, rec.mtime_ns, rec.ctime_ns), go.end, go.tail):
        return None, None
    chunk = chunk_from(rec.chunk)
    spans, first, last = chunk.spans, chunk.first, chunk.last
    chunk.data, chunk.callees = b"", Calls()  # (every call numbered again, the new ones after)
    places = Places(opts, chunk, file.callers, file.number)
    places_from(go, places)
    drawn = _draw(file, opts, key, chunk, places, (rec.chunk.data, go), spans, (first, last))
    return drawn if drawn is not None else (None, None)


def _drawn(file: _File, opts: Options, key: str) -> tuple[Chunk, EntryRec | None]:
    """The file drawn whole (up to its last whole line), and its entry."""
    if opts.steps is None:
        chunk = Chunk()
        places = Places(opts, chunk, file.callers, file.number)
        drawn = _draw(file, opts, key, chunk, places, None, 0, (chunk.first, chunk.last))
        assert drawn is not None  # (nothing kept: nothing a new span sorts before)
        return drawn
    rows = file_rows(file.path, opts.steps, read_rows(file.path, file.end))
    chunk = render_rows(rows, dataclasses.replace(opts, spill=None), file.callers, file.number)
    return chunk, _entry(file, key, chunk, chunk.data, None)


def _draw(
    file: _File,
    opts: Options,
    key: str,
    chunk: Chunk,
    places: Places,
    kept: tuple[bytes, GoOnRec] | None,
    spans: int,
    window: tuple[int, int],
) -> tuple[Chunk, EntryRec] | None:
    """The events of the lines after where ``kept``'s read stopped (its events and how to go on; None: from
    the file's start) after its events; the chunk and its entry (with how to go on); None where the
    protobuf's must be drawn whole (:func:`~.proto_more.proto_more`)."""
    met: list[Any] = []
    heads: list[Any] = []
    go = None if kept is None else kept[1]
    if go is None:
        rows = read_rows(file.path, file.end, met=met, heads=heads)
    else:
        drawn_ids = ids_from(go.ids)
        rows = read_rows(file.path, file.end, go.end, go.head, drawn_ids, met, heads)
    if opts.fmt == "json":
        data, body, called, sections = _json(grouped(rows, opts), places, kept)
    else:
        more = proto_more(grouped(rows, opts), places, *_proto_kept(kept), spans)
        if more is None:
            return None
        (data, body, parts), called = more, 0
        sections = [SectionRec(*part) for part in parts]
    chunk.spans += spans
    chunk.first, chunk.last = min(chunk.first, window[0]), max(chunk.last, window[1])
    chunk.data = data
    head = heads[-1].header if heads else None if go is None else go.head
    if head is None:  # (no header: not a store file, nothing to go on from)
        return chunk, _entry(file, key, chunk, data, None)
    go_on = GoOnRec(
        end=file.end,
        tail=tail_hash(file.path, file.end),
        head=dict(head),
        ids=ids_column(sorted_ids(array("Q") if go is None else drawn_ids, met)),
        body=body,
        called=called,
        **places_record(places),
        sections=sections,
    )
    return chunk, _entry(file, key, chunk, data, go_on)


def _json(rows: Rows, places: Places, kept: tuple[bytes, GoOnRec] | None) -> tuple[bytes, int, int, None]:
    """Chrome JSON: the span events of ``rows`` after those kept, then the callee ends kept, those of the new
    calls and the names; the bytes, and the lengths of the span events and of the callee ends."""
    if kept is None:
        body, called, calls = b"", b"", 0
    else:
        data, go = kept
        body, called, calls = data[: go.body], data[go.body : go.body + go.called], len(go.call_ids)
    sink = io.BytesIO()
    sink.write(body)
    json_body(rows, places, sink.write)
    length = sink.tell()
    new_called, names = json_tail(places, calls)
    sink.write(called)
    sink.write(new_called)
    called_length = sink.tell() - length
    sink.write(names)
    return sink.getvalue(), length, called_length, None


def _proto_kept(kept: tuple[bytes, GoOnRec] | None) -> tuple[bytes, int, list[Any]]:
    """The protobuf's kept bytes, the length of their tracks' descriptors and their threads' parts."""
    if kept is None:
        return b"", 0, []
    data, go = kept
    if go.sections is None:
        raise ValueError("a protobuf's entry with no threads' parts")
    return data, go.body, go.sections


def _entry(file: _File, key: str, chunk: Chunk, data: bytes, go_on: GoOnRec | None) -> EntryRec:
    size, mtime_ns, ctime_ns = _state(file)
    return EntryRec(key, file.identity, size, mtime_ns, ctime_ns, chunk_record(chunk, data), go_on)  # type: ignore[arg-type]
