"""The GPU join through kept windows: a look reads only the sample files' new bytes and builds each device's
window only, and answers as a cold read byte for byte (a span that began before the window and was written
since: a cold join, the same answer); a hostile kept windows record is one stderr line and a cold join."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from lens_rl.cli import main
from lens_rl.offline.run import gpu, gpu_lines
from lens_rl.offline.run.cache_files import MAX_RECORDS
from lens_rl.offline.run.gpu_entry import layout
from lens_rl.offline.run.gpu_lines import MAX_BYTES, VERSION, LinesKept
from lens_rl.store import ReadStats
from tests.gpu_stores import ALL, PLAIN, device, harm_record, write_gpu_worker, write_samples
from tests.stores import at_ns, span, write_process


def _reading(t: float) -> list[Any]:
    u = int(t * 7) % 101 if int(t) % 9 else 0
    return [[u, u // 2, int(1e9 + 1e7 * (int(t * 3) % 50)), 150000, 1980, None, None, None]]


def _gpm_reading(t: float) -> list[Any]:
    """A device with GPM whose SM activity reads only from 25 s on (before: null)."""
    [row] = _reading(t)
    return [[*row[:5], (int(t * 13) % 90) + 0.5 if t >= 25 else None, 40.25, None]]


def _spans(rank: int, lo: int, hi: int) -> list[dict[str, Any]]:
    out = []
    for k in range(lo, hi):
        step = k // 10
        for name, a, b in (("generation", 0, 0.6), ("training", 0.6, 0.95)):
            out.append(span(name, k + a, k + b, f"{name[0]}{rank}-{k}", parent=f"d{step}", remote=True,
                            bucket="productive", step=step))  # fmt: skip
    return out


def _append(path: Path, lines: list[Any]) -> None:
    with path.open("a") as handle:
        handle.write("".join(json.dumps(x) + "\n" for x in lines))


def _samples(lo: float, hi: float, reading: Any = _reading) -> list[Any]:
    return [{"t": at_ns(int(round(k / 2 * 1e9))), "d": reading(k / 2)} for k in range(int(lo * 2), int(hi * 2))]


def _store(run: Path, gpm: bool = False) -> Path:
    steps = [span("step", 10 * s, 10 * s + 9.99, f"d{s}", parent="job", step=s) for s in range(6)]
    write_process(run, "driver", 0, 1, [span("rl.job", 0, 60, "job"), *steps], root="job")
    for rank in (0, 1):
        write_gpu_worker(run, rank, _spans(rank, 0, 20))
        has = ALL if gpm else PLAIN
        reading = _gpm_reading if gpm else _reading
        write_samples(run, f"node{rank}", 100 + rank, [device(f"GPU-{rank}", has=has)], reading, end_s=20.0)
    return run


def _grow(run: Path, lo: int, hi: int, gpm: bool = False) -> None:
    for rank in (0, 1):
        _append(run / f"spans-actor-{rank}-{10 + rank}.jsonl", _spans(rank, lo, hi))
        _append(run / f"gpu-node{rank}-{100 + rank}.jsonl", _samples(lo, hi, _gpm_reading if gpm else _reading))


def _look(run: Path, *args: str) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["goodput", str(run), "--json", "--jobs", "1", *args]) == 0
    return out.getvalue()


@pytest.fixture(autouse=True)
def _short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_lines, "WINDOW_NS", 3 * 10**9)  # (3 s: most of a 20 s store before the window)


@pytest.fixture
def whole_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the looks' whole reads of the sample files (every sample, not windows)."""
    calls: list[int] = []
    whole = gpu.read_devices

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return whole(*args, **kwargs)

    monkeypatch.setattr(gpu, "read_devices", counted)
    return calls


@pytest.mark.parametrize("gpm", [False, True])
def test_a_store_grown_in_rounds_reads_windows_and_answers_as_a_cold_read(
    tmp_path: Path, gpm: bool, whole_reads: list[int]
) -> None:
    """Spans and samples appended three times (with GPM, SM activity read only from the second round on): each
    look after the first reads the devices' windows only, and answers as --no-cache byte for byte."""
    run = _store(tmp_path / "r1", gpm)
    first = _look(run)
    assert first == _look(run, "--no-cache") and '"gpu"' in first
    for lo in (20, 30, 40):
        _grow(run, lo, lo + 10, gpm)
        whole_reads.clear()
        got = _look(run)
        # (windows only; but where SM activity is first read: the spans kept before were summed without it)
        assert not whole_reads or (gpm and lo == 20)
        assert got == _look(run, "--no-cache"), lo
    kept = msgspec.msgpack.decode((run / ".lens_rl-cache" / "gpu-lines.kept").read_bytes(), type=LinesKept)
    assert {s.uuid for s in kept.lines} == {"GPU-0", "GPU-1"} and all(s.k0 > 50 for s in kept.lines)
    assert (json.loads(got)["gpu"]["phases"][0]["sm_active"] is not None) == gpm


def test_a_span_begun_before_the_window_and_written_since_joins_cold_with_the_same_answer(
    tmp_path: Path, whole_reads: list[int]
) -> None:
    """A long span starting well before the kept window (no anchor holds its start) makes the look join every
    sample cold: its answer is --no-cache's all the same."""
    run = _store(tmp_path / "r1")
    _look(run)
    _grow(run, 20, 30)
    _append(run / "spans-actor-0-10.jsonl", [span("generation", 2, 29.5, "long-0", parent="d2", remote=True,
                                                  bucket="productive", step=2)])  # fmt: skip
    whole_reads.clear()
    got = _look(run)
    assert len(whole_reads) == 1  # (the window tried, then every sample read)
    assert got == _look(run, "--no-cache")


@pytest.mark.parametrize("harm", ["planted", "cut", "oversized", "fifo", "version", "unordered"])
def test_a_hostile_kept_windows_record_is_one_stderr_line_and_a_cold_join(
    tmp_path: Path, harm: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A kept windows record of another shape, cut short, oversized, of another layout version, whose figures
    do not hold together, or a FIFO in its place (never opened: it would block) is one warning (a line on
    stderr) and the devices are read whole: the answer is --no-cache's (the kept steps: test_gpu_steps.py)."""
    run = _store(tmp_path / "r1")
    _look(run)
    _grow(run, 20, 30)
    record = run / ".lens_rl-cache" / "gpu-lines.kept"
    data = record.read_bytes()
    planted = {"key": "x", "lines": [[1, 2, 3]], "v": b"\0" * 99}
    if not harm_record(record, harm, planted, MAX_BYTES):
        kept = msgspec.msgpack.decode(data, type=LinesKept)
        if harm == "unordered":  # (this shape and version, its anchors out of order: looked up by bisection)
            xs = np.array([5, 3], "<i8").tobytes()
            bad = msgspec.structs.replace(kept.lines[0], xs=xs, at=np.zeros(14).tobytes(), peaks=np.zeros(2).tobytes())
            kept = msgspec.structs.replace(kept, lines=[bad, *kept.lines[1:]])
        else:  # (another layout version)
            kept = msgspec.structs.replace(kept, version=VERSION + 1)
        record.write_bytes(msgspec.msgpack.encode(kept))
    caplog.clear()
    got = _look(run)
    said = [r for r in caplog.records if "GPU join's kept windows" in r.getMessage()]
    assert got == _look(run, "--no-cache")
    assert len(said) == 1, said


def test_windows_too_large_to_keep_are_not_kept_and_say_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the kept windows would pass their size limit, none is written: the next look reads every sample,
    with no warning, and answers as --no-cache."""
    monkeypatch.setattr(gpu_lines, "MAX_BYTES", 1000)
    run = _store(tmp_path / "r1")
    _look(run)
    assert not (run / ".lens_rl-cache" / "gpu-lines.kept").exists()
    _grow(run, 20, 30)
    caplog.clear()
    assert _look(run) == _look(run, "--no-cache")
    assert not [r for r in caplog.records if "kept windows" in r.getMessage()]


def test_a_window_look_builds_each_device_timeline_once_as_it_reads_the_window(tmp_path: Path) -> None:
    """The windows read ahead come with each device's timeline already built (on the reading thread), and the
    join is handed those very timelines, answering as the whole timeline would."""
    run = _store(tmp_path / "r1")
    _look(run)
    _grow(run, 20, 30)
    cache = str(run / ".lens_rl-cache")
    found = sorted(run.glob("gpu-*.jsonl"))
    windows = gpu_lines.read_window(found, cache, ReadStats())
    assert windows is not None and set(windows.lines) == {"GPU-0", "GPU-1"}
    lines = gpu.Timelines(windows)
    assert all(lines[u] is windows.lines[u] for u in windows.lines)
    whole = gpu.read_devices(found)[0]
    t = windows["GPU-0"].t[-10:]
    got = windows.lines["GPU-0"].joined(t[:-1], t[1:])[0]
    assert np.array_equal(got, gpu.Timelines(whole)["GPU-0"].joined(t[:-1], t[1:])[0])


def test_a_sample_entry_grown_look_after_look_is_compacted_and_answers_as_a_cold_read(tmp_path: Path) -> None:
    """A sample file grown before every look of a long watch: its cache entry gains one record a look, is
    written whole again once it holds MAX_RECORDS (never more records to read every look), and every look
    answers as --no-cache."""
    run = _store(tmp_path / "r1")
    _look(run)
    entry = run / ".lens_rl-cache" / "gpu-gpu-node0-100.jsonl.samples"
    counts = []
    for k in range(MAX_RECORDS + 4):
        lo = 20 + k
        _grow(run, lo, lo + 1)
        got = _look(run)
        with entry.open("rb") as handle:
            counts.append(layout(handle, entry.stat().st_size)[0]["records"])
    assert max(counts) == MAX_RECORDS and counts[-1] < 8, counts
    assert got == _look(run, "--no-cache")
