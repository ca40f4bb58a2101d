"""Perfetto's first looks through the cache: the processes and first start a cold scan finds, a grown file read from where the last look stopped, a bad record one note and a cold read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lens_rl.offline.run import kept
from lens_rl.offline.run.perfetto import scan_file
from lens_rl.offline.run.perfetto_scans import cached_scan
from lens_rl.store import Process
from tests.stores import grow_store, header, span


@pytest.fixture(autouse=True)
def _own_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records sealed with a key of this test's own (the user's key file is not touched)."""
    monkeypatch.setattr(kept, "_KEY", os.urandom(32))


def _same(path: Path, folder: Path) -> None:
    scan, cold = cached_scan(path, str(folder)), scan_file(path)
    assert (scan.keys, scan.origin, scan.driver) == (cold.keys, cold.origin, cold.driver)


def test_a_scan_through_the_cache_is_a_cold_scan_as_the_file_grows(tmp_path: Path) -> None:
    """First, unchanged, grown by a header of another attempt, a repeated line and an earlier start: each
    look finds what a cold scan finds."""
    run, folder = tmp_path / "r", tmp_path / "cache"
    folder.mkdir()
    grow_store(run, 0, 4)
    path = run / "spans-lm_policy-0-100.jsonl"
    _same(path, folder)
    _same(path, folder)
    first = path.read_bytes().splitlines(keepends=True)[1]
    with path.open("ab") as handle:
        handle.write(json.dumps(header("lm_policy", 0, 100, **{"rl.attempt": 2})).encode() + b"\n")
        handle.write(first)  # (a repeat: skipped, under either header)
        handle.write(json.dumps(span("late", -5.0, -4.0, "late-1")).encode() + b"\n")
    _same(path, folder)
    scan = cached_scan(path, str(folder))
    assert Process("lm_policy", 0, 100, 2, False) in scan.keys and not scan.notes


def test_a_bad_record_is_one_note_and_a_cold_scan(tmp_path: Path) -> None:
    """A record cut short or not sealed by this user, garbage, or of another version: named in a note, the scan
    a cold one's."""
    run, folder = tmp_path / "r", tmp_path / "cache"
    folder.mkdir()
    grow_store(run, 0, 3)
    path = run / "spans-driver-0-1.jsonl"
    cached_scan(path, str(folder))
    record = folder / f"{path.name}.perfetto-scan"
    data = record.read_bytes()
    for bad, why in (
        (data[:-7], "not sealed"),
        (b"garbage", "not a lens_rl cache"),
        (b"lens_rl.perfetto-scan/0\n" + data.split(b"\n", 1)[1], "another lens_rl version"),
    ):
        record.write_bytes(bad)
        scan = cached_scan(path, str(folder))
        assert len(scan.notes) == 1 and why in scan.notes[0]
        assert scan.keys == scan_file(path).keys
    kept._KEY = os.urandom(32)  # (another user's key: restored by the fixture's monkeypatch)
    cached_scan(path, str(folder))
    kept._KEY = os.urandom(32)
    assert "not sealed" in cached_scan(path, str(folder)).notes[0]
