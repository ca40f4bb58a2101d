"""Sample files read side by side (threads with the C scanner, else worker processes), and step rows summed
at once: the same figures as one at a time."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from lens_rl.offline.read import gpu_samples
from lens_rl.offline.rollup import gpu as rollup
from lens_rl.offline.rollup.gpu_step_rows import gpu_step_rows
from lens_rl.offline.run import gpu as run_gpu
from lens_rl.offline.run import gpu_ahead
from lens_rl.offline.run.gpu import read_devices
from lens_rl.offline.run.gpu_ahead import read_ahead
from tests.gpu_stores import device, scripted_reading, write_samples


def _store(run: Path) -> list[Path]:
    paths = []
    for k in range(3):
        devices = [device(f"GPU-{k}-{i}", i) for i in range(2)]
        extra = ["garbage", '{"t":1,"d":[null,null]}']
        paths.append(write_samples(run, f"node-{k}", 100 + k, devices, lambda t: scripted_reading(t) * 2, extra=extra))
    return paths


def test_sample_files_read_on_worker_processes_give_what_one_process_reads(tmp_path: Path) -> None:
    """A cold look reading its sample files on several processes finds the same devices, samples and counts."""
    paths = _store(tmp_path / "run")
    one, stats_one = read_devices(paths, jobs=1)
    many, stats_many = read_devices(paths, jobs=2)
    assert list(one) == list(many) and len(one) == 6
    for uuid, d in one.items():
        other = many[uuid]
        assert np.array_equal(d.t, other.t) and np.array_equal(d.v, other.v, equal_nan=True)
        assert (d.host, d.files, d.unavailable) == (other.host, other.files, other.unavailable)
    counts = [(s.files, s.lines, s.skipped) for s in (stats_one, stats_many)]
    assert counts[0] == counts[1] and counts[0][2] == 6  # (two bad lines a file, counted once each)
    # (a zero or negative count from the Python API reads one at a time, as map_files does)
    assert list(read_devices(paths, jobs=-1)[0]) == list(one) == list(read_devices(paths, jobs=0)[0])


def test_without_the_scanner_files_are_read_on_worker_processes_alike(tmp_path: Path, monkeypatch: Any) -> None:
    """Where the C scanner was not built, several files go to worker processes and read as one process does."""
    paths = _store(tmp_path / "run")
    one = read_devices(paths, jobs=1)[0]
    monkeypatch.setattr(gpu_samples, "_gpuscan", None)
    monkeypatch.setattr(run_gpu, "SCANNER", False)
    monkeypatch.setattr(gpu_ahead, "SCANNER", False)
    many = read_devices(paths, jobs=2)[0]
    assert list(one) == list(many)
    assert all(np.array_equal(d.v, many[u].v, equal_nan=True) for u, d in one.items())
    later = read_ahead(paths, None)  # (the pure-Python reading holds the GIL: no thread, read when asked)
    assert not isinstance(later, Future) and list(later.result()[2]) == list(one)


def test_step_rows_add_each_steps_sums_over_processes_as_one_at_a_time(tmp_path: Path) -> None:
    """A step two processes ran sums both processes' seconds and keeps the larger memory peak."""
    sums_a = np.arange(2 * len(rollup.MEASURES), dtype=float).reshape(2, -1) + 1
    sums_b = np.full((2, len(rollup.MEASURES)), 0.5)
    parts = [
        (np.array([3, 4]), sums_a, np.array([10.0, np.nan])),
        (np.array([4, 7]), sums_b, np.array([20.0, np.nan])),
    ]
    expected: dict[int, Any] = {}
    for steps, sums, mem in parts:
        for i, step in enumerate(steps.tolist()):
            rollup._add(expected.setdefault(step, rollup._acc()), sums[i], mem[i])
    rows = gpu_step_rows(parts)
    assert [r["step"] for r in rows] == [3, 4, 7]
    assert rows == [{"step": s, **rollup._sums(acc)} for s, acc in sorted(expected.items())]
    assert rows[1]["mem_peak_bytes"] == 20 and rows[2]["mem_peak_bytes"] is None
    assert gpu_step_rows([]) == []


def test_step_rows_of_steps_sparse_out_of_order_or_missing_in_some_processes_are_one_at_a_time() -> None:
    """Steps far apart (no range to mark), steps a process skips or runs out of order, a process with no
    step, and runs of hundreds of steps give the rows adding each process's sums one at a time, in process order."""
    rng = np.random.default_rng(3)
    for case in range(60):
        parts = []
        for _p in range(int(rng.integers(1, 6))):
            n = int(rng.integers(0, 30)) if case % 4 else int(rng.integers(300, 1200))  # (bulk rounding too)
            span = 10**15 if case % 3 == 0 else 4 * n + 1
            values = rng.choice(span, size=min(n, span), replace=False).astype(np.int64)
            if case % 2:
                values = np.sort(values)
            sums = rng.random((values.size, len(rollup.MEASURES))) * 1e9
            sums[rng.random(values.size) < 0.2, 0] = 0.0  # (a step with no reading: its figures None)
            mem = np.where(rng.random(values.size) < 0.3, np.nan, rng.random(values.size) * 1e10)
            parts.append((values, sums, mem))
        expected: dict[int, Any] = {}
        for steps, sums, mem in parts:
            for i, step in enumerate(steps.tolist()):
                rollup._add(expected.setdefault(step, rollup._acc()), sums[i], mem[i])
        want = [{"step": s, **rollup._sums(acc)} for s, acc in sorted(expected.items())]
        assert repr(gpu_step_rows(parts)) == repr(want)
