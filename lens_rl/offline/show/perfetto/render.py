"""One file's events: its rows walked (:class:`~lens_rl.offline.show.perfetto.places.Places`) into the chosen format.

Example::

    chunk = render_file(path, opts)     # events (or a spilled file), the calls seen, the callers located
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from lens_rl.offline.read.tree import steps_of_rows
from lens_rl.offline.show.perfetto.chrome import json_events
from lens_rl.offline.show.perfetto.places import Calls, Chunk, Options, Places, Rows
from lens_rl.offline.show.perfetto.proto import proto_events
from lens_rl.store import Head, Row, iter_rows

__all__ = ["locate_file", "render_file"]


def _in_window(rows: Sequence[tuple[Head, Row]], steps: tuple[int, int]) -> list[tuple[Head, Row]]:
    """The rows of the steps ``steps`` selects (each span's step by the tree rule: its own, else its nearest
    ancestor's; :mod:`lens_rl.offline.read.tree`)."""
    of, _cycles = steps_of_rows([row for _, row in rows])
    lo, hi = steps
    return [r for r, step in zip(rows, of, strict=True) if type(step) is int and lo <= step <= hi]


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
    if opts.steps is None:
        return _render(iter_rows(path), opts, callers, number)
    return _render(_in_window(list(iter_rows(path)), opts.steps), opts, callers, number)


def locate_file(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """The locations of the spans ``opts.wanted`` names in one file (no events)."""
    chunk = Chunk()
    for _ in Places(opts, chunk, False, 0).walk(iter_rows(path)):
        pass
    chunk.spans, chunk.callees = 0, Calls()
    return chunk
