"""The driver's bucket time over the wall: concurrent spans of one process counted once.

A bucketed span's exclusive time (:func:`lens_rl.buckets.exclusive_time`) leaves out its nested bucketed
spans but not its siblings: a generation thread beside the trainer in one step (0.4 s inside 0.5 s) sums to
0.9 s of productive time over a 0.5 s wall. The driver's view (the job, its steps) is wall-clock, so where a
process's exclusive time adds up to more than its bucketed spans cover, its buckets are re-counted over the
wall with :func:`~lens_rl.offline.read.intervals.claimed`: each instant once, productive first. Workers keep
their per-thread sums (the resource view), as the phase rows do everywhere.

Example::

    claim_overlaps(part, tree, kids_of, superseded)   # after pass 4, on a driver's part
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lens_rl.offline.read.intervals import claimed, pairs, subtracted
from lens_rl.offline.read.linked import Tree
from lens_rl.offline.read.parts import BUCKETS, ProcessPart
from lens_rl.offline.read.tree import JOB
from lens_rl.offline.read.tree import THIRD_PARTY as THIRD_ROLE

__all__ = ["claim_overlaps", "overflows"]

_RANK = {b: i for i, b in enumerate(BUCKETS)}


def overflows(summed: int, union: Any) -> bool:
    """Whether exclusive ns ``summed`` exceed what the packed union ``union`` covers (concurrent spans)."""
    return summed > sum(b - a for a, b in pairs(union)) if union else summed > 0


def claim_overlaps(
    part: ProcessPart, tree: Tree, kids_of: Mapping[int, list[tuple[int, int]]], superseded: frozenset[Any]
) -> None:
    """A driver part's buckets (and each overflowing step's) re-counted over the wall where its spans ran
    concurrently; a step whose bucketed spans run past its umbrella (a phase of the step outliving it) counted
    inside the umbrella only, as its wall and unattributed time are; nothing is done (or read again) where
    neither happened."""
    whole = overflows(sum(part.bucket_ns.values()), part.bucketed)
    windows = {step: w for step, sp in part.steps.items() if (w := _spilled(sp)) is not None}
    steps = {step for step, sp in part.steps.items() if overflows(sum(sp.ns), sp.bucketed)} | set(windows)
    if not whole and not steps:
        return
    names_of = tree.steps
    rows = [i for i in _bucketed_rows(tree, superseded) if whole or names_of[i] in steps]
    root = _roots(tree)
    if whole:
        part.bucket_ns = dict(zip(BUCKETS, _claimed_by_tree(tree, kids_of, rows, root), strict=True))
    by_step: dict[Any, list[int]] = {}
    for i in rows:
        if names_of[i] in steps:
            by_step.setdefault(names_of[i], []).append(i)
    for step, mine in by_step.items():
        part.steps[step].ns = _claimed_by_tree(tree, kids_of, mine, root, windows.get(step))


def _spilled(sp: Any) -> tuple[int, int] | None:
    """A step's umbrellas' hull where its bucketed spans run outside it (a phase of the step outliving its
    umbrella), else None (no umbrella, or every bucketed span inside)."""
    if not sp.umbrellas or not sp.bucketed:
        return None
    hull = list(pairs(sp.umbrellas))
    lo, hi = min(a for a, _ in hull), max(b for _, b in hull)
    return (lo, hi) if sp.bucketed[0] < lo or sp.bucketed[-1] > hi else None


def _claimed_by_tree(
    tree: Tree,
    kids_of: Mapping[int, list[tuple[int, int]]],
    rows: list[int],
    root: list[int],
    window: tuple[int, int] | None = None,
) -> list[int]:
    """The rows' time claimed over the wall tree by tree (spans under one top span, below the job root), summed:
    a tree is what one read of a growing file reduces whole (the refresh cache settles whole trees), so a
    refreshed look counts exactly what a cold one does. ``window``: only the time inside it counts."""
    trees: dict[int, list[int]] = {}
    for i in rows:
        trees.setdefault(root[i], []).append(i)
    out = [0] * len(BUCKETS)
    for mine in trees.values():
        segments = _segments(tree, kids_of, mine)
        if window is not None:
            lo, hi = window
            segments = ((max(a, lo), min(b, hi), r, i) for a, b, r, i in segments if min(b, hi) > max(a, lo))
        totals, _ = claimed(segments)
        out = [a + b for a, b in zip(out, totals, strict=True)]
    return out


def _roots(tree: Tree) -> list[int]:
    """Each row's top span: its outermost ancestor in the process below the job root (itself if none)."""
    parents, role = tree.parents, tree.role
    root = [-1] * tree.n
    for i in range(tree.n):
        if root[i] != -1:
            continue
        chain, seen = [], set()
        at = i
        while root[at] == -1:
            chain.append(at)
            seen.add(at)
            p = parents[at]
            if p == -1 or p in seen or role[p] == JOB:  # (a cycle: its spans share one tree)
                break
            at = p
        top = root[at] if root[at] != -1 else at
        for j in chain:
            root[j] = top
    return root


def _bucketed_rows(tree: Tree, superseded: frozenset[Any]) -> Iterable[int]:
    """The rows pass 4 counts in the buckets: bucketed, neither the job root nor a third party's, of no re-run."""
    buckets, role, steps = tree.buckets, tree.role, tree.steps
    for i in range(tree.n):
        if buckets[i] is None or role[i] == JOB or role[i] == THIRD_ROLE:
            continue
        if superseded and steps[i] in superseded:
            continue
        yield i


def _segments(tree: Tree, kids_of: Mapping[int, list[tuple[int, int]]], rows: list[int]) -> Iterable[tuple[Any, ...]]:
    """Each row's exclusive stretches as ``(start, end, bucket rank, row)``."""
    starts, ends, buckets = tree.starts, tree.ends, tree.buckets
    for i in rows:
        rank = _RANK[buckets[i]]
        kids = kids_of.get(i)
        if not kids:
            yield starts[i], ends[i], rank, i
        else:
            for a, b in subtracted(starts[i], ends[i], kids):
                yield a, b, rank, i
