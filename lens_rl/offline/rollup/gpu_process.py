"""One GPU process in the GPU rollup (:mod:`lens_rl.offline.rollup.gpu`): the intervals it asks its devices
(its spans, its first to last span, each step's first to last span, its productive spans' union), what an
earlier look kept of it, and what its devices answered, put together as the cold join would.

Example::

    process = GpuProcess(key, merged, devices, lines, kept, keeping)
    for line in its_devices_timelines:
        process.queries.answer(process.queries.asked(line))
    process.finish(limits, keep, keeping)         # (kept rows back, this look's settled kept, the mean taken)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lens_rl.offline.read.parts import NO_STEP
from lens_rl.offline.rollup.gpu_memo import PRODUCTIVE_COLUMNS, Keeping, reused
from lens_rl.offline.rollup.gpu_prefix import Digest, SpanPrefix, base_of, settle

__all__ = ["HELD", "MEASURES", "PRODUCTIVE", "GpuProcess", "productive_union", "step_hulls"]

#: the measures a device's timeline integrates (:mod:`lens_rl.offline.read.gpu_join`'s, in its column order)
MEASURES = ("known", "busy", "idle", "sm_known", "sm", "tensor_known", "tensor")
_K, _BUSY, _IDLE, _SMK, _SM, _TK, _T = range(len(MEASURES))
#: the productive union's place among a process's interval sets (spans, hull, steps, productive)
PRODUCTIVE = 3
#: the measures each interval set's sums hold (None: every one; of the productive union, known and busy only:
#: all the rollup reads of it, and all its memo keeps)
HELD: list[list[int] | None] = [None, None, None, PRODUCTIVE_COLUMNS]
#: a device's samples as a step function (:class:`lens_rl.offline.read.gpu_join.Timeline`)
Timeline = Any


class _Queries:
    """One process's intervals to join (its spans, its first to last span, each step's first to last span, its
    productive spans' union), and what its devices answered: each measure summed over them (the measures of
    :data:`HELD`; the devices' mean once :meth:`mean` ran) and the memory peak. A device answers every process
    using it in turn, its timeline built once and dropped (a day of 64 devices' timelines at once would not
    fit)."""

    def __init__(self, intervals: list[tuple[Any, Any]], kept: list[tuple[int, Any, Any]] | None = None) -> None:
        """``kept``: for each interval set, the rows kept before its intervals (``(n, sums, peaks)``: arrays of
        them and of the intervals' rows after them, :func:`~lens_rl.offline.rollup.gpu_memo.reused`'s ``whole``;
        n 0: none)."""
        self.intervals = intervals
        self.sums: list[Any] = []
        self.mem: list[Any] = []
        self.first: list[int] = []
        for k, (lo, _hi) in enumerate(intervals):
            n, sums, peaks = kept[k] if kept is not None else (0, None, None)
            held = HELD[k]
            self.first.append(n)
            self.sums.append(sums if n else np.zeros((len(lo), len(MEASURES) if held is None else len(held))))
            self.mem.append(peaks if n and peaks is not None else np.full(n + len(lo), np.nan))
        self.counts = np.zeros(len(MEASURES))
        self.devices = 0

    def asked(self, line: Timeline) -> list[Any]:
        """What one device answers (each interval set's integrals and memory peaks, and what it measures)."""
        # (the productive union's memory peaks are never read: its integrals only)
        out = [line.joined(lo, hi, k != PRODUCTIVE) if len(lo) else None for k, (lo, hi) in enumerate(self.intervals)]
        return [*out, line.measured]

    def answer(self, answered: list[Any]) -> None:
        """One device's answer (:meth:`asked`) added in (devices in the same order every look: the same sums)."""
        for got, sums, mem, first, held in zip(answered[:-1], self.sums, self.mem, self.first, HELD, strict=True):
            if got is not None:  # (into the rows after the kept ones)
                sums[first:] += got[0] if held is None else got[0][:, held]
                if got[1] is not None:
                    np.fmax(mem[first:], got[1], out=mem[first:])
        self.counts += answered[-1]
        self.devices += 1

    def mean(self) -> None:
        """Sums over devices as the devices' mean (each measure over the devices that have it)."""
        counts = self.counts.copy()
        counts[[_K, _BUSY, _IDLE]] = counts[_K]
        counts[[_SMK, _SM]] = counts[_SMK]
        counts[[_TK, _T]] = counts[_TK]
        for sums, held in zip(self.sums, HELD, strict=True):
            sums /= np.maximum(counts if held is None else counts[held], 1)


class GpuProcess:
    """One GPU process's span columns (its parts' merged), its :class:`_Queries`, and what an earlier look kept
    of it: ``prior`` (its settled spans' sums, where they still hold: the first ``base`` spans are not asked
    again) and its memo (its settled steps' and productive intervals' rows, not asked again: the first rows of
    its queries' arrays, the joined ones added after them)."""

    def __init__(
        self,
        key: Any,
        merged: tuple[Any, ...],
        devices: Mapping[str, Any],
        lines: Mapping[str, Timeline],
        kept: Mapping[str, SpanPrefix] | None,
        keeping: Keeping | None,
    ) -> None:
        uuids, starts_a, ends_a, keys, index_a, steps_a = merged
        starts, ends = np.frombuffer(starts_a, np.int64), np.frombuffer(ends_a, np.int64)
        index, span_steps = np.frombuffer(index_a, np.int32), np.frombuffer(steps_a, np.int64)
        values, step_lo, step_hi = step_hulls(span_steps, starts, ends)
        productive = productive_union(keys, index, starts, ends)
        hull = (np.array([starts.min()]), np.array([ends.max()])) if starts.size else (starts, ends)
        mine = set(uuids)
        self.key, self.uuids, self.keys, self.index, self.values = key, uuids, keys, index, values
        self.starts, self.ends, self.step_hi, self.productive = starts, ends, step_hi, productive
        self.answering = [u for u in devices if u in mine and u in lines]
        prior = kept.get(repr(key)) if kept else None
        self.hashed = Digest(starts, ends)
        self.base = base_of(prior, self.answering, starts, ends, keys, self.hashed)
        self.prior = prior if self.base else None
        memo = keeping.memos.get(repr(key)) if keeping is not None else None
        self.keyed = (Digest(values, step_lo, step_hi), Digest(*productive))
        none: tuple[int, Any, Any] = (0, None, None)
        steps_kept = productive_kept = none
        if memo is not None and memo.devices == self.answering:  # (kept steps and productive intervals not joined)
            steps_kept = reused(memo.steps, self.keyed[0], whole=True)
            if set(PRODUCTIVE_COLUMNS) <= set(memo.productive.columns):  # (a record of an earlier look's columns: not)
                productive_kept = reused(
                    memo.productive, self.keyed[1], peaks=False, whole=True, held=PRODUCTIVE_COLUMNS
                )
        s_n, p_n = steps_kept[0], productive_kept[0]
        if keeping is not None:
            keeping.reused[repr(key)] = (s_n, p_n)
        asked = [(step_lo[s_n:], step_hi[s_n:]), (productive[0][p_n:], productive[1][p_n:])]
        self.queries = _Queries(
            [(starts[self.base :], ends[self.base :]), hull, *asked], [none, none, steps_kept, productive_kept]
        )
        if keeping is not None:
            keeping.note_opens(devices, self.answering, [starts, ends, hull, (step_lo, step_hi), productive])

    def stale(self) -> bool:
        """Whether what an earlier look kept of it no longer holds (its devices measure otherwise now)."""
        done = self.queries
        return self.prior is not None and (
            self.prior.counts != done.counts.tolist() or done.devices != len(self.answering)
        )

    def finish(self, limits: Mapping[str, int], keep: dict[str, SpanPrefix] | None, keeping: Keeping | None) -> None:
        """Its devices' answers made whole (the kept rows before the joined ones, before the mean, as they were
        kept): what this look settles kept for the next (spans ending before ``limits``, each device's last
        sample), and the devices' mean taken."""
        done = self.queries
        if keep is None:
            done.mean()
            return
        key = repr(self.key)
        limit = min((limits[u] for u in self.answering), default=np.iinfo(np.int64).max)
        counts = done.counts.tolist()
        if keeping is not None:
            steps = (self.keyed[0], self.step_hi, done.sums[2], done.mem[2])
            keeping.keep(key, self.answering, steps, (self.keyed[1], self.productive[1], done.sums[PRODUCTIVE]), limit)
        done.mean()
        got = settle(
            key, self.prior, self.base, self.starts, self.ends, self.keys, self.index, done.sums[0], done.mem[0],
            self.answering, counts, limit, self.hashed,
        )  # fmt: skip
        if got is not None:
            keep[key] = got


def step_hulls(span_steps: Any, starts: Any, ends: Any) -> tuple[Any, Any, Any]:
    """A process's steps (ints) and each one's first start and last end."""
    mine = span_steps
    stepped = span_steps != NO_STEP
    if not stepped.all():  # (most processes' spans are each of a step: no copies)
        mine, starts, ends = span_steps[stepped], starts[stepped], ends[stepped]
    if mine.size and (mine[1:] >= mine[:-1]).all():  # (spans in step order, as most files are: no sorting)
        first = np.flatnonzero(np.concatenate(([True], mine[1:] != mine[:-1])))
        return mine[first], np.minimum.reduceat(starts, first), np.maximum.reduceat(ends, first)
    values, at = np.unique(mine, return_inverse=True)
    lo = np.full(values.size, np.iinfo(np.int64).max)
    hi = np.full(values.size, np.iinfo(np.int64).min)
    np.minimum.at(lo, at, starts)
    np.maximum.at(hi, at, ends)
    return values, lo, hi


def productive_union(keys: list[Any], index: Any, starts: Any, ends: Any) -> tuple[Any, Any]:
    """The union of a process's productive spans, as (starts, ends)."""
    chosen = np.array([bucket == "productive" for _name, bucket in keys], bool)[index]
    lo, hi = starts[chosen], ends[chosen]
    # (merge_intervals' union, vectorised: sorted by (start, end), a new interval where a start passes every
    # end before it, each one's end the largest of its members'; spans already in that order, as a process's
    # productive spans mostly are, not sorted: lexsort is stable, the same order)
    if lo.size > 1 and not ((lo[1:] > lo[:-1]) | ((lo[1:] == lo[:-1]) & (hi[1:] >= hi[:-1]))).all():
        order = np.lexsort((hi, lo))
        lo, hi = lo[order], hi[order]
    if not lo.size:
        return lo, hi
    first = np.ones(lo.size, bool)
    first[1:] = lo[1:] > np.maximum.accumulate(hi)[:-1]
    at = np.flatnonzero(first)
    return lo[at], np.maximum.reduceat(hi, at)
