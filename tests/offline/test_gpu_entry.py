"""A sample file's kept entry read straight into its blocks' arrays: a file that grew, again and again (a bad
line and a new header among the new lines), reads through the cache as a cold read does, each device's rows
contiguous; a broken or planted entry is no entry (a cold read, the same samples)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lens_rl.offline.read import gpu_samples
from lens_rl.offline.read.gpu_samples import read_samples
from lens_rl.offline.run.gpu import read_file_blocks
from lens_rl.offline.run.gpu_entry import load_entry
from lens_rl.store import ReadStats
from tests.gpu_stores import device, write_samples
from tests.stores import at_ns


def _reading(t: float) -> list[list[float | None]]:
    return [[(t * 7 + i) % 101, 1, 2**30, 200, 1980, None, None, None] for i in range(2)]


def _lines(start: float, end: float, devices: int = 2) -> str:
    return "".join(
        json.dumps({"t": at_ns(int(round(t * 1e9))), "d": _reading(t)[:devices]}) + "\n"
        for t in np.arange(start, end, 0.5).tolist()
    )


def _same(got: list, want: list) -> None:
    assert [b.head for b in got] == [b.head for b in want]
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a.t, b.t) and np.array_equal(a.v, b.v, equal_nan=True)


@pytest.mark.parametrize("scanner", [True, False])
def test_a_file_grown_again_and_again_reads_through_its_entry_as_cold(
    tmp_path: Path, monkeypatch: Any, scanner: bool
) -> None:
    """Four looks at a file that grew between them (a bad line, then a new header with other devices) give
    the cold read's blocks every time, with the C scanner (each device's rows contiguous) and on the
    pure-Python path."""
    if not scanner:
        monkeypatch.setattr(gpu_samples, "_gpuscan", None)
    elif gpu_samples._gpuscan is None:
        pytest.skip("the C scanner is not built here (an install without a compiler reads on the pure-Python path)")
    devices = [device(f"GPU-{i}", i) for i in range(2)]
    path = write_samples(tmp_path, "n0", 7, devices, _reading, end_s=30.0)
    cache = tmp_path / "cache"
    cache.mkdir()
    later = json.loads(path.read_text().splitlines()[0])
    later["devices"] = [device("GPU-9", 0)]
    grow = [_lines(30, 40), "garbage\n" + _lines(40, 45), json.dumps(later) + "\n" + _lines(45, 50, 1)]
    for k in range(len(grow) + 1):
        got = read_file_blocks(path, ReadStats(), str(cache))
        _same(got, read_samples(path, ReadStats())[0])
        assert all(b.v[:, 0, :].flags.c_contiguous for b in got) or not scanner
        if k < len(grow):
            with path.open("a") as handle:
                handle.write(grow[k])
    meta, blocks, carry = load_entry(cache / f"gpu-{path.name}.samples", path.stat().st_size + 4000)
    assert carry is not None and carry[2] == blocks[-1].t.size and carry[0].size >= carry[2] + 4000 // 400


@pytest.mark.parametrize("harm", ["cut", "key", "layout", "fifo", "end", "overflow"])
def test_a_broken_or_planted_entry_is_no_entry(tmp_path: Path, harm: str) -> None:
    """An entry cut short, of another version or layout, or a FIFO in its place: load_entry raises; one whose
    end is planted leaves no room past the file's bytes; one whose end is past any integer (1e400) is no entry;
    the look reads the file cold (the same samples), never a crash or a hang."""
    path = write_samples(tmp_path, "n0", 7, [device("GPU-0")], lambda t: _reading(t)[:1], end_s=20.0)
    cache = tmp_path / "cache"
    cache.mkdir()
    read_file_blocks(path, ReadStats(), str(cache))
    entry = cache / f"gpu-{path.name}.samples"
    data = entry.read_bytes()
    meta, rest = data.split(b"\n", 1)
    if harm == "cut":
        entry.write_bytes(data[:-9])
    elif harm in ("key", "layout", "end"):  # (an end far before the file's start: no room allocated for it)
        plain = json.loads(meta)
        plain[harm] = -(10**15) if harm == "end" else "another"
        entry.write_bytes(json.dumps(plain).encode() + b"\n" + rest)
    elif harm == "overflow":
        plain = json.loads(meta)
        plain["end"] = 0
        entry.write_bytes(json.dumps(plain).encode().replace(b'"end": 0', b'"end": 1e400') + b"\n" + rest)
    else:
        entry.unlink()
        os.mkfifo(entry)
    if harm == "end":
        assert load_entry(entry, path.stat().st_size)[2][0].size == 40  # (its rows, no room more)
    elif harm != "overflow":
        with pytest.raises((OSError, ValueError)):
            load_entry(entry)
    _same(read_file_blocks(path, ReadStats(), str(cache)), read_samples(path, ReadStats())[0])
