"""A device's samples as a step function of time, and its integrals over any intervals (vectorised).

**What a sample stands for.** A sample at time ``t`` stands for the period around it (sample-and-hold,
centred: a reading is NVML's duty cycle over about its own period ``P = 1/hz``): towards a neighbour at most
``2P`` away, up to the midpoint between them (so a sampler's jitter leaves no hole); towards none (the file's
first or last sample, or a neighbour further away: the sampler stopped, a holder was killed before another
took over), ``P/2``, the time beyond read neither busy nor idle. Samples at their regular ``P`` apart each
stand for ``[t - P/2, t + P/2)``, so a phase's figures are exact to within half a sample period at each of
its ends.

**Measures** (per device, integrated over an interval, in ns): ``known`` (time with a utilisation reading),
``busy`` (utilisation x time, as a fraction), ``idle`` (time reading 0 %), ``sm`` / ``sm_known`` and
``tensor`` / ``tensor_known`` (GPM activity where the device has it); and the memory peak (the largest
``mem_used`` of the samples whose period overlaps the interval). A counter the device lacks, or a device
flagged unavailable, is ``nan``: never 0.

**Unavailable.** A device that reads 0 on every counter (utilisation, memory utilisation, power, clock,
activity) at every sample while its memory is in use is flagged unavailable: its readings are no readings.

Example::

    line = timeline(times, values, period_ns)           # one device's samples (values: (n, 8))
    line.idle_intervals()                               # where it read 0 %
    sums = line.integrals(starts, ends)                 # (spans, MEASURES) ns
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lens_rl.store.gpu import GPU_COUNTERS

__all__ = ["MEASURES", "Timeline", "flagged_unavailable", "timeline"]

_UTIL, _MEM_USED = GPU_COUNTERS.index("util"), GPU_COUNTERS.index("mem_used")
_SM, _TENSOR = GPU_COUNTERS.index("sm_active"), GPU_COUNTERS.index("tensor_active")
#: the counters that read 0 on a device whose readings are no readings (all but memory used)
_ZERO_WHEN_BROKEN = [i for i, c in enumerate(GPU_COUNTERS) if c != "mem_used"]
#: the integrated measures, in their column order
MEASURES = ("known", "busy", "idle", "sm_known", "sm", "tensor_known", "tensor")


def flagged_unavailable(values: Any) -> bool:
    """Whether a device's samples (``(n, 8)``) read 0 on every counter while its memory was in use."""
    if (values[:, _UTIL] > 0).any():  # (the common case, decided on one column: nan compares False)
        return False
    read = values[~np.isnan(values).all(axis=1)]
    if not read.size:
        return False
    others = read[:, _ZERO_WHEN_BROKEN]
    with np.errstate(invalid="ignore"):
        return bool(np.nan_to_num(others, nan=0.0).max(initial=0.0) == 0.0 and np.nanmax(read[:, _MEM_USED]) > 0)


class Timeline:
    """One device's samples as disjoint, sorted segments ``[a, b)`` each with its rates, and their running
    integrals (``cum[i]``: every measure integrated up to ``a[i]``). Only the measures the device has are
    kept (``present``: SM / tensor activity without GPM, or every one of a device flagged unavailable, are 0
    throughout), measure-major (``(present, n)``: each measure's running sum a contiguous row, 3x faster to
    sum and look up than the columns of an ``(n, MEASURES)`` array)."""

    def __init__(self, a: Any, b: Any, present: Any, rows: Any, mem: Any, start: Any = None) -> None:
        self.a, self.b, self.mem = a, b, mem
        self.widths = (b - a).astype(np.float64)
        self._present = np.asarray(present, np.intp)
        self._rates = rows
        self._cum = np.zeros((rows.shape[0], a.size + 1))
        np.multiply(rows, self.widths, out=self._cum[:, 1:])  # (each segment's integral, then summed in place)
        if start is None:
            np.cumsum(self._cum[:, 1:], axis=1, out=self._cum[:, 1:])
        else:  # (a window's segments, on from the running sums ``start`` kept at its first: one by one, as above)
            self._cum[:, 0] = start
            np.cumsum(self._cum, axis=1, out=self._cum)
        #: which measures read anything (a rate not 0 somewhere)
        self.measured = np.zeros(len(MEASURES), bool)
        self.measured[self._present] = rows.any(axis=1)
        self._mem_low: Any = None
        #: whether the segments start strictly in order (always, but from samples 1 ns apart with a 1 ns period)
        self._increasing = bool((a[1:] > a[:-1]).all() and (b[:-1] <= a[1:]).all() and (b >= a).all())

    @property
    def present(self) -> Any:
        """The measures kept (indices into :data:`MEASURES`)."""
        return self._present

    def whole(self) -> Any:
        """Every measure from the first segment's start to the last one's end: ``(MEASURES,)``."""
        return self.integrals(self.a[:1], self.b[-1:])[0]

    def mem_max(self) -> float:
        """The largest memory used of any sample (nan: none)."""
        return float(np.nanmax(self.mem)) if not np.isnan(self.mem).all() else float("nan")

    def window(self, start: Any) -> Timeline:
        """This timeline but its first segment, its running sums on from ``start`` (``(MEASURES,)``)."""
        rows = self._rates[:, 1:]
        return Timeline(self.a[1:], self.b[1:], self._present, rows, self.mem[1:], start[self._present])

    def read_before(self, k: int) -> tuple[Any, Any]:
        """Which measures read anything (a rate not 0) in the segments before ``k``, and which of those
        segments read idle (no ``(n, MEASURES)`` copy of the rates)."""
        measured = np.zeros(len(MEASURES), bool)
        measured[self._present] = self._rates[:, :k].any(axis=1)
        where = np.flatnonzero(self._present == MEASURES.index("idle"))
        idle = self._rates[where[0], :k] > 0 if where.size else np.zeros(k, bool)
        return measured, idle

    def running(self, k: int) -> Any:
        """Every measure integrated up to segment ``k``'s start (0 for a measure not kept): ``(MEASURES,)``."""
        out = np.zeros(len(MEASURES))
        out[self._present] = self._cum[:, k]
        return out

    @property
    def rates(self) -> Any:
        """Each segment's rate of each measure: ``(n, MEASURES)``."""
        out = np.zeros((self.a.size, len(MEASURES)))
        out[:, self._present] = self._rates.T
        return out

    def at(self, x: Any) -> Any:
        """Every measure integrated from the start up to each time in ``x`` (ns): ``(len(x), MEASURES)``."""
        out = np.zeros((len(x), len(MEASURES)))
        if self.a.size and self._present.size:
            out[:, self._present] = self._upto(x).T
        return out

    def _upto(self, x: Any, k: Any = None) -> Any:
        """The present measures integrated up to each time in ``x``: ``(present, len(x))`` (``k``: each one's
        segment, the last starting at or before it, -1 before the first, where already looked up)."""
        k0 = np.maximum(np.searchsorted(self.a, x, side="right") - 1 if k is None else k, 0)
        # (before the first segment: k0 0, nothing into it, cum[0] 0)
        # (np.take: 3x faster than indexing a (measures, n) array's columns, the same values)
        into = np.clip(x - self.a.take(k0), 0, self.widths.take(k0)).astype(np.float64, copy=False)
        return np.take(self._cum, k0, axis=1) + np.take(self._rates, k0, axis=1) * into

    def integrals(self, starts: Any, ends: Any) -> Any:
        """Each measure over each interval ``[starts[i], ends[i])``, in ns: ``(len(starts), MEASURES)``."""
        out = np.zeros((len(starts), len(MEASURES)))
        if self.a.size and self._present.size:
            out[:, self._present] = (self._upto(ends) - self._upto(starts)).T
        return out

    def idle_intervals(self) -> Any:
        """The device's stretches reading 0 %, merged: ``(k, 2)`` int64 ns."""
        where = np.flatnonzero(self._present == MEASURES.index("idle"))
        if not where.size:
            return np.zeros((0, 2), np.int64)
        idle = self._rates[where[0]] > 0
        if not idle.any():
            return np.zeros((0, 2), np.int64)
        a, b = self.a[idle], self.b[idle]
        joined = np.ones(a.size, bool)
        joined[1:] = a[1:] > b[:-1]  # (a new stretch where one does not start at the last one's end)
        starts = np.flatnonzero(joined)
        ends = np.append(starts[1:], a.size) - 1
        return np.column_stack([a[starts], b[ends]])

    def joined(self, starts: Any, ends: Any, peaks: bool = True) -> tuple[Any, Any]:
        """:meth:`integrals` and :meth:`mem_peak` of the same intervals, each end looked up once (a span's join;
        ``peaks`` False: the integrals only, None for the peaks)."""
        if not self.a.size or not len(starts):
            return self.integrals(starts, ends), self.mem_peak(starts, ends) if peaks else None
        after = np.minimum(starts, ends) >= self.b[-1]
        if after.any():  # (past the last sample's period: no reading, nothing to look up; a look's spans past the
            # samples are asked again each look: a sampler behind, or stopped)
            out = np.zeros((len(starts), len(MEASURES)))
            mem = np.full(len(starts), np.nan) if peaks else None
            if not after.all():
                within = ~after
                got, high = self.joined(starts[within], ends[within], peaks)
                out[within] = got
                if mem is not None:
                    mem[within] = high
            return out, mem
        k_lo = np.searchsorted(self.a, starts, side="right") - 1
        k_hi = np.searchsorted(self.a, ends, side="right") - 1
        out = np.zeros((len(starts), len(MEASURES)))
        if self._present.size:
            out[:, self._present] = (self._upto(ends, k_hi) - self._upto(starts, k_lo)).T
        if not peaks or not self._increasing:
            return out, self.mem_peak(starts, ends) if peaks else None
        # (segments disjoint and in order: those ending by a start are the ones up to its segment, that one
        # too where it ends by it; those starting before an end, the ones up to its segment but one starting
        # at it: mem_peak's two searches, from the integrals')
        at = np.maximum(k_lo, 0)
        first = np.where(k_lo >= 0, k_lo + (self.b.take(at) <= starts), 0)
        at = np.maximum(k_hi, 0)
        last = np.where(k_hi >= 0, k_hi + 1 - (self.a.take(at) == ends), 0)
        return out, self._peaks(first, last)

    def mem_peak(self, starts: Any, ends: Any) -> Any:
        """The largest memory used (bytes) of the samples whose period overlaps each interval (nan: none)."""
        if not self.a.size or not len(starts):
            return np.full(len(starts), np.nan)
        first = np.searchsorted(self.b, starts, side="right")
        last = np.searchsorted(self.a, ends, side="left")
        return self._peaks(first, last)

    def _peaks(self, first: Any, last: Any) -> Any:
        """The largest memory used of samples ``first[i]`` up to ``last[i]`` (excluded) each (nan: none)."""
        out = np.full(len(first), np.nan)
        some = last > first
        if not some.any():
            return out
        if self._mem_low is None:  # (asked for by each process using the device: made once)
            self._mem_low = np.append(np.nan_to_num(self.mem, nan=-np.inf), -np.inf)
        mem = self._mem_low
        bounds = np.empty(2 * int(some.sum()), np.int64)
        bounds[0::2], bounds[1::2] = first[some], last[some]
        peaks = np.maximum.reduceat(mem, bounds)[0::2]
        out[some] = np.where(np.isfinite(peaks), peaks, np.nan)
        return out


def timeline(times: Any, values: Any, reach_ns: Any, unavailable: bool = False, keep: Any = ()) -> Timeline:
    """A device's samples (``times`` int64 ns, ``values`` ``(n, 8)``, ``reach_ns`` each sample's period: how far
    it may stand either side) as a :class:`Timeline` (see the module docstring for what a sample stands for).
    ``keep``: counters kept though every sample lacks them (a window's, :mod:`lens_rl.offline.read.gpu_window`,
    whose device read them before it)."""
    # (a device's rows may be a strided view into a block of several devices: only the columns a timeline reads
    # are gathered, each once; a copy of every row was 0.5 s of a 1 M-span look's CPU at 64 device-days)
    t, v, h = times, values, np.broadcast_to(reach_ns, times.shape)
    if t.size > 1 and not (t[1:] > t[:-1]).all():  # (not in order, or a time sampled twice: the first reading)
        order = np.argsort(t, kind="stable")
        t, v, h = t[order], v[order], h[order]
        keep = np.ones(t.size, bool)
        keep[1:] = t[1:] != t[:-1]
        t, v, h = t[keep], v[keep], h[keep]
    if h.size and h[0] == h.min() == h.max():  # (one period throughout, as one sampler's: its arithmetic once)
        h = h[:1].copy()
    a, b = t - h // 2, t + h // 2
    if t.size > 1:
        gap = t[1:] - t[:-1]
        reach = 2 * np.maximum(h[1:], h[:-1]) if h.size > 1 else 2 * h
        near = gap <= reach  # (a neighbour within two periods: up to the midpoint)
        mid = t[:-1] + gap // 2
        np.copyto(a[1:], mid, where=near)
        np.copyto(b[:-1], mid, where=near)
    present: list[int] = []
    rows = np.empty((len(MEASURES), t.size))
    if not unavailable:  # (else its readings are no readings)
        for known, sum_, column in ((0, 1, _UTIL), (3, 4, _SM), (5, 6, _TENSOR)):
            missing = np.isnan(v[:, column])
            if missing.all() and column not in keep:  # (decided before any arithmetic: most devices have no GPM)
                continue
            at = len(present)
            x = np.divide(v[:, column], 100.0, out=rows[at + 1], dtype=np.float64)  # (as float64, then / 100)
            np.logical_not(missing, out=rows[at])  # (as 0.0 / 1.0)
            np.nan_to_num(x, copy=False)
            present += [known, sum_]
            if column == _UTIL:
                np.equal(x, 0, out=rows[at + 2], where=~missing)
                rows[at + 2][missing] = 0.0
                present.append(2)
    return Timeline(a, b, present, rows[: len(present)], v[:, _MEM_USED].astype(np.float64))
