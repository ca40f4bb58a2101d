"""Interval arithmetic over nanoseconds, kept flat: what the reductions use for unions and coverage.

Intervals are ``(start, end)`` int pairs; a run's millions of them are kept *packed*: one flat int64
``array`` (start, end, start, end ...), 16 bytes an interval instead of a ~120-byte tuple.

Example::

    packed = merge_indexed(rows, starts, ends)           # the union of some spans' intervals
    covered([packed], [(lo, hi)])                        # how much of [lo, hi] it covers, in ns
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from lens_rl.buckets import claimed, subtracted, union_length

#: int64's range
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "claimed",
    "clipped",
    "covered",
    "coverage",
    "int64_array",
    "intersected",
    "intervals_column",
    "intervals_from_column",
    "merge_indexed",
    "merge_intervals",
    "merge_packed",
    "merged_packed",
    "overcounted",
    "pack",
    "pairs",
    "saturated",
    "sorted_by",
    "subtracted",
    "total",
    "union_packed",
]


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of ``intervals`` as sorted, disjoint intervals."""
    out: list[tuple[int, int]] = []
    for interval in sorted(intervals):
        if out and interval[0] <= out[-1][1]:
            if interval[1] > out[-1][1]:
                out[-1] = (out[-1][0], interval[1])
        else:  # kept as it is (no copy: a run's intervals are millions)
            out.append(interval if type(interval) is tuple else (interval[0], interval[1]))
    return out


def pack(intervals: Iterable[tuple[int, int]]) -> array:
    """Intervals as one flat int64 array (start, end, start, end ...)."""
    out = array("q")
    for start, end in intervals:
        out.append(start)
        out.append(end)
    return out


def merge_packed(a: array, b: array) -> array:
    """The union of two packed, merged interval arrays, as a new array: where ``b`` starts after ``a`` ends (a
    file's next lines, a later step) the two end to end, else merged."""
    if not a or not b or b[0] > a[-1]:
        return a + b
    return pack(merge_intervals(pairs(a + b)))


def pairs(packed: Iterable[int]) -> Iterator[tuple[int, int]]:
    """The (start, end) intervals of a :func:`pack`-ed array."""
    it = iter(packed)
    return zip(it, it, strict=False)


def clipped(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """``intervals`` cut to ``[lo, hi]`` (those outside left out), lazily, in their order."""
    return ((max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo))


def covered(packed: Iterable[array], windows: Iterable[tuple[int, int]]) -> int:
    """The length (ns) the union of ``packed`` interval arrays (each merged, so sorted) covers inside
    ``windows`` (merged too). Each array is cut to each window by bisection, so the cost is that of the
    intervals inside the windows, not of the whole array per window; one array's cut is summed in C, and two
    arrays' union is their sum less their overlap (the larger cut by the smaller's intervals)."""
    packed = [p for p in packed if len(p)]
    windows = list(windows)
    if len(packed) == 1:
        return _covered_by(packed[0], windows)
    if len(packed) == 2:  # |A u B| = |A| + |B| - |A n B|, the overlap cut from the larger by the smaller's windows
        small, large = sorted(packed, key=len)
        overlap = sum(_covered_by(large, pairs(_cut(small, lo, hi))) for lo, hi in windows)
        return _covered_by(large, windows) + _covered_by(small, windows) - overlap
    streams = [pairs(_cut(p, lo, hi)) for lo, hi in windows for p in packed]
    if not streams:
        return 0
    return int(union_length(heapq.merge(*streams), ordered=True))


def total(intervals: Iterable[tuple[int, int]]) -> int:
    """The summed length of disjoint intervals (merged ones: their union's length)."""
    return sum(b - a for a, b in intervals)


def coverage(packed: array, los: Any, his: Any) -> Any:
    """How much of each window ``[los[k], his[k]]`` the merged, packed intervals cover, in ns, as an int64 numpy
    array: two binary searches of every window's ends in C (a run's 10 k step windows against a process's
    busy time at once), through the covered length up to a time (whole intervals before it, less the part
    of the last one past it)."""
    import numpy as np  # (only where windows are many: the pipeline's per-step figures)

    los, his = np.asarray(los, np.int64), np.asarray(his, np.int64)
    if not len(packed):
        return np.zeros(len(los), np.int64)
    bounds = np.frombuffer(packed, np.int64).reshape(-1, 2)
    starts, ends = bounds[:, 0], bounds[:, 1]
    upto = np.concatenate((np.zeros(1, np.int64), np.cumsum(ends - starts)))

    def before(t: Any) -> Any:
        j = np.searchsorted(starts, t, side="right")
        last = np.maximum(j - 1, 0)
        return upto[j] - np.where(j > 0, np.maximum(ends[last] - t, 0), 0)

    return np.maximum(before(his) - before(los), 0)


def union_packed(arrays: Iterable[array]) -> array:
    """The union of packed, merged interval arrays (several processes' busy time), packed and merged (an array
    alone is returned as it is): sorted by start and merged where a start is past every end before it, in numpy.
    Where each interval ends at or after it starts, the arrays are united two by two a level at a time while
    that shrinks them (ranks busy at the same times: a run's 50 ranks' 500 k intervals are a tenth of that
    after two levels; 20 -> 9 ms), the rest at once: the same union (a merged union is the union's connected
    stretches, however its arrays are grouped)."""
    arrays = [a for a in arrays if len(a)]
    if len(arrays) <= 1:
        return arrays[0] if arrays else array("q")
    import numpy as np  # (run-sized arrays: the pipeline's pools)

    level = [np.frombuffer(a, np.int64) for a in arrays]
    bounds = np.concatenate(level).reshape(-1, 2)
    if not bool((bounds[:, 1] >= bounds[:, 0]).all()):  # (an interval ending before it starts: the running end
        order = np.argsort(bounds[:, 0], kind="stable")  # of the intervals by start, over them all at once)
        return int64_array(_merged_np(bounds[order, 0], np.maximum.accumulate(bounds[order, 1])))
    size = len(bounds)
    while len(level) > 2:
        level = [_united(level[k], level[k + 1]) for k in range(0, len(level) - 1, 2)] + level[len(level) & ~1 :]
        before, size = size, sum(map(len, level)) // 2
        if size > 0.6 * before:  # (ranks busy at other times: a level no longer pays for itself)
            break
    bounds = np.concatenate(level).reshape(-1, 2)
    return int64_array(_apart(bounds))


def _united(a: Any, b: Any) -> Any:
    """Two packed, merged interval arrays (numpy) as their union, merged (numpy)."""
    import numpy as np

    return _apart(np.concatenate((a, b)).reshape(-1, 2))


def _apart(bounds: Any) -> Any:
    """Intervals (numpy rows of start, end; each ending at or after it starts) merged, packed (numpy): their
    starts and ends sorted apart (each array's are in order: runs a stable sort merges): the k-th end is
    before the next start exactly where the first k intervals by start all ended before it, and a merged
    interval's end is then the k-th end."""
    import numpy as np

    return _merged_np(np.sort(bounds[:, 0], kind="stable"), np.sort(bounds[:, 1], kind="stable"))


def merged_packed(los: Sequence[int], his: Sequence[int]) -> array:
    """:func:`merge_intervals` of the intervals ``(los[k], his[k])``, packed (:func:`pack`), in numpy: starts
    and ends sorted apart (:func:`union_packed`'s rule; a run's step windows, its weight syncs). The plain
    rule where an interval ends before it starts or a time is past int64."""
    import numpy as np  # (run-sized lists: the pipeline's wall and weight syncs)

    if not los:
        return array("q")
    try:
        lo, hi = np.asarray(los, np.int64), np.asarray(his, np.int64)
    except (OverflowError, TypeError, ValueError):  # (a time past int64: the plain rule)
        return pack(merge_intervals(zip(los, his, strict=True)))
    if not bool((hi >= lo).all()):
        return pack(merge_intervals(zip(los, his, strict=True)))
    return _merged_apart(np.sort(lo, kind="stable"), np.sort(hi, kind="stable"))


def _merged_apart(starts: Any, ends: Any) -> array:
    """Intervals given as their starts and ends, each sorted (numpy int64), merged and packed: a start past
    the running end (the end before it) begins a new interval, which ends at the end before the next one."""
    return int64_array(_merged_np(starts, ends))


def _merged_np(starts: Any, ends: Any) -> Any:
    """:func:`_merged_apart`, as a numpy array."""
    import numpy as np

    first = np.ones(len(starts), bool)
    first[1:] = starts[1:] > ends[:-1]
    at = np.flatnonzero(first)
    out = np.empty(2 * len(at), np.int64)
    out[0::2] = starts[at]
    out[1::2] = ends[np.append(at[1:] - 1, len(starts) - 1)]
    return out


def overcounted(sets: Iterable[tuple[Any, Any]]) -> tuple[Any, Any, Any]:
    """Where more than one of some sets of intervals (each merged: ``(starts, ends)``, numpy int64) covers, as
    ``(starts, ends, extra)``: each stretch and how many covers past the first it has (their sum counted once
    each is the union: the sets' lengths added, less each stretch's length times its ``extra``)."""
    import numpy as np

    sets = [(lo, hi) for lo, hi in sets if len(lo)]
    if len(sets) < 2:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    starts, ends = np.concatenate([lo for lo, _hi in sets]), np.concatenate([hi for _lo, hi in sets])
    edges = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(len(starts), np.int64), np.full(len(ends), -1, np.int64)])
    order = np.argsort(edges, kind="stable")
    edges, depth = edges[order], np.cumsum(steps[order])  # (depth after each edge: how many cover from it on)
    lo, hi, extra = edges[:-1], edges[1:], depth[:-1] - 1
    keep = (extra > 0) & (hi > lo)
    return lo[keep], hi[keep], extra[keep]


def intersected(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The intersection of two merged (sorted, disjoint) interval lists: where both cover, in one merge pass."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _covered_by(packed: array, windows: Iterable[tuple[int, int]]) -> int:
    """The length one merged array covers inside merged ``windows`` (both disjoint: each window's adds up)."""
    return sum(_length(_cut(packed, lo, hi)) for lo, hi in windows)


#: Items past which a merged array's length is summed by numpy (below, Python's own loop is as fast).
_BULK = 256


def _length(packed: array) -> int:
    """The total length of a merged interval array (exact: its lengths add as int64 within its span)."""
    if len(packed) < _BULK:
        return sum(packed[1::2]) - sum(packed[0::2])
    import numpy as np  # (only for a run-sized array: the readers of parts stay light)

    bounds = np.frombuffer(packed, np.int64).reshape(-1, 2)
    return int((bounds[:, 1] - bounds[:, 0]).sum())


def _cut(packed: array, lo: int, hi: int) -> array:
    """The intervals of the merged array ``packed`` that overlap ``[lo, hi]``, clipped to it (packed)."""
    first = bisect_right(packed, lo) // 2  # (inside an interval, or before the next one)
    last = (bisect_left(packed, hi) + 1) // 2  # (past the last interval that starts before hi)
    if last <= first:
        return array("q")
    cut = packed[2 * first : 2 * last]
    cut[0], cut[-1] = max(cut[0], lo), min(cut[-1], hi)
    return cut


def sorted_by(indexes: Sequence[int], key: Any) -> Sequence[int]:
    """``indexes`` (read twice at most) stably sorted by ``key``: as they are when already in order (the common
    case: spans written as they end, one after another), so no list of a run's indexes is made."""
    last = None
    for i in indexes:
        value = key(i)
        if last is not None and value < last:
            return sorted(indexes, key=key)
        last = value
    return indexes


def merge_indexed(indexes: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> array:
    """The merged union of the intervals ``(starts[i], ends[i])`` for ``i`` in ``indexes``, packed (as
    ``pack(merge_intervals(...))`` gives it, without a tuple per interval)."""
    if len(indexes) >= _BULK and type(starts) is array and type(ends) is array:
        return _merged_bulk(indexes, starts, ends)
    out = array("q")
    for i in sorted_by(indexes, starts.__getitem__):
        start, end = starts[i], ends[i]
        if out and start <= out[-1]:
            if end > out[-1]:
                out[-1] = end
        else:
            out.append(start)
            out.append(end)
    return out


def _merged_bulk(indexes: Sequence[int], starts: array, ends: array) -> array:
    """:func:`merge_indexed` of many intervals with numpy: sorted by start, an interval joins the one before
    where it starts at or before the furthest end so far (touching ones merge, as one at a time)."""
    import numpy as np  # (only for a run-sized array: the readers of parts stay light)

    rows = np.asarray(indexes, dtype=np.int64)
    lo, hi = np.frombuffer(starts, np.int64)[rows], np.frombuffer(ends, np.int64)[rows]
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], np.maximum.accumulate(hi[order])
    first = np.ones(lo.size, dtype=bool)
    first[1:] = lo[1:] > hi[:-1]
    last = np.empty(lo.size, dtype=bool)
    last[:-1], last[-1] = first[1:], True
    packed = np.empty(2 * int(first.sum()), dtype=np.int64)
    packed[0::2], packed[1::2] = lo[first], hi[last]
    return int64_array(packed)


def saturated(number: int) -> int:
    """``number`` clamped to int64's range: a sum of a hostile file's times stays storable, and a sum of
    saturated non-negative parts equals the saturated whole (a cached part merged with its file's next lines
    gives what a cold read does)."""
    return INT64_MIN if number < INT64_MIN else INT64_MAX if number > INT64_MAX else number


def int64_array(values: Any) -> array:
    """An int64 numpy array (or anything numpy reads as one) as an ``array("q")``, whose items Python reads
    one at a time fast."""
    import numpy as np  # (numpy only where the critical path's arrays are made: the readers of parts stay light)

    out = array("q")
    out.frombytes(np.ascontiguousarray(values, np.int64).tobytes())
    return out


def intervals_column(values: Iterable[array | None]) -> tuple[array, array]:
    """Optional packed interval arrays as (lengths, -1 for None; their items, concatenated)."""
    lengths, items = array("q"), array("q")
    for value in values:
        if value is None:
            lengths.append(-1)
        else:
            lengths.append(len(value))
            items.extend(value)
    return lengths, items


def intervals_from_column(lengths: Iterable[int], items: array) -> Iterator[array | None]:
    """The packed interval arrays (or None) :func:`intervals_column` made columns of, in order."""
    at = 0
    for length in lengths:
        if length < 0:
            yield None
        else:
            yield items[at : at + length]
            at += length
