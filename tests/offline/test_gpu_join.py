"""The join's rule: what a sample stands for (midpoints, at most one period either side), integrals over any
interval, the memory peak, idle stretches, and devices whose readings are no readings."""

from __future__ import annotations

import numpy as np

from lens_rl.offline.read.gpu_join import MEASURES, flagged_unavailable, timeline
from lens_rl.offline.rollup import gpu as rollup_gpu

S = 10**9


def _values(util: list[float | None], mem: float = 1e9) -> np.ndarray:
    return np.array([[np.nan if u is None else u, 0, mem, 1e5, 1000, np.nan, np.nan, np.nan] for u in util], np.float32)


def test_a_sample_stands_for_its_period_around_it() -> None:
    """Samples 1 s apart at 1 Hz stand for [t - 0.5, t + 0.5) (the first and last too): 100 % then 0 %
    integrates to 1 s busy and 1 s idle over [-0.5, 1.5) s, half of each over [0, 1) s; outside every sample
    nothing is measured."""
    line = timeline(np.array([0, S]), _values([100, 0]), S)
    sums = line.integrals(np.array([-S // 2, 0, 5 * S]), np.array([3 * S // 2, S, 6 * S]))
    known, busy, idle = (sums[:, MEASURES.index(m)] / S for m in ("known", "busy", "idle"))
    assert known.tolist() == [2.0, 1.0, 0.0] and busy.tolist() == [1.0, 0.5, 0.0] and idle.tolist() == [1.0, 0.5, 0.0]


def test_jitter_leaves_no_hole_but_a_stopped_sampler_does() -> None:
    """Samples a little late still cover the time between them; samples 10 periods apart cover half a period
    each side, and the rest between them reads neither busy nor idle."""
    jittered = timeline(np.array([0, 11 * S // 10, 2 * S]), _values([0, 0, 0]), S)
    assert jittered.integrals(np.array([0]), np.array([2 * S]))[0, MEASURES.index("idle")] == 2 * S
    apart = timeline(np.array([0, 10 * S]), _values([50, 50]), S)
    sums = apart.integrals(np.array([0]), np.array([10 * S]))[0]
    assert sums[MEASURES.index("known")] == S and sums[MEASURES.index("busy")] == S // 2


def test_null_readings_are_unmeasured_never_zero() -> None:
    """A sample with no utilisation reading adds no known time and no idle time (null is not 0 %)."""
    line = timeline(np.array([0, S, 2 * S]), _values([None, None, 0]), S)
    sums = line.integrals(np.array([-S]), np.array([3 * S]))[0]
    assert sums[MEASURES.index("known")] == S and sums[MEASURES.index("idle")] == S


def test_memory_peak_and_idle_stretches() -> None:
    """The memory peak is the largest reading whose period overlaps the interval (nan where none does); idle
    stretches are the merged periods reading 0 %."""
    v = _values([0, 0, 50, 0])
    v[:, 2] = [1e9, 3e9, 2e9, 1e9]
    line = timeline(np.array([0, S, 2 * S, 3 * S]), v, S)
    assert line.mem_peak(np.array([0, 2 * S, 9 * S]), np.array([S, 3 * S, 10 * S]))[:2].tolist() == [3e9, 2e9]
    assert np.isnan(line.mem_peak(np.array([9 * S]), np.array([10 * S]))[0])
    assert (line.idle_intervals() / S).tolist() == [[-0.5, 1.5], [2.5, 3.5]]


def test_a_device_reading_zero_everywhere_while_its_memory_is_used_is_unavailable() -> None:
    """0 on every counter (power and clock too) with memory in use flags the device; a plain idle device (power
    and clock read) or one with no memory in use does not; a flagged device's timeline measures nothing."""
    broken = np.zeros((3, 8), np.float32)
    broken[:, 2] = 5e9
    assert flagged_unavailable(broken) and not flagged_unavailable(_values([0, 0, 0]))
    assert not flagged_unavailable(np.zeros((3, 8), np.float32))
    line = timeline(np.array([0, S, 2 * S]), broken, S, unavailable=True)
    assert not line.integrals(np.array([0]), np.array([2 * S]))[0].any()


def test_the_rollup_reads_the_measures_in_the_joins_order() -> None:
    """The rollup's names for the join's columns are the join's, in its order."""
    assert rollup_gpu.MEASURES == MEASURES


def test_a_spans_join_equals_its_integrals_and_memory_peaks_asked_apart() -> None:
    """One lookup per span end gives the very integrals and memory peaks of asking each apart, on regular,
    jittered, gapped, strided (a device's rows in a block of several) and degenerate (1 ns apart) samples."""
    rng = np.random.default_rng(7)
    for case in range(6):
        n = 400
        if case == 5:  # (1 ns apart, 1 ns period: segments of width 0, starts repeated)
            t = np.arange(n, dtype=np.int64) * 1
            period = 1
        else:
            t = np.cumsum(rng.integers(1, 3 if case < 2 else 40, n)).astype(np.int64) * 100_000_000
            period = 500_000_000
        block = rng.uniform(0, 100, (n, 3, 8)).astype(np.float32)
        block[rng.random((n, 3)) < 0.1] = np.nan
        block[:, :, 5:] = np.nan if case % 2 else block[:, :, 5:]
        line = timeline(t, block[:, 1, :], period)
        lo = rng.integers(int(t[0]) - 10**9, int(t[-1]) + 10**9, 300)
        hi = lo + rng.integers(0, 5 * 10**9, 300)
        lo[:20], hi[:20] = t[:20], t[5:25]  # (ends exactly at sample times)
        sums, peaks = line.joined(lo, hi)
        assert np.array_equal(sums, line.integrals(lo, hi))
        assert np.array_equal(peaks, line.mem_peak(lo, hi), equal_nan=True)
        whole = timeline(t, np.ascontiguousarray(block[:, 1, :]), period)
        assert np.array_equal(whole.joined(lo, hi)[0], sums)


def test_spans_past_the_last_sample_read_nothing_and_leave_the_others_as_they_were() -> None:
    """Spans starting (and ending) past the last sample's period read 0 of every measure and no memory peak,
    and the spans asked with them get the very figures they get asked alone."""
    t = np.arange(20, dtype=np.int64) * S
    line = timeline(t, _values([float(10 * (k % 7)) for k in range(20)]), S)
    lo = np.array([2 * S, 30 * S, 5 * S + S // 3, 19 * S + S // 2, 40 * S], np.int64)
    hi = np.array([4 * S, 31 * S, 25 * S, 22 * S, 39 * S], np.int64)  # (the last ends before it starts)
    sums, peaks = line.joined(lo, hi)
    past = np.array([False, True, False, True, True])
    assert not sums[past].any() and np.isnan(peaks[past]).all()
    alone, high = line.joined(lo[~past], hi[~past])
    assert sums[~past].tobytes() == alone.tobytes() and np.array_equal(peaks[~past], high, equal_nan=True)
    assert np.array_equal(sums, line.integrals(lo, hi)) and np.array_equal(peaks, line.mem_peak(lo, hi), equal_nan=True)
