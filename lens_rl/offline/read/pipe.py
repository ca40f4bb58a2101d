"""One process's share of the async-pipeline figures (:mod:`lens_rl.offline.rollup.pipeline`): when it was busy,
its weight syncs, and what its training phases consumed.

* ``productive``: the union of its productive spans (packed, merged): where its pool is busy.
* ``syncs``: its weight-sync-family spans (:data:`lens_rl.buckets.WEIGHT_SYNC_PHASES`) as (start, end, step).
* ``consumed``: its phases that said which trajectory versions they consumed, as (step, policy version,
  trajectory versions, trajectory tokens, the phase's ``rl.max_staleness``, trajectories per version (the
  histogram's ``rl.trajectory_counts``), the phase's end) (``rl.policy_version`` absent: the step; a phase of
  no step is placed by its end, in the pipeline rollup).

Exact and mergeable, like the rest of a part; made after pass 4, in passes of C speed over the columns
(a process with no weight sync and no versions costs one scan of its buckets).

Example::

    part.pipe = pipe_part(tree, superseded)
"""

from __future__ import annotations

from array import array
from typing import Any

from lens_rl.buckets import is_weight_sync
from lens_rl.offline.read.intervals import merge_indexed, merge_packed
from lens_rl.offline.read.linked import Tree
from lens_rl.offline.read.parts import SlotsState
from lens_rl.offline.read.tree import JOB

__all__ = ["PipePart", "pipe_part"]


class PipePart(SlotsState):
    """One process's busy union, weight syncs and consumed versions (the module docstring)."""

    __slots__ = ("productive", "syncs", "consumed")

    def __init__(self) -> None:
        self.productive = array("q")
        self.syncs: list[tuple[int, int, Any]] = []
        self.consumed: list[tuple[Any, Any, Any, Any, Any, Any, int]] = []

    def merge(self, other: PipePart) -> None:
        """Fold another part of the same process in."""
        self.productive = merge_packed(self.productive, other.productive)
        self.syncs.extend(other.syncs)
        self.consumed.extend(other.consumed)


def pipe_part(tree: Tree, superseded: frozenset[Any] = frozenset()) -> PipePart | None:
    """The process's :class:`PipePart`, or None when it has nothing of it (no productive span, sync or
    consumed versions). Spans of ``superseded`` steps (re-runs) are left out."""
    buckets, steps, role = tree.buckets, tree.steps, tree.role
    rows = [i for i, b in enumerate(buckets) if b == "productive"]
    if superseded:
        rows = [i for i in rows if steps[i] not in superseded]
    names = tree.names
    family = {name for name in set(names) if is_weight_sync(name)}
    syncs = [i for i, name in enumerate(names) if name in family] if family else []
    versions = getattr(tree, "versions", None) or {}
    if not rows and not syncs and not versions:
        return None
    out = PipePart()
    out.productive = merge_indexed(rows, tree.starts, tree.ends)
    starts, ends = tree.starts, tree.ends
    out.syncs = [
        (starts[i], ends[i], steps[i]) for i in syncs if role[i] != JOB and not (superseded and steps[i] in superseded)
    ]
    for i, (policy, consumed, tokens, bound, counts) in sorted(versions.items()):
        if superseded and steps[i] in superseded:
            continue
        step = steps[i]
        out.consumed.append((step, step if policy is None else policy, consumed, tokens, bound, counts, ends[i]))
    return out
