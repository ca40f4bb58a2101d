"""The spans of a GPU process kept for the join with its devices' samples: their intervals, (phase, bucket)
and steps as flat columns (a process's part carries them; parts of one process merge by concatenation).

Only a process whose resource names its devices (``rl.gpu.uuids``) keeps them; a job root, a third party's
span (its time is its caller's) and a span of a step a later attempt ran again are left out, as the phase
rows leave them out.

Example::

    part.gpu = gpu_spans(uuids, tree, superseded)     # (uuids, starts, ends, keys, index, steps)
"""

from __future__ import annotations

from array import array
from typing import Any

from lens_rl.offline.read.tree import JOB, THIRD_PARTY
from lens_rl.store import INT64_END

__all__ = ["NO_STEP", "gpu_spans", "merged_gpu"]

#: A span's step in the columns where it has none, or one that is no int64 (left out of the step rows).
NO_STEP = -(2**63)

#: (uuids, starts, ends, keys [(phase, bucket)], index into keys per span, steps per span)
GpuSpans = tuple[tuple[str, ...], array, array, list[tuple[Any, Any]], array, array]


def gpu_spans(uuids: tuple[str, ...], tree: Any, superseded: frozenset[Any] = frozenset()) -> GpuSpans:
    """A process's phase spans as columns (see the module docstring)."""
    names, buckets, steps, role = tree.names, tree.buckets, tree.steps, tree.role
    table: dict[tuple[Any, Any], int] = {}
    rows = array("q")
    index = array("i")
    step_col = array("q")
    for i in range(tree.n):
        kind = role[i]
        if kind == JOB or kind == THIRD_PARTY:
            continue
        step = steps[i]
        if superseded and step in superseded:
            continue
        key = (names[i], buckets[i])
        at = table.get(key)
        if at is None:
            at = table[key] = len(table)
        rows.append(i)
        index.append(at)
        step_col.append(step if type(step) is int and NO_STEP < step < INT64_END else NO_STEP)
    starts, ends = tree.starts, tree.ends
    return (
        uuids,
        array("q", (starts[i] for i in rows)),
        array("q", (ends[i] for i in rows)),
        list(table),
        index,
        step_col,
    )


def merged_gpu(mine: GpuSpans | None, other: GpuSpans | None) -> GpuSpans | None:
    """Two parts' columns of one process as one (``other``'s keys renumbered into ``mine``'s table)."""
    if other is None:
        return mine
    if mine is None:
        return other
    uuids, starts, ends, keys, index, steps = mine
    table = {tuple(k): i for i, k in enumerate(keys)}
    keys = list(keys)
    renumber = []
    for key in other[3]:
        key = tuple(key)
        at = table.get(key)
        if at is None:
            at = table[key] = len(keys)
            keys.append(key)
        renumber.append(at)
    return (
        tuple(dict.fromkeys(uuids + tuple(other[0]))),
        starts + other[1],
        ends + other[2],
        keys,
        index + array("i", (renumber[i] for i in other[4])),
        steps + other[5],
    )
