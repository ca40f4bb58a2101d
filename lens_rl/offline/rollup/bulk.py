"""The rollup's run-sized arithmetic in bulk (numpy), value for value what the plain rule gives: seconds
rounded, a phase's nearest-rank quantile, the stragglers' window medians. (How much of a window merged
interval arrays cover is :func:`lens_rl.offline.read.intervals.covered`'s, in bulk there too.)

Where a rollup meets a run-sized array (a worker's 10 k intervals, a worker group's 500 k durations), Python's
loop over its items was most of the rollup's time. Exact: lengths add as int64 (a merged array's total is
under its span), a quantile is a selection (``np.partition``), never a sort; small arrays keep the plain rule.

Example::

    quantile_s(phase, 0.95)                       # as PhasePart.quantile_s
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from lens_rl.offline.read.parts import PhasePart, median

__all__ = [
    "packed_spans",
    "quantile_s",
    "rounded",
    "seconds_rounded",
    "selected",
    "window_medians",
]

#: Items under which Python's own loop is as fast as numpy's call.
_BULK = 256
_INT64 = np.iinfo(np.int64)
#: ns under which a float of ``ns / 1e9`` lies less than 1 ns from it (and the int is exact in a float).
_EXACT_NS = 2**53


def seconds_rounded(ns: Sequence[int]) -> list[float]:
    """``[round(n / 1e9, 6) for n in ns]``, value for value, in bulk: Python's ``round`` is the nearest
    float to the float's value rounded to whole microseconds, and ``ns / 1e9`` lies within 1 ns of ``n``'s
    own value (under :data:`_EXACT_NS`), so an int count of ns not halfway between two microseconds rounds as
    its integer does, and ``k / 1e6`` is that nearest float (one correctly rounded division). Halfway,
    negative or huge counts take Python's own ``round`` (a float's side of the half, ``-0.0``)."""
    if len(ns) < _BULK:
        return [round(n / 1e9, 6) for n in ns]
    values = np.asarray(ns)
    if values.dtype != np.int64:  # (floats, bools, ints past int64: Python's own)
        return [round(n / 1e9, 6) for n in ns]
    out: list[float] = (((values + 500) // 1000) / 1e6).tolist()
    for i in np.flatnonzero((values % 1000 == 500) | (values < 0) | (values >= _EXACT_NS)).tolist():
        out[i] = round(ns[i] / 1e9, 6)
    return out


def rounded(values: Any, digits: int) -> list[float]:
    """``[round(x, digits) for x in values.tolist()]`` of a float64 array, value for value, in bulk: Python's
    ``round`` is the nearest float to the float's exact value rounded half-even to ``digits`` places, ``K``;
    ``x * 10**digits`` as a float lies within 2**-52 of its own size from the exact product, so where it is
    farther than that from a half (and under 2**52) it rounds (``np.rint``, half-even) to ``K`` as well, and
    ``K / 10**digits`` is that nearest float (one correctly rounded division). Near a half, negative, huge or
    not finite: Python's own ``round``."""
    if len(values) < _BULK:
        return [round(x, digits) for x in values.tolist()]
    scale = 10.0**digits
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = values * scale
        whole = np.rint(scaled)
        near = np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) <= np.abs(scaled) * 2.0**-51
        odd = near | ~(scaled >= 0) | ~(scaled < 2.0**52)  # (nan compares False: its own round)
    out: list[float] = (whole / scale).tolist()
    for i in np.flatnonzero(odd).tolist():
        out[i] = round(float(values[i]), digits)
    return out


def window_medians(values: Sequence[int], window: int) -> list[float]:
    """``[median(values[end - window : end]) for end in range(len(values), window - 1, -window)]`` (the
    latest window first; :func:`~lens_rl.offline.read.parts.median`'s rule: the middle value, else the mean of
    the two middle values), value for value: each window's middle by selection, two middle ints added in int64
    (ns under 2**62) and halved as one float, as Python's own int division rounds them."""
    count = len(values) // window
    table = np.asarray(values)
    if table.dtype != np.int64 or count * window < _BULK or table.max() >= 2**62 or table.min() <= -(2**62):
        return [median(values[end - window : end]) for end in range(len(values), window - 1, -window)]
    table = table[len(values) - count * window :].reshape(count, window)[::-1]
    mid = window // 2
    if window % 2:
        return np.partition(table, mid, axis=1)[:, mid].tolist()  # type: ignore[no-any-return]
    middle = np.partition(table, (mid - 1, mid), axis=1)
    return ((middle[:, mid - 1] + middle[:, mid]) / 2).tolist()  # type: ignore[no-any-return]


def packed_spans(packed: Sequence[array]) -> tuple[Any, Any, Any]:
    """Of each packed, merged interval array: its first start, its last end and its total length (ns), as
    three int64 numpy arrays; an empty one's first start is the largest int64 and its last end the smallest
    (so it lies inside any window), its length 0."""
    sizes = np.fromiter(map(len, packed), np.int64, len(packed))
    flat = np.frombuffer(b"".join(packed), np.int64)
    if not len(flat):
        zeros = np.zeros(len(packed), np.int64)
        return zeros + _INT64.max, zeros + _INT64.min, zeros
    ends = np.cumsum(sizes)
    starts = ends - sizes
    running = np.concatenate((np.zeros(1, np.int64), np.cumsum(flat[1::2] - flat[0::2])))
    empty = sizes == 0
    first = np.where(empty, _INT64.max, flat[np.minimum(starts, len(flat) - 1)])
    last = np.where(empty, _INT64.min, flat[np.maximum(ends - 1, 0)])
    return first, last, running[ends // 2] - running[starts // 2]


def quantile_s(phase: PhasePart, q: float, durations: Sequence[array] = ()) -> float | None:
    """:meth:`~lens_rl.offline.read.parts.PhasePart.quantile_s` of ``phase`` with ``durations`` (arrays kept
    out of it: a merge copies each once, here, not once per array it grows by) added: exact as a selection,
    or from its sketch."""
    arrays = [phase.durations, *durations]
    if phase.sketch is not None:
        whole = array("q")
        whole.frombytes(b"".join(arrays))
        return PhasePart(durations=whole, sketch=dict(phase.sketch)).quantile_s(q)
    count = sum(map(len, arrays))
    if not count:
        return None
    rank = max(math.ceil(q * count) - 1, 0)
    return int(selected(np.concatenate([np.frombuffer(a, np.int64) for a in arrays]), rank)) / 1e9


#: Every how many values one is sampled to bracket a selection's rank (:func:`selected`).
_SAMPLE = 64


def selected(values: Any, rank: int) -> Any:
    """The value of rank ``rank`` (0-based) of the int64 numpy array ``values`` in sorted order (``values`` may
    be reordered). Bracketed by a sorted sample (``lo``, ``hi``), counted exactly: the rank falls on ``lo``, on
    ``hi``, or among the values strictly between them, which are few and selected (``np.partition``). numpy's
    own selection over the whole array is slow where most values are one or two durations (measured, 471 k
    durations of two values: 62 ms against 2 ms here), as a worker's fixed-size phases have."""
    if len(values) < 16 * _SAMPLE:
        values.partition(rank)
        return values[rank]
    sample = np.sort(values[::_SAMPLE])
    at = rank // _SAMPLE
    brackets = ((sample[max(at - 2, 0)], sample[min(at + 3, len(sample) - 1)]), (values.min(), values.max()))
    for lo, hi in brackets:
        under = int(np.count_nonzero(values < lo))
        upto_lo = under + int(np.count_nonzero(values == lo))
        if rank < under:
            continue  # (the sample bracketed the rank wrong: rare; the whole range next, which holds it)
        if rank < upto_lo:
            return lo
        upto_hi = int(np.count_nonzero(values <= hi))
        if rank >= upto_hi:
            continue
        if rank >= upto_hi - int(np.count_nonzero(values == hi)):
            return hi
        between = values[(values > lo) & (values < hi)]
        between.partition(rank - upto_lo)
        return between[rank - upto_lo]
    raise AssertionError("unreachable: the whole range holds every rank")
