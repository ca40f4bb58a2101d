"""The job view's steps: one row per step (exclusive bucket seconds, wall, unattributed time, goodput), and the
figures over them: step time percentiles, the slowest steps, the steady state's goodput.

A step's wall is its umbrellas' (unbucketed spans carrying ``rl.step``) union, else first start to last end;
one whose umbrella never ended is incomplete, out of the step figures. Rows are built in bulk
(:mod:`lens_rl.offline.rollup.bulk`): a run's 100 k steps are one pass of numpy, not a loop per step.

Example::

    rows, walls_ns, productive_ns = step_rows(drivers, steps=None)
    step_times(rows)["step_time"]     # {"p50_s", "p95_s", "max_s"}
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import defaultdict
from collections.abc import Collection, Sequence
from itertools import chain, islice
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import covered, merge_intervals, pairs
from lens_rl.offline.read.parts import BUCKETS, ProcessPart, StepPart, step_key
from lens_rl.offline.rollup.bulk import packed_spans, seconds_rounded
from lens_rl.offline.rollup.stragglers import in_range

__all__ = ["steady_goodput", "steady_indexes", "step_rows", "step_times", "step_windows", "warmup_of"]

_EMPTY = array("q")


def step_rows(
    view: list[ProcessPart], steps: tuple[int, int] | None
) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """One row per step of the view (and each one's wall and productive time in ns): exclusive bucket
    seconds, its wall (its umbrellas' union, else first start to last end), what no bucketed span covers,
    goodput = productive / wall. A step whose umbrella never ended, or was cut short by a shutdown (while
    others have theirs), is incomplete; so is a failed one (an exception ended its umbrella: ``error``)."""
    combined, attempt_of = _combined(view, steps)
    only = view[0].key.attempt if view else 0
    order = _in_order(combined)
    parts = [combined[step] for step in order]
    walls, unattributed = _walls(parts)
    productive = [sp.ns[0] for sp in parts]
    incomplete = _incomplete(parts)
    seconds, wall_s, unattributed_s = (
        seconds_rounded(v) for v in (list(chain.from_iterable(sp.ns for sp in parts)), walls, unattributed)
    )
    p, o, i, w = BUCKETS
    rows = [
        {
            "step": step,
            "attempt": attempt_of.get(step, only),
            "seconds": {p: seconds[4 * n], o: seconds[4 * n + 1], i: seconds[4 * n + 2], w: seconds[4 * n + 3]},
            "wall_s": wall_s[n],
            "unattributed_s": unattributed_s[n],
            "goodput": productive[n] / walls[n] if walls[n] else None,
            "incomplete": incomplete[n],
        }
        for n, step in enumerate(order)
    ]
    for row, sp in zip(rows, parts, strict=True):
        if sp.error is not None:
            row["error"] = sp.error
    return rows, walls, productive


def _incomplete(parts: list[StepPart]) -> list[bool]:
    """Which steps are incomplete: an umbrella that never ended, or one cut short by a shutdown (no umbrella,
    while other steps have theirs), or one an exception ended (the step failed)."""
    with_umbrellas = any(sp.umbrellas for sp in parts)
    return [sp.incomplete or sp.error is not None or (with_umbrellas and not sp.umbrellas) for sp in parts]


def _in_order(steps: Collection[Any]) -> list[Any]:
    """``steps`` sorted by :func:`step_key` (integers alone: as they compare, the same order)."""
    return sorted(steps) if all(type(s) is int for s in steps) else sorted(steps, key=step_key)


def _combined(view: list[ProcessPart], steps: tuple[int, int] | None) -> tuple[dict[Any, StepPart], dict[Any, int]]:
    """The view's steps (in ``steps``) merged across its processes, and each one's final run's attempt where
    several processes ran it (re-runs were reduced apart)."""
    attempt_of: dict[Any, int] = {}
    if len(view) == 1:  # one driver: its steps as they are (no copy of every step)
        if steps is None:
            return view[0].steps, attempt_of
        return {step: sp for step, sp in view[0].steps.items() if in_range(step, steps)}, attempt_of
    combined: dict[Any, StepPart] = {}
    made: set[Any] = set()  # (the steps several processes ran: merged into a part of their own)
    for part in view:
        attempt = part.key.attempt
        for step, sp in part.steps.items():
            if steps is not None and not in_range(step, steps):
                continue
            found = combined.get(step)
            if found is None:  # (a step one process ran, the common case: its part as it is, read only)
                combined[step] = sp
                attempt_of[step] = attempt
                continue
            if step not in made:
                made.add(step)
                first, found = found, StepPart()
                found.merge(first)
                combined[step] = found
            found.merge(sp)
            attempt_of[step] = max(attempt_of[step], attempt)
    return combined, attempt_of


def _walls(parts: list[StepPart]) -> tuple[list[int], list[int]]:
    """Each step's :func:`_wall`, in bulk where a step has one umbrella and its bucketed spans lie inside it
    (the common case: the same two subtractions), the others one by one."""
    if len(parts) < 64:
        each = [_wall(sp) for sp in parts]
        return [wall for wall, _ in each], [uncovered for _, uncovered in each]
    umbrellas = [sp.umbrellas or _EMPTY for sp in parts]
    lo, hi, _ = packed_spans(umbrellas)
    first, last, length = packed_spans([sp.bucketed or _EMPTY for sp in parts])
    one = np.fromiter(map(len, umbrellas), np.int64, len(parts)) == 2
    wall = hi - lo
    walls, unattributed = wall.tolist(), np.maximum(wall - length, 0).tolist()
    for n in np.flatnonzero(~(one & (first >= lo) & (last <= hi))).tolist():
        walls[n], unattributed[n] = _wall(parts[n])
    return walls, unattributed


def _wall(sp: StepPart) -> tuple[int, int]:
    """A step's wall (its umbrellas' union, else first start to last end) and what of it no bucketed span
    covers, in ns."""
    windows = _windows(sp)
    wall = sum(hi - lo for lo, hi in windows)
    return wall, max(wall - (covered([sp.bucketed], windows) if sp.bucketed else 0), 0)


def _windows(sp: StepPart) -> list[tuple[int, int]]:
    """A step's wall as intervals: its umbrellas' union, else first start to last end."""
    umbrellas = sp.umbrellas
    if umbrellas:  # (one umbrella, the common case: its interval as it is)
        return [(umbrellas[0], umbrellas[1])] if len(umbrellas) == 2 else merge_intervals(pairs(umbrellas))
    return [(sp.lo, sp.hi)] if sp.lo is not None and sp.hi is not None else []


def step_times(step_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``step_time`` (p50, p95, max of the complete steps' walls) and ``slowest_steps`` (the five longest,
    ties by step)."""
    complete = [r for r in step_rows if not r["incomplete"]]
    walls = sorted(r["wall_s"] for r in complete)
    return {
        "step_time": {
            "p50_s": _percentile(walls, 0.5),
            "p95_s": _percentile(walls, 0.95),
            "max_s": walls[-1] if walls else None,
        },
        "slowest_steps": [
            {"step": r["step"], "wall_s": r["wall_s"]}
            for r in sorted(_slow(complete, walls), key=lambda r: (-r["wall_s"], step_key(r["step"])))[:5]
        ],
    }


def _slow(complete: list[dict[str, Any]], walls: list[float]) -> list[dict[str, Any]]:
    """The rows a sort of the complete steps by wall (longest first, ties by step) puts first five, among a few
    others: those over the fifth longest wall, and the first five at it (the rows are in step order)."""
    if len(walls) <= 5:
        return complete
    fifth = walls[-5]
    return [r for r in complete if r["wall_s"] > fifth] + list(islice((r for r in complete if r["wall_s"] == fifth), 5))


def steady_goodput(
    step_rows: list[dict[str, Any]], walls_ns: list[int], productive_ns: list[int], warm: Collection[Any]
) -> float | None:
    """The steady state's goodput: its complete final runs' productive over wall time, skipping the warm-up
    steps ``warm`` (:func:`warmup_of`: each attempt's first steps of the whole job, whatever ``--steps``
    selects); None without such a step (or a wall)."""
    taken = steady_indexes(step_rows, warm)
    if not taken:
        return None
    wall = sum(walls_ns[n] for n in taken)
    return sum(productive_ns[n] for n in taken) / wall if wall else None


def steady_indexes(step_rows: list[dict[str, Any]], warm: Collection[Any]) -> list[int]:
    """The indexes of the steady state's rows: complete final runs that are no warm-up step (``warm``)."""
    return [n for n, row in enumerate(step_rows) if not row["incomplete"] and row["step"] not in warm]


def warmup_of(view: Sequence[ProcessPart], warmup_steps: int) -> frozenset[Any]:
    """The job's warm-up steps: each attempt's first ``warmup_steps`` steps (by step number, among the steps
    whose final run is that attempt's: a resumed attempt warms up again: compilation, caches, the first
    rollouts), of all the view's steps, so a ``--steps`` selection past them keeps every step it selects."""
    if warmup_steps <= 0 or not view:
        return frozenset()
    if len({part.key.attempt for part in view}) == 1:  # (one attempt: its first steps)
        steps: Any = view[0].steps if len(view) == 1 else set().union(*(part.steps for part in view))
        return frozenset(_first(steps, warmup_steps))
    attempt_of: dict[Any, int] = {}
    for part in view:
        attempt = part.key.attempt
        for step in part.steps:
            if attempt_of.get(step, attempt) <= attempt:
                attempt_of[step] = attempt
    by_attempt: dict[int, list[Any]] = defaultdict(list)
    for step, attempt in attempt_of.items():
        by_attempt[attempt].append(step)
    return frozenset(chain.from_iterable(_first(steps, warmup_steps) for steps in by_attempt.values()))


def _first(steps: Collection[Any], count: int) -> list[Any]:
    """The first ``count`` of ``steps`` in :func:`step_key` order (integers alone: as they compare)."""
    if all(type(s) is int for s in steps):
        return heapq.nsmallest(count, steps)
    return heapq.nsmallest(count, steps, key=step_key)


def step_windows(view: list[ProcessPart], steps: tuple[int, int] | None) -> dict[Any, list[tuple[int, int]]]:
    """Each step of the view's wall as intervals (its umbrellas' union, else first start to last end)."""
    combined, _ = _combined(view, steps)
    return {step: _windows(sp) for step, sp in combined.items()}


def _percentile(ordered: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of sorted values (exact, deterministic)."""
    if not ordered:
        return None
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]
