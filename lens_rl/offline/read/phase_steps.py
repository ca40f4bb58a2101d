"""A process's phases per step: for each (phase, bucket), per integer step, its spans' count, total
(inclusive) ns and exclusive ns. What ``--steps A-B`` cuts the phase, worker-group and rank figures to
without reading a span again (SPEC "Scale": compact per-(rank, step, phase) numbers).

Only integer steps are kept: ``--steps A-B`` selects nothing else. Four int64 columns a (phase, step), steps
sorted; parts merge exactly, in any order.

Example::

    table = part.phase_steps                         # {(phase, bucket): PhaseSteps}, made in pass 4
    count, total_ns, excl_ns = table[("train", "productive")].within((2, 3))
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import int64_array, saturated
from lens_rl.store import INT64_END

__all__ = ["PhaseSteps", "phase_steps"]


class PhaseSteps:
    """One (phase, bucket)'s count, total ns and exclusive ns per integer step: four arrays, ``steps``
    sorted and distinct."""

    __slots__ = ("steps", "count", "total", "excl")

    def __init__(self, steps: array, count: array, total: array, excl: array) -> None:
        self.steps, self.count, self.total, self.excl = steps, count, total, excl

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PhaseSteps) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __len__(self) -> int:
        return len(self.steps)

    def columns(self) -> tuple[array, array, array, array]:
        return self.steps, self.count, self.total, self.excl

    def within(self, steps: tuple[int, int]) -> tuple[int, int, int]:
        """(count, total ns, exclusive ns) of its spans in the steps A..B (inclusive)."""
        keys = np.frombuffer(self.steps, np.int64) if len(self.steps) else np.zeros(0, np.int64)
        lo, hi = int(np.searchsorted(keys, steps[0], "left")), int(np.searchsorted(keys, steps[1], "right"))
        return sum(self.count[lo:hi]), sum(self.total[lo:hi]), sum(self.excl[lo:hi])

    def merge(self, other: PhaseSteps) -> None:
        """``other``'s numbers added step by step (end to end where its steps all follow these)."""
        if not len(other.steps):
            return
        if not len(self.steps) or other.steps[0] > self.steps[-1]:  # (new arrays: a part's are never changed)
            self.steps, self.count, self.total, self.excl = (
                mine + theirs for mine, theirs in zip(self.columns(), other.columns(), strict=True)
            )
            return
        summed = _summed(
            *(np.concatenate([_np(a), _np(b)]) for a, b in zip(self.columns(), other.columns(), strict=True))
        )
        self.steps, self.count, self.total, self.excl = summed


def _np(values: array) -> Any:
    return np.frombuffer(values, np.int64) if len(values) else np.zeros(0, np.int64)


def _summed(steps: Any, *values: Any) -> tuple[array, ...]:
    """The columns summed by step (steps sorted, distinct), as arrays. A sum past int64's reach (a hostile
    file's times) is summed as Python ints and saturated (:func:`~lens_rl.offline.read.intervals.saturated`)."""
    order = np.argsort(steps, kind="stable")
    ordered = steps[order]
    firsts = np.concatenate(([0], np.flatnonzero(np.diff(ordered)) + 1)) if ordered.size else np.zeros(0, np.int64)
    out = [int64_array(ordered[firsts])]
    for column in values:
        col = column[order]
        if col.size and max(int(col.max()), -int(col.min())) >= 2**62 // col.size:
            bounds = [*firsts.tolist(), col.size]
            items = col.tolist()
            out.append(array("q", (saturated(sum(items[a:b])) for a, b in zip(bounds, bounds[1:], strict=False))))
        else:
            out.append(int64_array(np.add.reduceat(col, firsts) if col.size else col))
    return tuple(out)


def phase_steps(
    tree: Any, rows: Any, stepped: Any, bucket_codes: Any, duration: Any, excl: Any
) -> dict[Any, PhaseSteps]:
    """(phase, bucket) -> :class:`PhaseSteps` of the phase rows ``rows`` (numpy indexes) that have an integer
    step; ``stepped``, ``duration`` and ``excl`` are per-span columns (Pass 4's,
    :class:`~lens_rl.offline.read.tally.Tally`)."""
    mine = rows[stepped[rows]]
    if not mine.size:
        return {}
    steps, names, buckets = tree.steps, tree.names, tree.buckets
    keep = [i for i in mine.tolist() if type(steps[i]) is int and -INT64_END <= steps[i] < INT64_END]
    if not keep:
        return {}
    idx = np.asarray(keep, dtype=np.int64)
    number = {name: k for k, name in enumerate(dict.fromkeys(names[i] for i in keep))}
    key = np.fromiter((number[names[i]] for i in keep), np.int64, len(keep)) * 8 + bucket_codes[idx] + 1
    step_col = np.fromiter((steps[i] for i in keep), np.int64, len(keep))
    out: dict[Any, PhaseSteps] = {}
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    bounds = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), ordered.size]
    for a, b in zip(bounds, bounds[1:], strict=False):
        group = order[a:b]
        i = int(idx[group[0]])
        rows_ = idx[group]
        out[(names[i], buckets[i])] = PhaseSteps(
            *_summed(
                step_col[group],
                np.ones(group.size, np.int64),
                duration[rows_].astype(np.int64),
                excl[rows_].astype(np.int64),
            )
        )
    return out
