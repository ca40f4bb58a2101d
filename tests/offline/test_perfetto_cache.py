"""Perfetto's cache entries: keyed by every option that changes a file's events, read back only for their own file, and a read going on skips spans drawn before."""

from __future__ import annotations

import dataclasses
import os
from array import array
from pathlib import Path

import pytest

from lens_rl.offline.run import kept
from lens_rl.offline.run.index import file_identity
from lens_rl.offline.run.perfetto import Chunk, Options
from lens_rl.offline.run.perfetto_cache import entry_path, load_entry, read_rows, render_key, save_entry
from lens_rl.offline.run.perfetto_records import EntryRec, chunk_record
from lens_rl.offline.run.settled_ids import id_key
from lens_rl.store import Process
from tests.stores import grow_store


def test_the_key_changes_with_every_option_that_changes_a_files_events() -> None:
    """Format, window, group, the processes' numbers, the origin, the file's number and its callers flag
    each make another key (an entry drawn under other options is never used)."""
    base = Options("json", {Process("d", 0, 1, 0, True): 1}, 100)
    keys = {
        render_key(base, 1, False),
        render_key(dataclasses.replace(base, fmt="pftrace"), 1, False),
        render_key(dataclasses.replace(base, steps=(1, 2)), 1, False),
        render_key(dataclasses.replace(base, group="d"), 1, False),
        render_key(dataclasses.replace(base, processes={Process("d", 0, 1, 0, True): 2}), 1, False),
        render_key(dataclasses.replace(base, origin=99), 1, False),
        render_key(base, 2, False),
        render_key(base, 1, True),
    }
    assert len(keys) == 8
    assert render_key(dataclasses.replace(base, spill="/x", wanted=frozenset({"a"})), 1, False) in keys


def test_an_entry_is_read_back_only_for_its_own_file_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept entry comes back for its file and key; another file under the name or other options read as
    none, quietly; without the user's key nothing is kept."""
    monkeypatch.setattr(kept, "_KEY", os.urandom(32))
    run = tmp_path / "r"
    grow_store(run, 0, 2)
    path = run / "spans-driver-0-1.jsonl"
    _stat, identity = file_identity(path)
    opts = Options("json", {}, 0)
    where = entry_path(str(tmp_path), path, opts)
    key = render_key(opts, 1, False)
    rec = EntryRec(key, identity, 1, 2, 3, chunk_record(Chunk(), b"e"), None)  # type: ignore[arg-type]
    save_entry(where, rec)
    assert load_entry(where, key, identity)[0] == rec
    assert load_entry(where, render_key(opts, 2, False), identity) == (None, None)
    assert load_entry(where, key, (0, 0, "x")) == (None, None)
    where.unlink()
    monkeypatch.setattr(kept, "_user_key", lambda make=True: None)
    save_entry(where, rec)
    assert not where.exists()


def test_a_read_going_on_skips_the_spans_drawn_before_and_repeats(tmp_path: Path) -> None:
    """Rows read from an offset under the header in effect there skip ids an earlier read drew (sorted) and
    a repeat within the new lines, as a cold read keeps a span id's first line."""
    run = tmp_path / "r"
    grow_store(run, 0, 3)
    path = run / "spans-driver-0-1.jsonl"
    whole = [row.s for _, row in read_rows(path, path.stat().st_size)]
    size = path.stat().st_size
    lines = path.read_bytes().splitlines(keepends=True)
    with path.open("ab") as handle:
        handle.write(lines[1] + lines[-1] + lines[-1])  # two repeats of earlier lines, one twice
    heads: list = []
    met: list = []
    rows = read_rows(path, size, heads=heads)
    list(rows)
    drawn = array("Q", sorted(id_key(s) for s in whole))
    new = list(read_rows(path, path.stat().st_size, size, heads[-1].header, drawn, met))
    assert new == [] and met == []


def test_the_ids_drawn_are_kept_sorted_in_bulk_or_one_by_one() -> None:
    """lens_rl's hex ids are merged in bulk, any other id one by one, both as the cache's other entries keep
    them (sorted, as ints where they are 16 hex digits)."""
    from lens_rl.offline.run.perfetto_cache import sorted_ids
    from lens_rl.offline.run.settled_ids import merged_ids

    drawn = array("Q", [5, 2**63 + 7])
    met = ["00000000000000ff", "0000000000000001", "ffffffffffffffff"]
    assert sorted_ids(drawn, met) == merged_ids(drawn, [id_key(i) for i in met])
    assert list(sorted_ids(drawn, met)) == [1, 5, 255, 2**63 + 7, 2**64 - 1]
    odd = ["zz", "0000000000000003", 12]
    assert sorted_ids(drawn, odd) == merged_ids(drawn, [id_key(i) for i in odd])
