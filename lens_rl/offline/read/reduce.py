"""One process's columns reduced to its :class:`~lens_rl.offline.read.parts.ProcessPart`: the hot path of the
offline tools over millions of spans, in four passes and no object per span.

1-3. :mod:`lens_rl.offline.read.linked` links the columns into a tree: each span's parent, the one tree
   rule (step, nearest bucketed ancestor, place), each bucketed span's nearest bucketed descendants.
4. :func:`accumulate`: every span's exclusive ns into the part's buckets, phases, compute series, steps.

Example::

    parts, stats = file_parts("lens_traces/run42/spans-lm_policy-0-123.jsonl")
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Mapping
from typing import Any

import numpy as np

from lens_rl.offline.read.columns import ENDED_BY_SHUTDOWN, Columns, read_columns
from lens_rl.offline.read.critical import CritPart, walk_file
from lens_rl.offline.read.gpu_spans import gpu_spans
from lens_rl.offline.read.intervals import int64_array, merge_indexed, pack, saturated, sorted_by
from lens_rl.offline.read.linked import Kids, Tree, inner, link, resolve
from lens_rl.offline.read.overlap import claim_overlaps
from lens_rl.offline.read.parts import BUCKETS, ProcessPart
from lens_rl.offline.read.phase_steps import phase_steps
from lens_rl.offline.read.pipe import pipe_part
from lens_rl.offline.read.requests import requests_part
from lens_rl.offline.read.steps import Series, StepPart
from lens_rl.offline.read.tally import Tally
from lens_rl.offline.read.tree import UMBRELLA
from lens_rl.store import Process, ReadStats, heads, iter_rows, read_head
from lens_rl.store.gpu import gpu_uuids

# (link and resolve, passes 1 and 2, stay importable from here)
__all__ = ["file_parts", "file_steps", "link", "part_from_columns", "reduce_columns", "resolve"]

_BUCKET_INDEX = {b: i for i, b in enumerate(BUCKETS)}
#: a phase's compute spans from which their per-step sums are made with numpy; a bound on those sums' size
_BULK, _SAFE_SUM = 256, 2**62


def part_from_columns(
    key: Process,
    cols: Columns,
    *,
    step_rows: bool = True,
    superseded: frozenset[Any] = frozenset(),
    critical: bool = True,
) -> ProcessPart:
    """One process's columns reduced to its part (it consumes ``cols``).

    ``step_rows`` False (a worker of a run with a driver, whose view makes the step rows): no step rows are
    kept (memory: O(steps) for the driver, not for every process). ``superseded``: the steps of this
    process's attempt that a later attempt ran again; their spans are kept apart as re-runs (wasted).
    ``critical``: walk the critical path's roots too (:mod:`lens_rl.offline.read.critical`)."""
    part = ProcessPart(key, since=cols.since, job_error=cols.job_error)
    for resource in cols.resources:
        part.device = part.device or _device(resource)
        run = resource.get("rl.run_id")
        if run is not None:
            part.runs.add(str(run))
        rate = resource.get("rl.sample_rate")
        if isinstance(rate, (int, float)) and rate < 1:
            part.sampled = True
            if rate > 0:  # (at 0 no phase is kept: nothing to scale)
                part.sample_rate = min(part.sample_rate, float(rate))
    part.spans = len(cols.names)
    part.requests = requests_part(cols.requests, cols.starts, cols.ends)
    if part.spans:
        tree = link(cols)
        resolve(tree)
        part.cycles = tree.cycles
        part.remote_tokens = tree.remote_tokens
        accumulate(part, tree, *inner(tree), step_rows, superseded)
        part.pipe = pipe_part(tree, superseded)
        uuids = next((u for u in map(gpu_uuids, cols.resources) if u), ())
        if uuids:  # (a GPU process: its spans kept for the join with its devices' samples)
            part.gpu = gpu_spans(uuids, tree, superseded)
        if critical:
            part.crit = _walks(key, tree, superseded)
        tree.ids = None
    return part


def _device(resource: Mapping[str, Any]) -> dict[str, Any]:
    """What throughput and MFU need of a process's resource: host, GPUs (count and ids), device, model size."""
    out: dict[str, Any] = {}
    for key in (
        "host.name",
        "rl.num_gpus",
        "rl.gpu_ids",
        "rl.device.name",
        "rl.device.peak_tflops",
        "rl.model.num_params",
        "rl.pool",
        "rl.max_staleness",
    ):
        value = resource.get(key)
        if value is not None and not isinstance(value, (dict, list)):
            out[key] = value
    return out


def _walks(key: Process, tree: Tree, superseded: frozenset[Any]) -> CritPart:
    """The process's critical-path walks: from the driver's final-run step umbrellas and from every entry."""
    own_steps, role, steps = tree.own_steps, tree.role, tree.steps
    umbrellas = (
        [i for i in range(tree.n) if role[i] == UMBRELLA and not (superseded and own_steps[i] in superseded)]
        if key.driver
        else []
    )
    skip = (lambda row: steps[row] in superseded) if superseded else None
    return walk_file(tree, tree.ids, tree.remote, umbrellas, skip)


def accumulate(
    part: ProcessPart,
    tree: Tree,
    kids_of: Kids,
    own_kids: dict[int, list[tuple[int, int]]],
    step_rows: bool,
    superseded: frozenset[Any] = frozenset(),
) -> None:
    """Pass 4 (see the module docstring), a column at a time (:class:`~lens_rl.offline.read.tally.Tally`),
    the step rows a span at a time. A span of a ``superseded`` step is only a re-run interval; a third
    party's span is no phase (its time is its nearest bucketed ancestor's, counted there once)."""
    tally = Tally(part, tree, kids_of, own_kids, superseded)
    top_level = tally.buckets()
    tally.phases()
    tally.tokens()
    compute = tally.compute()
    part.phase_steps = phase_steps(
        tree, tally.rows, tally.stepped, tally.bucket, tally.duration, tally.excl, tally.leaves()
    )
    in_umbrella: dict[int, list[int]] = {}  # umbrella -> its outermost bucketed spans (where its gaps are)
    if step_rows:
        _step_rows(part, tree, tally, in_umbrella)
    _finish(part, tree, compute, top_level)
    if part.key.driver:  # the driver's view is wall-clock: concurrent spans of it counted once
        claim_overlaps(part, tree, kids_of, superseded)
    if in_umbrella:
        _gaps(part, tree, in_umbrella)
    if tally.rerun:
        part.rerun = merge_indexed(tally.rerun, tree.starts, tree.ends)


def _step_rows(part: ProcessPart, tree: Tree, tally: Tally, in_umbrella: dict[int, list[int]]) -> None:
    """The step rows of the phases with a step, a span at a time: each step's interval, bucket ns, umbrellas
    and bucketed spans, whether it ended."""
    starts, ends, buckets, steps = tree.starts, tree.ends, tree.buckets, tree.steps
    outer, top, role, orphan = tree.outer, tree.top, tree.role, tree.orphan
    part_steps, excl, rows = part.steps, tally.excl, tally.rows
    for i in rows[tally.stepped[rows]].tolist():
        step, start, end = steps[i], starts[i], ends[i]
        sp = part_steps.get(step)
        if sp is None:
            sp = part_steps[step] = StepPart(lo=start, hi=end)
        else:
            if start < sp.lo:  # type: ignore[operator]
                sp.lo = start
            if end > sp.hi:  # type: ignore[operator]
                sp.hi = end
        if orphan[i]:  # its parent never ended (a killed process): the step it belongs to never did either
            sp.incomplete = True
        bucket = buckets[i]
        if bucket is None:
            if role[i] == UMBRELLA:
                _umbrella(part, tree, sp, i, in_umbrella)
            continue
        sp.ns[_BUCKET_INDEX[bucket]] += int(excl[i])
        t = top[i]
        if t != -1 and role[t] == UMBRELLA and (outer[i] == -1 or top[outer[i]] != t):
            in_umbrella.setdefault(t, []).append(i)
        if outer[i] == -1 or steps[outer[i]] != step:  # nested ones lie inside it: union unchanged
            if sp.bucketed is None:
                sp.bucketed = []
            sp.bucketed.append(i)


def _umbrella(part: ProcessPart, tree: Tree, sp: StepPart, i: int, in_umbrella: dict[int, list[int]]) -> None:
    """A step umbrella (row ``i``) into its step's row: its interval, where its gaps are looked for, the
    bucketed phase it runs inside (whose bucket does not apply to it), whether a shutdown cut it short or an
    exception ended it (the step failed)."""
    if sp.umbrellas is None:
        sp.umbrellas = []
    sp.umbrellas.append(i)
    in_umbrella.setdefault(i, [])
    o = tree.outer[i]
    if o != -1:  # a step inside a bucketed phase: that bucket does not apply to it
        key = (tree.names[o], tree.buckets[o])
        part.enclosing[key] = part.enclosing.get(key, 0) + 1
    if tree.flags[i] & ENDED_BY_SHUTDOWN:  # the step was cut short by a shutdown
        sp.incomplete = True
    error = tree.errors.get(i)
    if error is not None:  # the step failed: an exception left its umbrella
        sp.error = error


def _gaps(part: ProcessPart, tree: Tree, in_umbrella: dict[int, list[int]]) -> None:
    """Where each step umbrella's time no bucketed span of its own covers falls: between which phases (by
    the phase that ended last before the gap and the one that starts after it), summed into ``part.gaps``."""
    starts, ends, names, gaps = tree.starts, tree.ends, tree.names, part.gaps
    for u, rows in in_umbrella.items():
        low, high = starts[u], ends[u]
        at, before = low, "step start"
        for r in sorted(rows, key=starts.__getitem__):
            start, end = max(starts[r], low), min(ends[r], high)
            if start > at:
                key = (before, str(names[r]))
                gaps[key] = gaps.get(key, 0) + start - at
            if end >= at:
                at, before = end, str(names[r])
        if high > at:
            key = (before, "step end")
            gaps[key] = gaps.get(key, 0) + high - at


def _finish(part: ProcessPart, tree: Tree, compute: dict[str, Any], top_level: array) -> None:
    """After pass 4: rows packed into intervals (a run has steps x processes of these), compute time summed
    per step, durations bounded."""
    starts, ends = tree.starts, tree.ends
    for sp in part.steps.values():
        if sp.bucketed is not None:
            sp.bucketed = merge_indexed(sp.bucketed, starts, ends)
        if sp.umbrellas is not None:
            sp.umbrellas = pack((starts[i], ends[i]) for i in sp.umbrellas)
    part.compute = {
        name: _summed(by_step) if type(by_step) is list else Series.of(by_step) for name, by_step in compute.items()
    }
    for phase in part.phases.values():
        phase.bound()
    part.bucketed = merge_indexed(top_level, starts, ends)


def _summed(pairs_: list[array]) -> Series:
    """``[steps, ns]`` arrays (int steps, in span order) as a :class:`Series`, each step's ns summed (with
    numpy where they are many and their sums cannot pass int64; saturated where a hostile file's do)."""
    steps, values = pairs_
    if len(steps) >= _BULK and max(max(values), -min(values)) < _SAFE_SUM // len(values):
        ordered = np.argsort(np.frombuffer(steps, dtype=np.int64), kind="stable")
        by_step = np.frombuffer(steps, dtype=np.int64)[ordered]
        firsts = np.concatenate(([0], np.flatnonzero(np.diff(by_step)) + 1))
        sums = np.add.reduceat(np.frombuffer(values, dtype=np.int64)[ordered], firsts)
        return Series(int64_array(by_step[firsts]), int64_array(sums))
    keys, summed = array("q"), list[int]()
    for i in sorted_by(range(len(steps)), steps.__getitem__):
        step = steps[i]
        if keys and keys[-1] == step:
            summed[-1] += values[i]
        else:
            keys.append(step)
            summed.append(values[i])
    return Series(keys, array("q", map(saturated, summed)))


def file_parts(
    path: str | os.PathLike[str],
    driver_in_run: bool = False,
    superseded: Mapping[int, frozenset[Any]] | None = None,
    critical: bool = True,
) -> tuple[list[ProcessPart], ReadStats]:
    """One span file reduced to its process part(s) (a re-init under another identity is another) and what
    its read found. ``driver_in_run``: the run has a driver, whose view makes the step rows; ``superseded``:
    attempt -> the steps a later attempt ran again (see :func:`lens_rl.offline.rollup.attempts.superseded_steps`);
    through the refresh cache: :func:`lens_rl.offline.run.cache.read_parts`."""
    stats = ReadStats()
    return reduce_columns(read_columns(path, stats), driver_in_run, superseded, critical), stats


def reduce_columns(
    columns: Mapping[Process, Columns],
    driver_in_run: bool = False,
    superseded: Mapping[int, frozenset[Any]] | None = None,
    critical: bool = True,
) -> list[ProcessPart]:
    """Each process's columns reduced to its part (see :func:`file_parts` for the options)."""
    later = superseded or {}
    return [
        part_from_columns(
            k,
            c,
            step_rows=not driver_in_run or k.driver,
            superseded=later.get(k.attempt, frozenset()),
            critical=critical,
        )
        for k, c in columns.items()
    ]


def file_steps(path: str | os.PathLike[str], driven: frozenset[int] = frozenset()) -> dict[int, set[Any]]:
    """attempt -> the steps (spans' own ``rl.step``) one file's processes ran, as the job's view sees them:
    of an attempt in ``driven`` (it has a driver file), its driver's only; of any other, every process's.
    What tells re-run steps apart, before the files are reduced. A worker file of a driven attempt is
    not read past its header."""
    head, _ = read_head(path)
    if head is None or (not head.process.driver and head.process.attempt in driven and len(heads(path)) == 1):
        return {}
    out: dict[int, set[Any]] = {}
    last: Any = None
    steps: set[Any] | None = None
    for head, row in iter_rows(path):
        if head is not last:
            last = head
            process = head.process
            viewed = process.driver or process.attempt not in driven
            steps = out.setdefault(process.attempt, set()) if viewed else None
        if steps is not None and row.a:
            step = row.a.get("rl.step")
            if type(step) is int or type(step) is str:
                steps.add(step)
    return {attempt: found for attempt, found in out.items() if found}
