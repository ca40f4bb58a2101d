"""One file's events: its rows walked (:class:`~lens_rl.offline.run.perfetto.Places`) into the chosen format.

Example::

    chunk = render_file(path, opts)     # events (or a spilled file), the calls seen, the callers located
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

from lens_rl.offline.run.perfetto import Chunk, Options, Places, Rows, file_rows
from lens_rl.offline.show.perfetto.chrome import json_events
from lens_rl.offline.show.perfetto.proto import proto_events

__all__ = ["grouped", "render_file", "render_rows", "spilled"]


def grouped(rows: Rows, opts: Options) -> Rows:
    """``rows`` of ``opts.group``'s processes (all without a group cut)."""
    if opts.group is None:
        return rows
    group = opts.group
    return (r for r in rows if r[0].process.group == group)


def render_rows(rows: Rows, opts: Options, callers: bool, number: int) -> Chunk:
    """The events of ``rows`` (one file's) in ``opts.fmt``, in the chunk's ``data`` or (``opts.spill``) a file
    there."""
    chunk = Chunk()
    rows = grouped(rows, opts)
    render = json_events if opts.fmt == "json" else proto_events
    places = Places(opts, chunk, callers, number)
    if opts.spill is None:
        sink: Any = io.BytesIO()
        render(rows, places, sink.write)
        chunk.data = sink.getvalue()
    else:
        with tempfile.NamedTemporaryFile("wb", dir=opts.spill, suffix=".part", delete=False) as sink:
            chunk.path = sink.name
            render(rows, places, sink.write)
    return chunk


def spilled(chunk: Chunk, opts: Options) -> Chunk:
    """``chunk`` with its events in a file of ``opts.spill`` (where there is one), not in ``data``."""
    if opts.spill is not None and chunk.data:
        with tempfile.NamedTemporaryFile("wb", dir=opts.spill, suffix=".part", delete=False) as sink:
            chunk.path = sink.name
            sink.write(chunk.data)
        chunk.data = b""
    return chunk


def render_file(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """One file's events. Chrome JSON streams (memory flat however large the file); the protobuf keeps
    what its packets need of each span (nested lanes), a ``steps`` window the whole rows (each
    span's step from its ancestors). A driver's file (``opts.callers``) has every span located (through the
    refresh cache: :func:`.refresh.cached_render`)."""
    number, callers = opts.numbers.get(str(path), 0), str(path) in opts.callers
    return render_rows(file_rows(path, opts.steps), opts, callers, number)
