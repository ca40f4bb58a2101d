"""Sample files read in bulk: the same arrays as a line-by-line read, whatever the chunking, with nulls, odd
lines, a header again, a last line still being written, and a read resumed where an earlier one stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from lens_rl.offline.read import gpu_decode, gpu_samples
from lens_rl.offline.read.gpu_samples import read_samples
from lens_rl.store import ReadStats
from lens_rl.store.gpu import gpu_files, gpu_head
from tests.conftest import clean_env, lens
from tests.gpu_stores import device, write_samples, write_scripted_job
from tests.stores import at_ns, write_process


def _reading(t: float) -> list[Any]:
    return [[int(t * 10) % 101, 5, 10**9 + int(t), 250000, 1980, None, None, None], [1.5, 2, 3, 4, 5, 6, 7, 8]]


def _expected(path: Path) -> tuple[Any, Any]:
    """Times and values as a plain decode of every sample line gives them."""
    t, v = [], []
    for line in path.read_text().splitlines()[1:]:
        row = json.loads(line)
        t.append(row["t"])
        v.append([[np.nan if x is None else x for x in d] for d in row["d"]])
    return np.array(t), np.array(v, np.float32)


def test_bulk_reads_what_a_plain_decode_reads_in_any_chunking(tmp_path: Path, monkeypatch: Any) -> None:
    """Thousands of lines read in chunks of any size (a chunk boundary in mid-line included) give exactly the
    times and values a plain JSON decode gives, ``null`` as nan."""
    devices = [device("GPU-a"), device("GPU-b", 1)]
    path = write_samples(tmp_path, "n", 1, devices, _reading, end_s=1000, hz=5)
    want_t, want_v = _expected(path)
    for chunk in (4 << 20, 1000, 333):
        monkeypatch.setattr(gpu_samples, "_CHUNK", chunk)
        stats = ReadStats()
        (block,), end, head = read_samples(path, stats)
        assert np.array_equal(block.t, want_t) and np.array_equal(block.v, want_v, equal_nan=True)
        assert end == path.stat().st_size and head is not None and stats.lines == 5001 and stats.skipped == 0


def test_odd_lines_a_header_again_and_a_line_still_being_written(tmp_path: Path) -> None:
    """A device entry ``null`` reads nan for that device, a header again starts a block of its own devices, bad
    lines are counted, and a last line with no newline yet is left for the next read."""
    later = {"v": 1, "header": True, "format": "lens_rl.gpu/1", "hz": 1, "devices": [device("GPU-c")]}
    extra = [
        json.dumps({"t": at_ns(10**10), "d": [None, [1, 2, 3, 4, 5, 6, 7, 8]]}),
        "garbage",
        json.dumps(later),
        json.dumps({"t": at_ns(11 * 10**9), "d": [[7, 0, 1, 2, 3, None, None, None]]}),
    ]
    path = write_samples(tmp_path, "n", 1, [device("GPU-a"), device("GPU-b", 1)], _reading, end_s=3, extra=extra)
    with path.open("a") as handle:
        handle.write('{"t": 1700000012000000000, "d": [[1,')
    stats = ReadStats()
    first, second = read_samples(path, stats)[0]
    assert first.t.size == 7 and np.isnan(first.v[-1, 0]).all() and first.v[-1, 1, 0] == 1
    assert [d.uuid for d in second.head.devices] == ["GPU-c"] and second.head.hz == 1.0
    assert second.t.tolist() == [at_ns(11 * 10**9)] and stats.skipped == 1


def test_a_read_resumed_where_one_stopped_reads_the_rest(tmp_path: Path) -> None:
    """A read from a byte offset under the header in force there gives the samples after it: the two reads
    together are the whole file's."""
    path = write_samples(tmp_path, "n", 1, [device("GPU-a"), device("GPU-b", 1)], _reading, end_s=50)
    whole = read_samples(path, ReadStats())[0][0]
    lines = path.read_bytes().splitlines(keepends=True)
    middle = sum(map(len, lines[:40]))
    head_part, stop, head = read_samples(path, ReadStats(), stop=middle)
    rest, end, _ = read_samples(path, ReadStats(), start=stop, head=head)
    assert stop == middle and end == path.stat().st_size
    assert np.array_equal(np.concatenate([head_part[0].t, rest[0].t]), whole.t)


def test_headers_name_their_devices_or_are_none() -> None:
    """A header with devices reads them (their counters, the file's rate); another format, a list of no
    devices, garbage or an implausible rate read as no header or a default."""
    good = {"format": "lens_rl.gpu/1", "hz": 4, "host": "n", "devices": [device("GPU-a", has=["util"])]}
    head = gpu_head(json.dumps(good).encode())
    assert head is not None and head.hz == 4.0 and head.devices[0].has == ("util",)
    assert gpu_head(json.dumps({**good, "hz": 1e9}).encode()).hz == 2.0  # type: ignore[union-attr]
    # (a tiny configured rate: a sample stands for at most 1000 s, its period no overflow of the join)
    assert gpu_head(json.dumps({**good, "hz": 1e-300}).encode()).hz == 1e-3  # type: ignore[union-attr]
    assert gpu_head(json.dumps({**good, "format": "lens_rl.spans/2"}).encode()) is None
    assert gpu_head(json.dumps({**good, "devices": [{"i": 0}]}).encode()) is None
    assert gpu_head(b"[[[[") is None


def test_sample_files_and_span_files_are_never_taken_for_one_another(tmp_path: Path) -> None:
    """Span-file discovery lists no sample file and sample-file discovery no span file, in the same folder."""
    from lens_rl.store import span_files

    write_process(tmp_path, "actor", 0, 3, [])
    write_samples(tmp_path, "n", 1, [device("GPU-a")], _reading, end_s=1)
    assert [p.name for p in span_files(tmp_path)] == ["spans-actor-0-3.jsonl"]
    assert [p.name for p in gpu_files([tmp_path])] == ["gpu-n-1.jsonl"]


def _integers(t: float) -> list[Any]:
    return [
        [int(t * 10) % 101, None, 80 * 2**30 + int(t), 250000, 1980, None, None, None],
        [7, 3, 2**40, 1, 2] + [0] * 3,
    ]


def test_integer_lines_read_as_integers_give_what_a_plain_decode_gives(tmp_path: Path) -> None:
    """Lines of integers and nulls only (devices without GPM activity: the integer fast path) give exactly the
    times and values a plain decode gives; a negative value among them is still a bad line, skipped and counted."""
    devices = [device("GPU-a"), device("GPU-b", 1)]
    path = write_samples(tmp_path, "n", 1, devices, _integers, end_s=400, hz=5)
    want_t, want_v = _expected(path)
    assert gpu_decode._bulk_ints(path.read_bytes().split(b"\n", 1)[1], 2000, 2) is not None
    stats = ReadStats()
    (block,), _end, _head = read_samples(path, stats)
    assert np.array_equal(block.t, want_t) and np.array_equal(block.v, want_v, equal_nan=True)
    bad = json.dumps({"t": int(want_t[-1]) + 10**9, "d": [[-1, 0, 0, 0, 0, None, None, None]] * 2})
    with path.open("a") as out:
        out.write(bad + "\n")
    stats = ReadStats()
    (block,), _end, _head = read_samples(path, stats)
    assert block.t.size == 2000 and stats.skipped == 1


def test_a_value_past_float32_is_a_bad_line_said_once_never_a_warning(tmp_path: Path) -> None:
    """A sample value no float32 holds (1e39: a hostile or damaged file) is one bad line skipped and counted, in
    bulk or decoded alone: no numpy warning on stderr, and a look run with warnings as errors still answers."""
    run = write_scripted_job(tmp_path / "r1")
    [path] = [p for p in gpu_files([run]) if "node0" in p.name]
    with path.open("a") as handle:
        handle.write(json.dumps({"t": at_ns(30 * 10**9), "d": [[1, 1, 1e39, 1, 1, None, None, None]]}) + "\n")
        handle.write(json.dumps({"d": [[1, 1, 1, 1e39, 1, None, None, None]], "t": at_ns(31 * 10**9)}) + "\n")
    out = lens("goodput", str(run), "--json", "--no-cache")
    assert out.returncode == 0 and "Warning" not in out.stderr, out.stderr
    assert json.loads(out.stdout)["gpu"]["devices"][0]["samples"] == 40
    strict = subprocess.run(
        [sys.executable, "-W", "error", "-m", "lens_rl", "goodput", str(run), "--json", "--no-cache"],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert strict.returncode == 0, strict.stderr
