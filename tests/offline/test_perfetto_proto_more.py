"""A grown file's protobuf from the kept one: byte for byte the whole file's, and None where a new span sorts before a kept one."""

from __future__ import annotations

import io
import json
from pathlib import Path

from lens_rl.offline.run.perfetto import Chunk, Places, head_file, options
from lens_rl.offline.run.perfetto_cache import read_rows
from lens_rl.offline.show.perfetto.proto import proto_events
from lens_rl.offline.show.perfetto.proto_more import proto_more
from lens_rl.store import iter_rows
from tests.stores import grow_store, span


def _whole(path: Path, opts: object) -> bytes:
    sink = io.BytesIO()
    proto_events(iter_rows(path), Places(opts, Chunk(), True, 1), sink.write)  # type: ignore[arg-type]
    return sink.getvalue()


def test_new_spans_go_on_after_the_kept_ones_or_the_file_is_drawn_whole(tmp_path: Path) -> None:
    """Steps appended: the kept bytes and the new slices are the whole file's trace; a span starting before
    the kept ones (a parent written late): None, the file drawn whole."""
    run = tmp_path / "r"
    grow_store(run, 0, 4)
    path = run / "spans-driver-0-1.jsonl"
    opts = options([head_file(path)], "pftrace", None, None, [path], frozenset({str(path)}))
    places = Places(opts, Chunk(), True, 1)
    end = path.stat().st_size
    kept, head, parts = proto_more(read_rows(path, end), places, b"", 0, [], 0)  # type: ignore[misc]
    assert kept == _whole(path, opts)
    grow_store(run, 4, 6)
    heads: list = []
    list(read_rows(path, end, heads=heads))
    more = proto_more(read_rows(path, path.stat().st_size, end, heads[-1].header), places, kept, head, parts, 16)
    assert more is not None and more[0] == _whole(path, opts)
    early = json.dumps(span("late_parent", -1.0, 100.0, "late")) + "\n"
    size = path.stat().st_size
    with path.open("a") as handle:
        handle.write(early)
    fresh = Places(opts, Chunk(), True, 1)
    kept, head, parts = proto_more(read_rows(path, size), fresh, b"", 0, [], 0)  # type: ignore[misc]
    with path.open("a") as handle:
        handle.write(json.dumps(span("later", -2.0, 1.0, "later")) + "\n")
    assert (
        proto_more(read_rows(path, path.stat().st_size, size, heads[-1].header), fresh, kept, head, parts, 25) is None
    )
