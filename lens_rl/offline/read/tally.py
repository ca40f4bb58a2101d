"""Pass 4 of the reduction a column at a time: each span's exclusive ns and the sums :func:`~lens_rl.offline.read.
reduce.accumulate` keeps (buckets, phases, compute series, lifetime, re-runs), grouped with numpy, with Python
loops left only over the rows few spans are (tokens, untokened generation phases, odd steps, parents with
children). Every sum is of ints, or of floats in the rows' order, so it is what a span-at-a-time pass sums.

Example::

    tally = Tally(part, tree, kids_of, own_kids, superseded)
    tally.phases()         # count, total, exclusive, durations and leaf ns per (phase, bucket)
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from itertools import repeat
from operator import is_not
from typing import Any

import numpy as np

from lens_rl.buckets import exclusive_time, kind_of
from lens_rl.offline.read.linked import Kids, Tree
from lens_rl.offline.read.parts import BUCKETS, COMPUTE_BUCKETS, PhasePart, ProcessPart
from lens_rl.offline.read.tree import JOB, UMBRELLA, id_key
from lens_rl.offline.read.tree import THIRD_PARTY as THIRD_ROLE
from lens_rl.store import INT64_END

__all__ = ["Tally"]

_CODE: dict[str | None, int] = {None: -1, **{b: i for i, b in enumerate(BUCKETS)}}
_COMPUTE = [_CODE[b] for b in COMPUTE_BUCKETS]
#: a column of ns whose sum could pass int64 (a hostile file's times) is summed as Python ints
_SAFE_SUM = 2**62
#: at most this many third-party spans between a call that leaves the file and its phase (:meth:`Tally._relays`)
_HOPS = 64


class Tally:
    """One process's spans tallied into its part (see the module docstring): the rows that are phases (no
    job root, no third party's span, no re-run) and their exclusive ns, made once."""

    def __init__(
        self,
        part: ProcessPart,
        tree: Tree,
        kids_of: Kids,
        own_kids: Mapping[int, list[tuple[int, int]]],
        superseded: frozenset[Any],
    ) -> None:
        self.part, self.tree = part, tree
        n = tree.n
        starts, ends = _np(tree.starts, np.int64, n), _np(tree.ends, np.int64, n)
        role = _np(tree.role, np.uint8, n)
        self.outer = _np(tree.outer, np.int64, n)
        self.bucket = np.fromiter(map(_CODE.__getitem__, tree.buckets), dtype=np.int8, count=n)
        job, third = role == JOB, role == THIRD_ROLE
        for i in np.flatnonzero(job).tolist():
            part.jobs.append((tree.starts[i], tree.ends[i]))
        lived = ~job & ~third
        if lived.any():  # (a third party's span is no resource of its own: not the process's lifetime)
            part.lifetime = (int(starts[lived].min()), int(ends[lived].max()))
        self.rerun = array("q")
        phase = ~job & ~third
        if superseded:  # a run a later attempt did again: wasted, nothing else
            gone = ~job & np.fromiter((s in superseded for s in tree.steps), dtype=bool, count=n)
            self.rerun.frombytes(np.flatnonzero(gone).astype(np.int64).tobytes())
            part.rerun_steps.update(tree.steps[i] for i in self.rerun)
            phase &= ~gone
        self.rows = np.flatnonzero(phase)
        self.start_ns, self.end_ns = starts, ends
        self.duration = ends - starts
        self.big = bool(self.duration.size) and int(self.duration.max()) * n >= _SAFE_SUM
        self.stepped = np.fromiter(map(is_not, tree.steps, repeat(None)), dtype=bool, count=n)
        self.excl = self._exclusive(kids_of, own_kids, phase)
        self.role = role

    def _exclusive(self, kids_of: Kids, own_kids: Mapping[int, list[tuple[int, int]]], phase: Any) -> Any:
        """Each span's exclusive ns: a bucketed span's what its nearest bucketed descendants leave it, an
        unbucketed one outside every bucketed span what its child phases leave it, any other 0."""
        tree, bucketed = self.tree, self.bucket >= 0
        excl = np.where(bucketed | (self.outer == -1), self.duration, 0)
        starts, ends, outer = tree.starts, tree.ends, tree.outer
        counted = phase & bucketed
        rows, lo, hi = kids_of.single()  # (most: a phase's one child)
        keep = counted[rows]
        rows, lo, hi = rows[keep], lo[keep], hi[keep]
        start, end = self.start_ns[rows], self.end_ns[rows]
        excl[rows] = np.maximum(end - start - np.maximum(np.minimum(hi, end) - np.maximum(lo, start), 0), 0)
        is_counted, is_phase, has_bucket = counted.tolist(), phase.tolist(), bucketed.tolist()
        for i, kids in kids_of.several():
            if is_counted[i]:
                excl[i] = exclusive_time(starts[i], ends[i], kids)
        for i, kids in own_kids.items():
            if is_phase[i] and not has_bucket[i] and outer[i] == -1 and kids:
                excl[i] = exclusive_time(starts[i], ends[i], kids)
        return excl

    def _sum(self, values: Any) -> int:
        """A column's sum as a Python int (exact)."""
        return sum(values.tolist()) if self.big else int(values.sum())

    def buckets(self) -> array:
        """Exclusive ns per bucket into the part; the rows of the top-level bucketed spans."""
        rows, bucket_ns = self.rows, self.part.bucket_ns
        codes = self.bucket[rows]
        for code, name in enumerate(BUCKETS):
            mine = rows[codes == code]
            if mine.size:
                bucket_ns[name] += self._sum(self.excl[mine])
        top = rows[(codes >= 0) & (self.outer[rows] == -1)]
        return array("q", top.astype(np.int64).tobytes())

    def phases(self) -> None:
        """Count, total, exclusive ns, durations (in row order) and unbucketed leaves' ns per (phase, bucket),
        made in the order the phases first appear."""
        tree, part, rows = self.tree, self.part, self.rows
        if not rows.size:
            return
        number = {name: k for k, name in enumerate(dict.fromkeys(tree.names))}
        names = np.fromiter(map(number.__getitem__, tree.names), dtype=np.int64, count=tree.n)
        key = names[rows] * (len(BUCKETS) + 1) + self.bucket[rows] + 1
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        firsts = np.concatenate(([0], bounds))
        lasts = np.concatenate((bounds, [ordered.size]))
        leaf = self.leaves()
        for first, last in sorted(zip(firsts.tolist(), lasts.tolist(), strict=True), key=lambda g: order[g[0]]):
            mine = rows[order[first:last]]
            i = int(mine[0])
            phase = part.phases.get((tree.names[i], tree.buckets[i]))
            if phase is None:
                phase = part.phases[(tree.names[i], tree.buckets[i])] = PhasePart()
            durations = self.duration[mine]
            phase.count += last - first
            phase.total_ns += self._sum(durations)
            phase.excl_ns += self._sum(self.excl[mine])
            phase.durations.frombytes(durations.tobytes())
            leaves = durations[leaf[mine]]
            if leaves.size:
                phase.leaf_ns += self._sum(leaves)

    def leaves(self) -> Any:
        """Which spans are unbucketed leaves inside a step (time no bucket covers): a bool per span."""
        tree = self.tree
        return self.stepped & (self.bucket < 0) & (_np(tree.has_child, np.uint8, tree.n) == 0) & (self.role != UMBRELLA)

    def tokens(self) -> None:
        """Each span's ``rl.num_tokens`` into its phase (and FLOPs) and its step's tokens, in row order; a
        generation phase's span with none, kept by its id for a request in another file to give it some."""
        tree, part = self.tree, self.part
        is_phase = np.zeros(tree.n, dtype=bool)
        is_phase[self.rows] = True
        phase_rows = is_phase.tolist()
        starts, ends, names, buckets, steps = tree.starts, tree.ends, tree.names, tree.buckets, tree.steps
        generation = {name for name in set(names) if kind_of(name) == "generation"}
        flops_of = tree.flops or {}
        for i in sorted(tree.tokens):
            if not phase_rows[i]:
                continue
            count, duration, bucket = tree.tokens[i], ends[i] - starts[i], buckets[i]
            phase = part.phases[(names[i], bucket)]
            phase.tokens += count
            phase.token_ns += duration
            flops = flops_of.get(i)
            if flops is not None:
                phase.flops += count * flops
                phase.flops_tokens += count
            step = steps[i]
            if step is None:
                continue
            if bucket is None and tree.own_steps[i] is not None:
                part.step_tokens[("own", step)] = part.step_tokens.get(("own", step), 0) + count
            elif names[i] in generation:
                part.step_tokens[("gen", step)] = part.step_tokens.get(("gen", step), 0) + count
        if tree.ids is None or not generation:
            return
        waiting = [i for i in self.rows.tolist() if names[i] in generation and i not in tree.tokens]
        for i in waiting:
            part.untokened[id_key(tree.ids[i])] = (names[i], buckets[i], ends[i] - starts[i], steps[i])
        if waiting and (self.role == THIRD_ROLE).any():
            self._relays(set(waiting))

    def _relays(self, waiting: set[int]) -> None:
        """Each third-party span with no child in the file (an HTTP client's call, likely) whose nearest lens_rl
        phase is one of the ``waiting`` rows (generation phases with no token count), kept by its id with that
        phase's: a request in another file whose parent it is gives its tokens to the phase."""
        tree, part = self.tree, self.part
        parents, ids, role = tree.parents, tree.ids, tree.role
        leaves = np.flatnonzero((self.role == THIRD_ROLE) & (_np(tree.has_child, np.uint8, tree.n) == 0))
        for i in leaves.tolist():
            p, hops = parents[i], 0
            while p != -1 and role[p] == THIRD_ROLE and hops < _HOPS:  # (cycles were cut; a bound all the same)
                p, hops = parents[p], hops + 1
            if p in waiting:
                part.relays[id_key(ids[i])] = id_key(ids[p])

    def compute(self) -> dict[str, Any]:
        """Phase -> ``[steps, ns]`` arrays (in row order) of its compute spans with a step (a dict of step ->
        summed ns where a step is no int64), in the order the phases first appear."""
        tree, rows = self.tree, self.rows
        mine = rows[self.stepped[rows] & np.isin(self.bucket[rows], _COMPUTE)]
        by_name: dict[Any, list[int]] = {}
        for i in mine.tolist():
            by_name.setdefault(tree.names[i], []).append(i)
        compute: dict[str, Any] = {}
        steps, excl = tree.steps, self.excl
        for name, found in by_name.items():
            values = [steps[i] for i in found]
            if set(map(type, values)) == {int} and -INT64_END <= min(values) and max(values) < INT64_END:
                compute[name] = [array("q", values), array("q", excl[found].astype(np.int64).tobytes())]
                continue
            ns = excl[found].tolist()
            by_step: Any = [array("q"), array("q")]
            for step, value in zip(values, ns, strict=True):  # (a step that is not an int: a dict from there)
                if type(by_step) is list and type(step) is int and -INT64_END <= step < INT64_END:
                    by_step[0].append(step)
                    by_step[1].append(value)
                else:
                    if type(by_step) is list:
                        by_step = _step_dict(by_step)
                    by_step[step] = by_step.get(step, 0) + value
            compute[name] = by_step
        return compute


def _step_dict(pairs_: list[array]) -> dict[Any, int]:
    """``[steps, ns]`` arrays as the step -> summed ns dict, in the order they came."""
    out: dict[Any, int] = {}
    for step, value in zip(pairs_[0], pairs_[1], strict=True):
        out[step] = out.get(step, 0) + value
    return out


def _np(values: Any, dtype: Any, n: int) -> Any:
    """A column as a numpy view (no copy)."""
    return np.frombuffer(values, dtype=dtype) if n else np.zeros(0, dtype=dtype)
