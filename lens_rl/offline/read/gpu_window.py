"""A device's timeline from a window of its latest samples, on from what an earlier look kept of the rest.

A device's timeline before its last segment is final (:mod:`lens_rl.offline.rollup.gpu_prefix`). A look keeps,
at a segment ``k0`` a little before the last (:data:`WINDOW_NS`), what the join needs of the segments before
it (:class:`Before`: the running sums there, which measures read anything, the memory peak, the idle
stretches) and the samples from ``k0 - 1`` on. The next look builds the timeline of those samples and the new
ones only, its running sums continued from the kept ones one segment at a time as a whole day's are: every
figure is the cold one, bit for bit. A query starting before the window answers from an *anchor* (a start
an earlier look knew would be asked again: its running sums and the memory peak from it to ``k0``); one that
cannot be answered so raises :class:`ColdError` (the look joins cold).

Example::

    line = WindowLine(timeline(t, v, h, keep=before.seen).window(before.cum), before)
    sums, peaks = line.joined(starts, ends)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from lens_rl.offline.read.gpu_join import MEASURES, Timeline

__all__ = ["WINDOW_NS", "Before", "ColdError", "WindowLine", "before_at", "first_sample", "stretches"]

#: how far before a device's last sample a look keeps its samples (a span started earlier and written later
#: than the next look, whose start no anchor holds, makes that look join cold)
WINDOW_NS = 900 * 10**9
_NONE = -np.inf


class ColdError(Exception):
    """A query the window cannot answer: the look joins cold."""


class Before(NamedTuple):
    """What a device's timeline held before its window's first segment ``k0`` (segments numbered from the
    device's first): each measure integrated up to it, which measures read anything, which counters were
    read (``seen``: util, SM, tensor columns), the largest memory used (-inf: none), the idle stretches
    ``(k, 2)``, whether the segments up to ``k0`` are in order, and anchors (their starts ``(m,)``, running
    sums ``(m, MEASURES)`` and the memory peak of the samples from each to ``k0``)."""

    k0: int
    cum: Any
    measured: Any
    seen: tuple[int, ...]
    mem: float
    idle: Any
    increasing: bool
    xs: Any
    at: Any
    peaks: Any


def stretches(a: Any, b: Any, idle: Any) -> Any:
    """The stretches of segments ``[a, b)`` where ``idle``, merged as
    :meth:`~lens_rl.offline.read.gpu_join.Timeline.idle_intervals` merges them: ``(k, 2)`` int64."""
    a, b = a[idle], b[idle]
    if not a.size:
        return np.zeros((0, 2), np.int64)
    joined = np.ones(a.size, bool)
    joined[1:] = a[1:] > b[:-1]
    starts = np.flatnonzero(joined)
    ends = np.append(starts[1:], a.size) - 1
    return np.column_stack([a[starts], b[ends]])


def merged(before: Any, after: Any) -> Any:
    """Two lists of stretches, the second's first joined to the first's last where a cold merge would."""
    if not before.size or not after.size:
        return after if not before.size else before
    if after[0, 0] > before[-1, 1]:
        return np.concatenate([before, after])
    joint = np.array([[before[-1, 0], after[0, 1]]], np.int64)
    return np.concatenate([before[:-1], joint, after[1:]])


def first_sample(line: Timeline, x: Any) -> Any:
    """The first sample whose period overlaps each time of ``x`` (``Timeline.joined``'s rule; segments in order)."""
    k = np.searchsorted(line.a, x, side="right") - 1
    at = np.maximum(k, 0)
    return np.where(k >= 0, k + (line.b.take(at) <= x), 0)


def _mem_max(mem: Any) -> float:
    mem = mem[~np.isnan(mem)]
    return float(mem.max()) if mem.size else _NONE


class WindowLine:
    """A device's timeline as a window (``line``: its segments from ``before.k0`` on) and what came before it:
    the parts of :class:`~lens_rl.offline.read.gpu_join.Timeline` a look's join asks for."""

    def __init__(self, line: Timeline, before: Before) -> None:
        self.line, self.before = line, before
        self.a, self.b = line.a, line.b
        self.measured = line.measured | before.measured

    def idle_intervals(self) -> Any:
        return merged(self.before.idle, self.line.idle_intervals())

    def whole(self) -> Any:
        """Every measure from the device's first segment to the end of its last: ``(MEASURES,)``."""
        return self.line.at(self.b[-1:])[0] - 0.0

    def mem_max(self) -> float:
        """The largest memory used of any sample (nan: none)."""
        top = max(self.before.mem, _mem_max(self.line.mem))
        return top if top != _NONE else float("nan")

    def joined(self, starts: Any, ends: Any, peaks: bool = True) -> tuple[Any, Any]:
        """As :meth:`~lens_rl.offline.read.gpu_join.Timeline.joined`; :class:`ColdError` for an interval that ends
        before the window or starts before it at no anchor."""
        line, before = self.line, self.before
        if not len(starts):
            return line.joined(starts, ends, peaks)
        if not line.a.size or (ends < line.a[0]).any() or (peaks and not (line._increasing and before.increasing)):
            raise ColdError
        inside = starts >= line.a[0]
        if inside.all():
            return line.joined(starts, ends, peaks)
        out = np.zeros((len(starts), len(MEASURES)))
        mem = np.full(len(starts), np.nan) if peaks else None
        if inside.any():
            got, high = line.joined(starts[inside], ends[inside], peaks)
            out[inside] = got
            if mem is not None:
                mem[inside] = high
        early = ~inside
        lo, hi = starts[early], ends[early]
        k = np.searchsorted(before.xs, lo)
        k = np.minimum(k, max(before.xs.size - 1, 0))
        if not before.xs.size or (before.xs[k] != lo).any():
            raise ColdError
        out[early] = line.at(hi) - before.at[k]
        if mem is not None:
            k_hi = np.searchsorted(line.a, hi, side="right") - 1
            last = k_hi + 1 - (line.a.take(k_hi) == hi)
            tail = np.nan_to_num(line._peaks(np.zeros(lo.size, np.int64), last), nan=_NONE)
            top = np.maximum(before.peaks[k], tail)
            mem[early] = np.where(np.isfinite(top), top, np.nan)
        return out, mem


def before_at(line: Timeline, before: Before | None, j: int, opens: Any, read: Any) -> Before:
    """What comes before segment ``j`` of ``line`` (a whole timeline, ``before`` None, or a window's, on
    from ``before``), anchored at the starts ``opens`` before it (each one a window's line starts after, or
    one of ``before``'s anchors: else :class:`ColdError`); ``read``: the counters (util, SM, tensor columns)
    read by the samples of the segments before ``j``."""
    k0 = j if before is None else before.k0 + j
    cum = line.running(j)
    measured, idle_segments = line.read_before(j)
    idle = stretches(line.a[:j], line.b[:j], idle_segments)
    a, b = line.a[: j + 1], line.b[: j + 1]
    increasing = line._increasing or bool((a[1:] > a[:-1]).all() and (b[:-1] <= a[1:]).all() and (b >= a).all())
    mem = _mem_max(line.mem[:j])
    seen = tuple(sorted(set(read)))
    edge = line.a[j] if j < line.a.size else np.iinfo(np.int64).max
    opens = np.asarray(opens, np.int64)
    xs = np.unique(opens[opens < edge])  # (those before the edge first: a look's ~3000 asked again hold ~1)
    at = np.zeros((xs.size, len(MEASURES)))
    peaks = np.full(xs.size, _NONE)
    mem_low = np.nan_to_num(line.mem[:j], nan=_NONE)
    if before is not None:
        measured |= before.measured
        idle = merged(before.idle, idle)
        increasing = increasing and before.increasing
        mem = max(mem, before.mem)
        seen = tuple(sorted(set(seen) | set(before.seen)))
    if xs.size:
        inside = xs >= line.a[0] if line.a.size else np.zeros(xs.size, bool)
        if before is None:
            inside[:] = True
        if inside.any():
            at[inside] = line.at(xs[inside])
            first = first_sample(line, xs[inside])
            suffix = np.append(np.maximum.accumulate(mem_low[::-1])[::-1], _NONE)  # (from each sample to j)
            peaks[inside] = suffix[np.minimum(first, j)]
        early = ~inside
        if early.any():
            assert before is not None
            k = np.minimum(np.searchsorted(before.xs, xs[early]), max(before.xs.size - 1, 0))
            if not before.xs.size or (before.xs[k] != xs[early]).any():
                raise ColdError
            at[early] = before.at[k]
            peaks[early] = np.maximum(before.peaks[k], mem_low.max(initial=_NONE))
    return Before(k0, cum, measured, seen, mem, idle, increasing, xs, at, peaks)
