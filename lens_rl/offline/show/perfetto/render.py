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

__all__ = ["render_file"]


def _render(rows: Rows, opts: Options, callers: bool, number: int) -> Chunk:
    chunk = Chunk()
    if opts.group is not None:
        group = opts.group
        rows = (r for r in rows if r[0].process.group == group)
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


def render_file(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """One file's events. Chrome JSON streams (memory flat however large the file); the protobuf keeps
    what its packets need of each span (nested lanes), a ``steps`` window the whole rows (each
    span's step from its ancestors). A driver's file (``opts.callers``) has every span located."""
    number, callers = opts.numbers.get(str(path), 0), str(path) in opts.callers
    return _render(file_rows(path, opts.steps), opts, callers, number)
