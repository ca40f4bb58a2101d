"""What a look settles of a process's GPU join: the prefix of spans that end before its devices' last segment, and
its per-phase sums, continued by the next look to the very sums of a cold join."""

from __future__ import annotations

import numpy as np

from lens_rl.offline.rollup.gpu_prefix import base_of, phase_sums, settle


def _spans(n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 10**12, n)).astype(np.int64)
    ends = starts + rng.integers(1, 10**9, n)
    index = rng.integers(0, 3, n).astype(np.int32)
    sums = rng.random((n, 7)) * 1e9
    mem = np.where(rng.random(n) < 0.3, np.nan, rng.random(n) * 1e10)
    return starts, ends, index, sums, mem


KEYS = [("generation", "productive"), ("training", "productive"), ("sync", "overhead")]


def test_a_settled_prefix_continued_gives_the_cold_sums_bit_for_bit() -> None:
    """The prefix settled before a limit, then the remaining spans added onto its kept sums, equal the sums of
    every span at once (the same floating-point additions in the same order), memory peaks too."""
    starts, ends, index, sums, mem = _spans(5000)
    limit = int(ends[3000]) + 1
    kept = settle("p", None, 0, starts, ends, KEYS, index, sums, mem, ["GPU-0"], [1.0] * 7, limit)
    assert kept is not None and 0 < kept.n <= 3001 and ends[: kept.n].max() < limit
    base = base_of(kept, ["GPU-0"], starts, ends, KEYS)
    assert base == kept.n
    per, peaks = phase_sums(kept, base, KEYS, index, sums[base:], mem[base:])
    cold_per, cold_peaks = phase_sums(None, 0, KEYS, index, sums, mem)
    assert per.tobytes() == cold_per.tobytes() and peaks.tobytes() == cold_peaks.tobytes()


def test_a_prefix_of_other_spans_or_devices_is_not_used() -> None:
    """Kept sums are used only for the same first spans answered by the same devices."""
    starts, ends, index, sums, mem = _spans(100)
    kept = settle("p", None, 0, starts, ends, KEYS, index, sums, mem, ["GPU-0"], [1.0] * 7, int(ends[-1]) + 1)
    assert kept is not None and kept.n == 100
    assert base_of(kept, ["GPU-1"], starts, ends, KEYS) == 0
    moved = starts.copy()
    moved[7] += 1
    assert base_of(kept, ["GPU-0"], moved, ends, KEYS) == 0
    assert base_of(kept, ["GPU-0"], starts[:50], ends[:50], KEYS) == 0
