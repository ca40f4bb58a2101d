"""The C scanner of GPU sample lines reads exactly what the pure-Python path reads: the same blocks, times,
values, line and bad-line counts, on normal, edge and hostile lines; and without the extension the
pure-Python path serves alone."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lens_rl.offline.read import gpu_samples
from lens_rl.offline.read.gpu_samples import read_samples
from lens_rl.store import TIME_MAX_NS, TIME_MIN_NS, ReadStats
from tests.conftest import run_python
from tests.gpu_stores import ALL, device
from tests.stores import at_ns

needs_scanner = pytest.mark.skipif(not gpu_samples.SCANNER, reason="the C scanner was not built here")

T = at_ns(10**9)
GOOD = [60, 25, 12345678901, 250000, 1980, 45.5, 30.25, 0.1]


def _head(devices: int = 2) -> str:
    return json.dumps(
        {
            "v": 1,
            "header": True,
            "format": "lens_rl.gpu/1",
            "hz": 2,
            "devices": [device(f"GPU-{i}", i, ALL) for i in range(devices)],
        }
    )


def _line(t: int, *entries: Any) -> str:
    return json.dumps({"t": t, "d": list(entries)}, separators=(",", ":"))


def _both(path: Path, monkeypatch: Any) -> tuple[Any, Any]:
    """The file read with the scanner and without: (blocks, end, lines, skipped) each."""
    out = []
    for scanner in (gpu_samples._gpuscan, None):
        monkeypatch.setattr(gpu_samples, "_gpuscan", scanner)
        stats = ReadStats()
        blocks, end, _head = read_samples(path, stats)
        out.append((blocks, end, stats.lines, stats.skipped))
    return out[0], out[1]


def _same(fast: Any, slow: Any) -> None:
    assert fast[1:] == slow[1:]
    assert len(fast[0]) == len(slow[0])
    for a, b in zip(fast[0], slow[0], strict=True):
        assert a.head == b.head
        assert a.t.dtype == b.t.dtype and np.array_equal(a.t, b.t)
        assert a.v.dtype == b.v.dtype and np.array_equal(a.v, b.v, equal_nan=True)


def _write(tmp_path: Path, lines: list[str], devices: int = 2, tail: str = "") -> Path:
    path = tmp_path / "gpu-n-1.jsonl"
    path.write_text("\n".join([_head(devices), *lines]) + "\n" + tail)
    return path


G = json.dumps(GOOD)
NORMAL = [
    _line(T, GOOD, GOOD),
    _line(T + 1, [0, 0, 0, 0, 0, None, None, None], None),
    _line(T + 2, None, None),
    _line(T + 3, [100, 100.0, 1e3, 1.5e2, 2e0, 0.0, 99.99, 1e-3], [1.0, 2.5e-1, 3, 4, 5, 6, 7, 8]),
    _line(T + 4, [0.1, 0.2, 0.3, 12.345678901234, 7e14, 1e-22, 5, 5], GOOD),
    json.dumps({"t": T + 5, "d": [GOOD, GOOD]}),  # (json.dumps' own spacing)
    f' \t{{ "t" :\t{T + 6} , "d" : [ [1,2,3,4,5,6,7,8] ,null ] }}\r',
    f'{{"t":{T + 7},"d":[[1E2,2e+1,3E-1,4,5,6,7,8],[0,0.0,0e5,0.000,9,9,9,9]]}}',
]
HOSTILE = [
    _line(T + 10, [-1, 0, 0, 0, 0, 0, 0, 0], GOOD),  # a negative value
    _line(T + 11, [101, 0, 0, 0, 0, 0, 0, 0], GOOD),  # a percentage over 100
    _line(T + 12, GOOD, [0, 0, 0, 0, 0, 100.5, 0, 0]),
    _line(5, GOOD, GOOD),  # a time before 2000
    _line(2**63 + 5, GOOD, GOOD),  # past int64
    _line(T + 13, [1e30, 0, 0, 0, 0, 0, 0, 0], GOOD),
    _line(T + 14, [0, 0, 2**60 + 1, 0, 0, 0, 0, 0], GOOD),  # huge integers
    _line(T + 15, [0, 0, 1234567890123456789, 10**16, 0, 0, 0, 0], GOOD),
    _line(T + 16, [0, 0, 1e17, 0, 0, 0, 0, 0], GOOD),
    _line(T + 17, [0, 0, 123456789.123456789, 0, 0, 0, 0, 0], GOOD),  # long decimals
    f'{{"t":{T + 18},"d":[[01,0,0,0,0,0,0,0],{G}]}}',  # a leading zero
    f'{{"t":{T + 19},"d":[[+1,0,0,0,0,0,0,0],{G}]}}',
    f'{{"t":{T + 20},"d":[[.5,1.,0,0,0,0,0,0],{G}]}}',
    f'{{"t":{T + 21},"d":[[nul,0,0,0,0,0,0,0],{G}]}}',
    f'{{"t":{T + 22},"d":[[NaN,Infinity,0,0,0,0,0,0],{G}]}}',
    f'{{"t":{T + 23}.5,"d":[{G},{G}]}}',  # a fraction of a ns
    f'{{"t":{T}e0,"d":[{G},{G}]}}',
    f'{{"t":-{T},"d":[{G},{G}]}}',
    f'{{"d":[{G},{G}],"t":{T + 24}}}',  # keys reordered
    f'{{"t":{T + 25},"d":[{G},{G}],"x":1}}',  # a key more
    _line(T + 26, GOOD),  # a device short
    _line(T + 27, GOOD, GOOD, GOOD),
    _line(T + 28, GOOD[:7], GOOD),  # a counter short
    _line(T + 29, [*GOOD, 1], GOOD),
    _line(T + 30, [[1], 0, 0, 0, 0, 0, 0, 0], GOOD),
    _line(T + 31, ["1", 0, 0, 0, 0, 0, 0, 0], GOOD),
    _line(T + 32, [True, 0, 0, 0, 0, 0, 0, 0], GOOD),
    _line(T + 33, GOOD, GOOD) + " x",
    _line(T + 34, GOOD, GOOD)[:-1],
    f'{{"t":{T + 35},"d":[[5 5,0,0,0,0,0,0],{G}]}}',  # two numbers in one slot, one slot empty
    f'{{"t":{T + 36},"d":[[,0,0,0,0,0,0,0],{G}]}}',
    "garbage",
    "",
    "{}",
    "[1,2,3]",
    f'{{"t":"{T}","d":[null,null]}}',
    "{" * 5000,
]


@needs_scanner
def test_normal_and_edge_lines_read_alike_and_as_a_plain_decode(tmp_path: Path, monkeypatch: Any) -> None:
    """Integers, decimals, exponents, nulls per counter and per device, white space of every kind: the
    scanner's arrays are the pure-Python path's, and a plain JSON decode's (times exact)."""
    path = _write(tmp_path, NORMAL * 3)
    fast, slow = _both(path, monkeypatch)
    _same(fast, slow)
    want_t = [json.loads(line)["t"] for line in NORMAL * 3]
    want_v = [[[np.nan] * 8 if d is None else d for d in json.loads(line)["d"]] for line in NORMAL * 3]
    (block,) = fast[0]
    assert block.t.tolist() == want_t and fast[3] == 0
    assert np.array_equal(block.v, np.array(want_v, np.float64).astype(np.float32), equal_nan=True)


@needs_scanner
def test_hostile_lines_are_skipped_or_read_as_the_python_path_does(tmp_path: Path, monkeypatch: Any) -> None:
    """Signs, values out of range, huge or long numbers, JSON's near misses, other shapes and garbage, each
    between good lines: the same blocks, values and bad-line count with and without the scanner."""
    lines = []
    for k, bad in enumerate(HOSTILE):
        lines += [_line(T + 1000 + k, GOOD, GOOD), bad]
    fast, slow = _both(_write(tmp_path, lines), monkeypatch)
    _same(fast, slow)
    assert fast[3] >= 20


NOT_JSON = [  # the common shape's near misses that are not JSON: each a bad line, never a sample
    '{"t":%d,"d":[[60, ,12,250000,1980,45,30,1],[1,2,3,4,5,6,7,8]]}',  # a blank slot (numpy reads 0)
    '{"t":%d,"d":[[ ,25,12,250000,1980,45,30,1],[1,2,3,4,5,6,7,8]]}',
    '{"t"%d:,"d":[[60,25,12,250000,1980,45,30,1],[1,2,3,4,5,6,7,8]]}',  # digits moved across the structure
    '{"t":%d,"d":[[6,]0,12,250000,1980,45,30,1],[1,2,3,4,5,6,7,8]]}',
    '{"t":%d,"d":[[.5,25,12,250000,1980,45,30,1],[1,2,3,4,5,6,7,8]]}',
    '{"t":%d,"d":[[01,25,12,250000,1980,45,30,1],[1,2,3,4,5,6,7,8]]}',
    '{"t":%d.5,"d":[[1,25,12,250000,1980,45,30,1],[1,2,3,4,5,6,7,8]]}',  # a time that is not an integer
]


@pytest.mark.parametrize("bad", NOT_JSON)
def test_a_line_that_is_not_json_is_a_bad_line_and_its_neighbours_keep_their_exact_times(
    tmp_path: Path, monkeypatch: Any, bad: str
) -> None:
    """A near miss of the sample line's shape between good lines: skipped and counted on both paths (never a
    sample reading 0), and the good lines' times exact to the nanosecond."""
    good = [_line(T + k, [60, 25, 12, 250000, 1980, 45, 30, 1], [1, 2, 3, 4, 5, 6, 7, 8]) for k in range(7)]
    path = _write(tmp_path, [*good[:3], bad % (T + 100), *good[3:]])
    fast, slow = _both(path, monkeypatch)
    for read in (fast, slow):
        assert read[3] == 1
        times = np.concatenate([block.t for block in read[0]])
        assert (times - T).tolist() == list(range(7))


@needs_scanner
def test_a_header_again_and_a_truncated_last_line(tmp_path: Path, monkeypatch: Any) -> None:
    """A header of another device count mid-file starts a block the scanner reads on; a last line still being
    written is left for the next read, with and without the scanner alike."""
    later = json.loads(_head(3))
    lines = [_line(T, GOOD, GOOD), json.dumps(later), _line(T + 1, GOOD, None, GOOD), _line(T + 2, GOOD, GOOD)]
    path = _write(tmp_path, lines, tail=_line(T + 3, GOOD, GOOD, GOOD)[:20])
    fast, slow = _both(path, monkeypatch)
    _same(fast, slow)
    assert [b.t.size for b in fast[0]] == [1, 1] and fast[3] == 1
    assert fast[1] == path.stat().st_size - 20


@needs_scanner
def test_random_mutations_read_alike(tmp_path: Path, monkeypatch: Any) -> None:
    """Thousands of lines with random bytes changed, dropped or doubled read alike with and without the
    scanner (a fixed seed: the same lines every run)."""
    rng = random.Random(45)
    alphabet = b'0123456789.-+eE,[]{}":nul tdx\t\r'
    lines = []
    for k in range(3000):
        raw = bytearray(_line(T + k, [rng.choice([0, 5, 99.5, None]), *GOOD[1:]], GOOD).encode())
        for _ in range(rng.choice([0, 0, 1, 2])):
            at = rng.randrange(len(raw))
            op = rng.randrange(3)
            if op == 0:
                raw[at] = rng.choice(alphabet)
            elif op == 1:
                del raw[at]
            else:
                raw.insert(at, raw[at])
        lines.append(raw.decode("latin-1").replace("\n", " "))
    path = tmp_path / "gpu-n-1.jsonl"
    path.write_bytes(("\n".join([_head(), *lines]) + "\n").encode("latin-1"))
    fast, slow = _both(path, monkeypatch)
    _same(fast, slow)


def test_without_the_extension_the_python_path_reads_alone(tmp_path: Path) -> None:
    """Where the extension was not built, sample files read on the pure-Python path, with the same result."""
    path = _write(tmp_path, NORMAL + HOSTILE[:5])
    out = run_python(
        f"""
        import sys
        sys.modules["lens_rl.offline.read._gpuscan"] = None   # as if no compiler was there at install time
        from lens_rl.offline.read import gpu_samples
        from lens_rl.store import ReadStats
        stats = ReadStats()
        (block,), end, head = gpu_samples.read_samples({str(path)!r}, stats)
        print(gpu_samples.SCANNER, block.t.size, stats.skipped)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", str(len(NORMAL)), "5"]


@needs_scanner
def test_chunks_and_arrays_filled_in_turn_read_alike(tmp_path: Path, monkeypatch: Any) -> None:
    """A file read in many small chunks into arrays of few rows at a time (headers of other device counts and
    bad lines between) gives the blocks of the pure-Python path, each device's rows contiguous."""
    rng = random.Random(7)
    lines = []
    for k in range(2000):
        if k % 500 == 250:
            lines.append(_head(3 if (k // 500) % 2 == 0 else 2))
        devices = 3 if (k // 500) % 2 == 0 and k % 500 >= 250 else 2
        line = _line(T + k, *([[rng.choice([0, 5, 99.5]), *GOOD[1:]]] * devices))
        lines.append(line if rng.random() > 0.02 else line[:-3] + "x]}")
    path = tmp_path / "gpu-n-1.jsonl"
    path.write_text("\n".join([_head(), *lines]) + "\n")
    monkeypatch.setattr(gpu_samples, "_CHUNK", 4096)
    monkeypatch.setattr(gpu_samples, "_ROWS_AT_ONCE", 40)
    fast, slow = _both(path, monkeypatch)
    _same(fast, slow)
    assert len(fast[0]) >= 4 and fast[3] > 0
    assert all(b.v[:, 0, :].flags.c_contiguous for b in fast[0])


@needs_scanner
def test_the_scanner_writes_device_by_device_with_a_stride() -> None:
    """With a stride, the scanner writes each device's rows contiguous: the same values as row by row."""
    data = ("\n".join(_line(T + k, [k, *GOOD[1:]], None, GOOD) for k in range(5)) + "\n").encode()
    scan = gpu_samples._gpuscan.scan
    rows = np.empty(5, np.int64), np.empty((5, 3, 8), np.float32)
    by_device = np.empty(7, np.int64), np.empty((3, 7, 8), np.float32)
    mask = gpu_samples._PERCENT_MASK
    assert scan(data, 0, 3, *rows, 0, TIME_MIN_NS, TIME_MAX_NS, mask) == (5, len(data))
    assert scan(data, 0, 3, *by_device, 0, TIME_MIN_NS, TIME_MAX_NS, mask, 7) == (5, len(data))
    assert np.array_equal(by_device[0][:5], rows[0])
    assert np.array_equal(by_device[1][:, :5].transpose(1, 0, 2), rows[1], equal_nan=True)
    with pytest.raises(ValueError):
        scan(data, 0, 3, *by_device, 0, TIME_MIN_NS, TIME_MAX_NS, mask, -1)
    assert scan(data, 0, 3, *by_device, 0, TIME_MIN_NS, TIME_MAX_NS, mask, 99) == (0, 0)  # (no room that big)
