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

import math
from array import array
from typing import Any, NamedTuple

import numpy as np

from lens_rl.offline.read.intervals import int64_array, saturated
from lens_rl.store import INT64_END

__all__ = ["SPARSE", "PhaseSteps", "Window", "phase_steps"]


#: the columns most phases never fill (no ``rl.num_tokens``, no unbucketed leaf): kept empty while all zero
SPARSE = ("token_ns", "leaf", "tokens", "flops", "flops_tokens")
_CODES = {"token_ns": "q", "leaf": "q", "tokens": "d", "flops": "d", "flops_tokens": "d"}


class PhaseSteps:
    """One (phase, bucket)'s numbers per integer step: count, total ns, exclusive ns, token ns and unbucketed
    leaves' ns (int64), its spans' tokens, FLOPs and tokens with FLOPs given (float64), ``steps`` sorted and
    distinct (a column of :data:`SPARSE` empty while all zero); and its spans' durations in step order (each
    step's ``count`` of them, ascending within the step), or none (a table made without them: its windows
    then have no p95)."""

    __slots__ = (
        "steps",
        "count",
        "total",
        "excl",
        "token_ns",
        "leaf",
        "tokens",
        "flops",
        "flops_tokens",
        "durations",
    )

    def __init__(
        self,
        steps: array,
        count: array,
        total: array,
        excl: array,
        token_ns: array | None = None,
        leaf: array | None = None,
        tokens: array | None = None,
        flops: array | None = None,
        flops_tokens: array | None = None,
        durations: array | None = None,
    ) -> None:
        self.steps, self.count, self.total, self.excl = steps, count, total, excl
        self.token_ns, self.leaf = _sparse(token_ns, "q"), _sparse(leaf, "q")
        self.tokens, self.flops, self.flops_tokens = (
            _sparse(tokens, "d"),
            _sparse(flops, "d"),
            _sparse(flops_tokens, "d"),
        )
        self.durations = durations if durations is not None else array("q")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PhaseSteps) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __len__(self) -> int:
        return len(self.steps)

    def columns(self) -> tuple[array, array, array, array]:
        """The steps, counts, total and exclusive ns."""
        return self.steps, self.count, self.total, self.excl

    def all_columns(self) -> tuple[array, ...]:
        """Every column as kept, in the constructor's order (``durations`` last; a sparse one maybe empty)."""
        return tuple(getattr(self, k) for k in self.__slots__)

    def full(self, name: str) -> array:
        """Column ``name`` one value a step (a sparse one's zeros made)."""
        values = getattr(self, name)
        if len(values) or name not in _CODES:
            return values
        return array(_CODES[name], bytes(8 * len(self.steps)))

    def copy(self) -> PhaseSteps:
        """A table of its own (the arrays shared: a table's are never changed in place)."""
        return PhaseSteps(*self.all_columns())

    def timed(self) -> bool:
        """Whether it keeps its spans' durations (a table keeps all of them or none: a step has a span)."""
        return len(self.durations) > 0 or not len(self.steps)

    def adds_up(self) -> bool:
        """Whether its columns are one value a step (a sparse one: or none), its durations one per span counted
        (or none): a record read back is checked."""
        n, count = len(self.steps), _np(self.count)
        if any(len(getattr(self, k)) not in (0, n) for k in SPARSE):
            return False
        return not len(self.durations) or (bool((count > 0).all()) and len(self.durations) == int(count.sum()))

    def _bounds(self, steps: tuple[int, int]) -> tuple[int, int]:
        keys = np.frombuffer(self.steps, np.int64) if len(self.steps) else np.zeros(0, np.int64)
        return int(np.searchsorted(keys, steps[0], "left")), int(np.searchsorted(keys, steps[1], "right"))

    def within(self, steps: tuple[int, int]) -> tuple[int, int, int]:
        """(count, total ns, exclusive ns) of its spans in the steps A..B (inclusive)."""
        lo, hi = self._bounds(steps)
        return sum(self.count[lo:hi]), sum(self.total[lo:hi]), sum(self.excl[lo:hi])

    def window(self, steps: tuple[int, int]) -> Window:
        """Every figure of its spans in the steps A..B (inclusive): :class:`Window`."""
        lo, hi = self._bounds(steps)
        count = _np(self.count)
        spans = int(count[lo:hi].sum())
        durations = None
        if self.timed():
            first = int(count[:lo].sum())
            durations = self.durations[first : first + spans]
        return Window(
            spans,
            sum(self.total[lo:hi]),
            sum(self.excl[lo:hi]),
            sum(self.token_ns[lo:hi]),  # (a sparse column's slice: empty, 0)
            sum(self.leaf[lo:hi]),
            math.fsum(self.tokens[lo:hi]),
            math.fsum(self.flops[lo:hi]),
            math.fsum(self.flops_tokens[lo:hi]),
            durations,
        )

    def with_tokens(self, step: int, tokens: float, token_ns: int) -> PhaseSteps:
        """A copy with ``tokens`` run in ``token_ns`` added at ``step`` (one of its steps; else unchanged)."""
        lo, hi = self._bounds((step, step))
        out = self.copy()
        if hi > lo:
            out.token_ns, out.tokens = array("q", self.full("token_ns")), array("d", self.full("tokens"))
            out.token_ns[lo] += token_ns
            out.tokens[lo] += tokens
            out.token_ns, out.tokens = _sparse(out.token_ns, "q"), _sparse(out.tokens, "d")
        return out

    def merge(self, other: PhaseSteps) -> None:
        """``other``'s numbers added step by step (end to end where its steps all follow these)."""
        if not len(other.steps):
            return
        timed = self.timed() and other.timed()
        if not len(self.steps) or other.steps[0] > self.steps[-1]:  # (new arrays: a part's are never changed)
            for name in ("steps", "count", "total", "excl"):
                setattr(self, name, getattr(self, name) + getattr(other, name))
            for name in SPARSE:
                if len(getattr(self, name)) or len(getattr(other, name)):
                    setattr(self, name, self.full(name) + other.full(name))
            self.durations = self.durations + other.durations if timed else array("q")
            return
        names = ("steps", "count", "total", "excl", "token_ns", "leaf")
        ints = [np.concatenate([_np(self.full(k)), _np(other.full(k))]) for k in names]
        floats = [
            np.concatenate([_npd(self.full(k)), _npd(other.full(k))]) for k in ("tokens", "flops", "flops_tokens")
        ]
        durations = _merged_durations(self, other) if timed else array("q")
        self.steps, self.count, self.total, self.excl, token_ns, leaf = _summed(*ints)
        tokens, flops, flops_tokens = _floats_summed(ints[0], *floats)
        self.token_ns, self.leaf = _sparse(token_ns, "q"), _sparse(leaf, "q")
        self.tokens, self.flops, self.flops_tokens = (
            _sparse(tokens, "d"),
            _sparse(flops, "d"),
            _sparse(flops_tokens, "d"),
        )
        self.durations = durations


def _sparse(values: array | None, code: str) -> array:
    """A sparse column as kept: empty where all zero (or not given)."""
    if values is None or not len(values):
        return array(code)
    if not np.frombuffer(values, np.int64 if code == "q" else np.float64).any():
        return array(code)
    return values


class Window(NamedTuple):
    """A :class:`PhaseSteps`' figures over a range of steps (``durations``: None where it keeps none)."""

    spans: int
    total_ns: int
    excl_ns: int
    token_ns: int
    leaf_ns: int
    tokens: float
    flops: float
    flops_tokens: float
    durations: array | None


def _npd(values: array) -> Any:
    return np.frombuffer(values, np.float64) if len(values) else np.zeros(0, np.float64)


def _floats_summed(steps: Any, *values: Any) -> tuple[array, ...]:
    """Float columns summed by step, as :func:`_summed` sums its int64 ones (the same order)."""
    order = np.argsort(steps, kind="stable")
    ordered = steps[order]
    firsts = np.concatenate(([0], np.flatnonzero(np.diff(ordered)) + 1)) if ordered.size else np.zeros(0, np.int64)
    return tuple(
        array("d", (np.add.reduceat(column[order], firsts) if column.size else column).astype(np.float64).tobytes())
        for column in values
    )


def _merged_durations(mine: PhaseSteps, other: PhaseSteps) -> array:
    """Two tables' durations as one, in step order and ascending within a step."""
    steps = np.concatenate([np.repeat(_np(t.steps), _np(t.count)) for t in (mine, other)])
    durations = np.concatenate([_np(mine.durations), _np(other.durations)])
    return int64_array(durations[np.lexsort((durations, steps))])


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


def _token_columns(tree: Any, keep: list[int]) -> tuple[Any, Any, Any, Any]:
    """Per row of ``keep``: the ns of a span with tokens, its tokens, its FLOPs and the tokens those FLOPs are
    of (``rl.flops_per_token`` set); zeros where the span has none."""
    counted = tree.tokens or {}
    flops_of = tree.flops or {}
    token_ns = np.zeros(len(keep), np.int64)
    tokens, flops, flops_tokens = (np.zeros(len(keep), np.float64) for _ in range(3))
    if counted:
        starts, ends = tree.starts, tree.ends
        for at, i in enumerate(keep):
            count = counted.get(i)
            if count is None:
                continue
            token_ns[at] = ends[i] - starts[i]
            tokens[at] = count
            per = flops_of.get(i)
            if per is not None:
                flops[at] = count * per
                flops_tokens[at] = count
    return token_ns, tokens, flops, flops_tokens


def phase_steps(
    tree: Any, rows: Any, stepped: Any, bucket_codes: Any, duration: Any, excl: Any, leaves: Any = None
) -> dict[Any, PhaseSteps]:
    """(phase, bucket) -> :class:`PhaseSteps` of the phase rows ``rows`` (numpy indexes) that have an integer
    step; ``stepped``, ``duration``, ``excl`` and ``leaves`` (unbucketed leaves inside a step) are per-span
    columns (Pass 4's,
    :class:`~lens_rl.offline.read.tally.Tally`); tokens and FLOPs from the tree's (``rl.num_tokens``,
    ``rl.flops_per_token``), as :meth:`~lens_rl.offline.read.tally.Tally.tokens` counts them."""
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
    counted = tree.tokens or {}
    token_ns, tokens, flops, flops_tokens = _token_columns(tree, keep)
    spans = duration[idx].astype(np.int64)
    leaf_ns = np.where(leaves[idx], spans, 0) if leaves is not None else np.zeros(len(keep), np.int64)
    out: dict[Any, PhaseSteps] = {}
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    bounds = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), ordered.size]
    for a, b in zip(bounds, bounds[1:], strict=False):
        group = order[a:b]
        i = int(idx[group[0]])
        rows_ = idx[group]
        mine_steps, mine_spans = step_col[group], spans[group]
        table = PhaseSteps(
            *_summed(
                mine_steps,
                np.ones(group.size, np.int64),
                mine_spans,
                excl[rows_].astype(np.int64),
                token_ns[group],
                leaf_ns[group],
            )
        )
        if counted:  # (else no span of the process has tokens: the float columns stay empty)
            summed = _floats_summed(mine_steps, tokens[group], flops[group], flops_tokens[group])
            table.tokens, table.flops, table.flops_tokens = (_sparse(column, "d") for column in summed)
        table.durations = int64_array(mine_spans[np.lexsort((mine_spans, mine_steps))])
        out[(names[i], buckets[i])] = table
    return out
