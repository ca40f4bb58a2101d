"""Each process's spans reduced to a compact, mergeable part: what every offline tool builds on.

A :class:`ProcessPart` holds one process's exclusive bucket seconds, lifetime, steps
(for the job view's step rows), phase numbers (count, durations for the p95, tokens)
and compute seconds per phase and step (what stragglers are judged on). Parts merge
exactly, so files can be reduced one at a time, in parallel or on a Ray cluster.
:func:`part_from_columns` is the hot loop over millions of spans: flat columns, each
span's step and nearest bucketed ancestor found once, no object per span.

Example::

    parts, stats = file_parts("lens_traces/run42/spans-lm_policy-0-123.jsonl")
"""

from __future__ import annotations

import heapq
import math
import os
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lens_rl.buckets import Bucket, exclusive_time, union_length
from lens_rl.store import ENDED_BY_SHUTDOWN, INT64_END, REMOTE_PARENT, Columns, ReadStats, read_columns

__all__ = ["BUCKETS", "COMPUTE_BUCKETS", "PhasePart", "Series", "ProcessPart", "StepPart", "clipped", "covered", "file_parts",
           "median", "merge_indexed", "merge_intervals", "merge_parts", "pack", "pairs", "part_from_columns",
           "part_from_rows", "process_part", "share_steps", "step_key"]  # fmt: skip

BUCKETS: tuple[str, ...] = tuple(b.value for b in Bucket)
#: Buckets whose phases are compared across ranks for stragglers (idle is waiting, not compute).
COMPUTE_BUCKETS = ("productive", "overhead", "wasted")


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for interval in sorted(intervals):
        if out and interval[0] <= out[-1][1]:
            if interval[1] > out[-1][1]:
                out[-1] = (out[-1][0], interval[1])
        else:  # kept as it is (no copy: a run's intervals are millions)
            out.append(interval if type(interval) is tuple else (interval[0], interval[1]))
    return out


def pack(intervals: Iterable[tuple[int, int]]) -> array:
    """Intervals as one flat int64 array (start, end, start, end ...): 16 bytes an interval, not ~120."""
    out = array("q")
    for start, end in intervals:
        out.append(start)
        out.append(end)
    return out


def pairs(packed: Iterable[int]) -> Iterator[tuple[int, int]]:
    """The (start, end) intervals of a :func:`pack`-ed array."""
    it = iter(packed)
    return zip(it, it, strict=False)


def clipped(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """``intervals`` cut to ``[lo, hi]`` (those outside left out), lazily, in their order."""
    return ((max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo))


def covered(packed: Iterable[array], windows: Iterable[tuple[int, int]]) -> float:
    """The length the union of ``packed`` interval arrays (each merged, so sorted) covers inside ``windows``
    (merged too), streamed: no list of a run's intervals is ever built."""
    packed = list(packed)
    streams = [clipped(pairs(p), lo, hi) for lo, hi in windows for p in packed]
    return union_length(streams[0] if len(streams) == 1 else heapq.merge(*streams), ordered=True)  # (a step: one)


def _by(indexes: Sequence[int], key: Any) -> Sequence[int]:
    """``indexes`` (read twice at most) stably sorted by ``key``: as they are when already in order (the common case: spans
    written as they end, one after another), so no list of a run's indexes is made."""
    last = None
    for i in indexes:
        value = key(i)
        if last is not None and value < last:
            return sorted(indexes, key=key)
        last = value
    return indexes


def merge_indexed(indexes: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> array:
    """The merged union of the intervals ``(starts[i], ends[i])`` for ``i`` in ``indexes``, packed
    (as ``pack(merge_intervals(...))`` gives it, without a tuple per interval)."""
    out = array("q")
    for i in _by(indexes, starts.__getitem__):
        start, end = starts[i], ends[i]
        if out and start <= out[-1]:
            if end > out[-1]:
                out[-1] = end
        else:
            out.append(start)
            out.append(end)
    return out


def share_steps(part: ProcessPart, seen: dict[bytes, array]) -> None:
    """Make ``part``'s :class:`Series` use one ``steps`` array per distinct set of steps seen (``seen``):
    ranks of a run mostly share their steps, so a 1,000-rank, 100 k-step run keeps one copy, not 1,000."""
    for series in part.compute.values():
        if isinstance(series, Series):
            series.steps = seen.setdefault(series.steps.tobytes(), series.steps)


def step_key(step: Any) -> tuple[str, Any]:
    return (type(step).__name__, step)


class Series(Mapping[Any, float]):
    """step -> seconds for integer steps, as two arrays (16 bytes a step instead of ~100 in a dict).

    A read-only mapping; ``steps`` are sorted, so two ranks with the same steps have equal
    ``steps`` arrays and can be compared index by index (``seconds`` is the matching array).
    """

    __slots__ = ("steps", "seconds", "_index")

    def __init__(self, steps: array, seconds: array) -> None:
        self.steps = steps
        self.seconds = seconds
        self._index: dict[Any, int] | None = None

    @staticmethod
    def of(by_step: Mapping[Any, float]) -> Mapping[Any, float]:
        """A Series when every step is an int (a dict otherwise, unchanged)."""
        if isinstance(by_step, Series) or not all(type(k) is int for k in by_step):
            return by_step
        keys = sorted(by_step)
        return Series(array("q", keys), array("d", (by_step[k] for k in keys)))

    def _lookup(self) -> dict[Any, int]:
        if self._index is None:
            self._index = {step: i for i, step in enumerate(self.steps)}
        return self._index

    def __getitem__(self, step: Any) -> float:
        return self.seconds[self._lookup()[step]]

    def __contains__(self, step: object) -> bool:
        return step in self._lookup()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def items(self) -> Any:
        return zip(self.steps, self.seconds, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Series):
            return self.steps == other.steps and self.seconds == other.seconds
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:  # pragma: no cover - mutable-looking; never hashed
        raise TypeError("Series is unhashable")

    def __getstate__(self) -> tuple[Any, ...]:
        return self.steps, self.seconds

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.steps, self.seconds = state
        self._index = None


class StepPart:
    """One process's share of one step, compact (a run has processes x steps of these).

    ``seconds`` is a list in :data:`BUCKETS` order; interval lists stay None until used.
    """

    __slots__ = ("seconds", "umbrellas", "lo", "hi", "bucketed", "incomplete")

    def __init__(self, lo: int | None = None, hi: int | None = None) -> None:
        self.seconds = [0.0, 0.0, 0.0, 0.0]
        self.umbrellas: Any = None  # umbrella spans' intervals: a list while built, then packed (see pack)
        self.lo = lo
        self.hi = hi
        self.bucketed: Any = None  # bucketed spans' merged intervals: a list while built, then packed
        #: its umbrella never ended (a span of it lost its parent) or was cut short by a shutdown
        self.incomplete = False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepPart) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for k, v in zip(self.__slots__, state, strict=True):
            setattr(self, k, v)

    def merge(self, other: StepPart) -> None:
        for i in range(4):
            self.seconds[i] += other.seconds[i]
        if other.umbrellas:
            self.umbrellas = (self.umbrellas or array("q")) + other.umbrellas
        self.lo = other.lo if self.lo is None else (self.lo if other.lo is None else min(self.lo, other.lo))
        self.hi = other.hi if self.hi is None else (self.hi if other.hi is None else max(self.hi, other.hi))
        if other.bucketed:
            self.bucketed = pack(merge_intervals(pairs((self.bucketed or array("q")) + other.bucketed)))
        self.incomplete = self.incomplete or other.incomplete


#: Durations a phase keeps exactly (per process, and merged per group); past it, a log-scale sketch.
EXACT_DURATIONS = 65_536
#: The sketch's bucket ratio: a quantile read from it is within 0.5 % of the exact one.
_GAMMA = 1.01
_LOG_GAMMA = math.log(_GAMMA)


@dataclass
class PhasePart:
    """One (phase, bucket)'s numbers in one process (or merged, in a worker group): count, totals, tokens,
    and its durations for the p95: exactly while at most :data:`EXACT_DURATIONS`, else as a sketch
    (log-scale buckets, 0.5 % relative accuracy) so memory stays bounded however long the run.

    ``leaf_s``: seconds of its spans that were unbucketed leaves inside a step (time no bucket covers)."""

    count: int = 0
    total_s: float = 0.0
    durations: array = field(default_factory=lambda: array("d"))
    tokens: float = 0.0
    token_s: float = 0.0
    leaf_s: float = 0.0
    sketch: dict[int, int] | None = None

    def bound(self) -> None:
        """Past :data:`EXACT_DURATIONS`, fold the durations into the sketch."""
        if len(self.durations) > EXACT_DURATIONS or (self.sketch is not None and self.durations):
            sketch = self.sketch if self.sketch is not None else {}
            for value in self.durations:
                k = math.ceil(math.log(value) / _LOG_GAMMA) if value > 0 else _ZERO
                sketch[k] = sketch.get(k, 0) + 1
            self.sketch, self.durations = sketch, array("d")

    def quantile(self, q: float) -> float | None:
        """Nearest-rank quantile of the durations (exact, or within 0.5 % from the sketch)."""
        if self.sketch is None:
            if not self.durations:
                return None
            ordered = sorted(self.durations)
            return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]
        total = sum(self.sketch.values())
        rank = max(math.ceil(q * total), 1)
        seen = 0
        for k in sorted(self.sketch):
            seen += self.sketch[k]
            if seen >= rank:
                return 0.0 if k == _ZERO else 2 * _GAMMA**k / (_GAMMA + 1)
        return None  # pragma: no cover - rank <= total

    def merge(self, other: PhasePart) -> None:
        self.count += other.count
        self.total_s += other.total_s
        self.durations.extend(other.durations)
        self.tokens += other.tokens
        self.token_s += other.token_s
        self.leaf_s += other.leaf_s
        if other.sketch is not None:
            self.sketch = dict(self.sketch or {})
            for k, c in other.sketch.items():
                self.sketch[k] = self.sketch.get(k, 0) + c
        self.bound()


_ZERO = -(2**31)  # the sketch's bucket for durations of 0


@dataclass
class ProcessPart:
    """Everything the report needs of one process, compact and mergeable (picklable for --jobs / --ray)."""

    key: tuple[str, int, int]
    spans: int = 0
    runs: set[str] = field(default_factory=set)
    sampled: bool = False
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    lifetime: tuple[int, int] | None = None
    covered_s: float = 0.0
    jobs: list[tuple[int, int]] = field(default_factory=list)
    bucketed: array = field(default_factory=lambda: array("q"))  # merged top-level bucketed intervals, packed
    steps: dict[Any, StepPart] = field(default_factory=dict)
    phases: dict[tuple[str, str | None], PhasePart] = field(default_factory=dict)
    #: phase -> step -> exclusive seconds of compute phases (what stragglers are judged on);
    #: a :class:`Series` (two arrays) when the steps are integers, else a dict
    compute: dict[str, Mapping[Any, float]] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        # the steps as columns: a driver's 100 k StepParts pickle as a few arrays (a pickler
        # keeps a memo entry per object it writes: per step object, that memo was the worker's peak)
        state = dict(self.__dict__)
        state["steps"] = _step_columns(self.steps)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        state["steps"] = _steps_from_columns(state["steps"])
        self.__dict__.update(state)

    def compute_items(self) -> Iterator[tuple[str, Any, float]]:
        """(phase, step, exclusive seconds) of the compute phases stragglers are judged on."""
        for phase, by_step in self.compute.items():
            for step, value in by_step.items():
                yield phase, step, value

    @property
    def is_driver(self) -> bool:
        return self.key[0] == "driver"

    def merge(self, other: ProcessPart) -> None:
        """Fold another part of the same process in (e.g. a v1 file split across reads)."""
        self.spans += other.spans
        self.runs |= other.runs
        self.sampled = self.sampled or other.sampled
        for b in BUCKETS:
            self.seconds[b] += other.seconds[b]
        if other.lifetime is not None:
            self.lifetime = other.lifetime if self.lifetime is None else (
                min(self.lifetime[0], other.lifetime[0]), max(self.lifetime[1], other.lifetime[1]))  # fmt: skip
        self.covered_s += other.covered_s
        self.jobs.extend(other.jobs)
        self.bucketed = pack(merge_intervals(pairs(self.bucketed + other.bucketed)))
        for step, part in other.steps.items():
            self.steps.setdefault(step, StepPart()).merge(part)
        for key, phase in other.phases.items():
            self.phases.setdefault(key, PhasePart()).merge(phase)
        for name, by_step in other.compute.items():
            mine = dict(self.compute.get(name, {}))
            for step, value in by_step.items():
                mine[step] = mine.get(step, 0.0) + value
            self.compute[name] = Series.of(mine)


def _intervals_column(values: Iterable[array | None]) -> tuple[array, array]:
    """Optional packed interval arrays as (lengths, -1 for None; their items, concatenated)."""
    lengths, items = array("q"), array("q")
    for value in values:
        if value is None:
            lengths.append(-1)
        else:
            lengths.append(len(value))
            items.extend(value)
    return lengths, items


def _intervals_from_column(lengths: array, items: array) -> Iterator[array | None]:
    at = 0
    for length in lengths:
        if length < 0:
            yield None
        else:
            yield items[at:at + length]
            at += length


def _step_columns(steps: Mapping[Any, StepPart]) -> tuple[Any, ...]:
    """``steps`` as a few flat columns (see :meth:`ProcessPart.__getstate__`); exact."""
    parts = steps.values()
    seconds = array("d")
    for sp in parts:
        seconds.extend(sp.seconds)
    none = bytes(4 * sp.incomplete + 2 * (sp.lo is None) + (sp.hi is None) for sp in parts)  # (flags per step)
    lows = array("q", (sp.lo or 0 for sp in parts))
    highs = array("q", (sp.hi or 0 for sp in parts))
    umbrellas = _intervals_column(sp.umbrellas for sp in parts)
    bucketed = _intervals_column(sp.bucketed for sp in parts)
    return list(steps), seconds, none, lows, highs, umbrellas, bucketed


def _steps_from_columns(columns: tuple[Any, ...]) -> dict[Any, StepPart]:
    keys, seconds, none, lows, highs, umbrellas, bucketed = columns
    out = {}
    for n, (key, umbrella, spans) in enumerate(zip(keys, _intervals_from_column(*umbrellas),
                                                    _intervals_from_column(*bucketed), strict=True)):  # fmt: skip
        sp = StepPart(None if none[n] & 2 else lows[n], None if none[n] & 1 else highs[n])
        sp.incomplete = bool(none[n] & 4)
        sp.seconds = list(seconds[4 * n:4 * n + 4])
        sp.umbrellas, sp.bucketed = umbrella, spans
        out[key] = sp
    return out


def _resource_flags(part: ProcessPart, resource: Mapping[str, Any]) -> None:
    run = resource.get("rl.run_id")
    if run is not None:
        part.runs.add(str(run))
    rate = resource.get("rl.sample_rate")
    if isinstance(rate, (int, float)) and rate < 1:
        part.sampled = True


def process_part(key: tuple[str, int, int], records: Iterable[Mapping[str, Any]]) -> ProcessPart:
    """Reduce one process's span records (the reader's record shape) to its :class:`ProcessPart`."""
    rows = []
    resources: dict[int, Mapping[str, Any]] = {}
    for rec in records:
        resource = rec.get("resource") or {}
        resources[id(resource)] = resource
        rows.append((rec.get("name"), rec.get("span_id"), rec.get("parent_span_id"), rec.get("start_ns"),
                     rec.get("end_ns"), rec.get("attributes")))  # fmt: skip
    return part_from_rows(key, rows, resources.values())


def part_from_rows(key: tuple[str, int, int], rows: Sequence[tuple[Any, ...]],
                   resources: Iterable[Mapping[str, Any]] = ()) -> ProcessPart:  # fmt: skip
    """Rows ``(name, span id, parent id, start ns, end ns, attributes)`` of one process to its part."""
    cols = Columns()
    for row in rows:
        cols.add(*row)
    return part_from_columns(key, cols, resources)


class _Tree:
    """One process's spans linked: what the reduction's passes share (rows are indexes into the columns)."""

    __slots__ = ("n", "names", "starts", "ends", "parents", "buckets", "own_steps", "tokens", "has_child", "orphan",
                 "flags", "steps", "outer")  # fmt: skip
    n: int
    names: list[Any]
    starts: array
    ends: array
    parents: array
    buckets: list[Any]
    own_steps: list[Any]
    tokens: dict[int, float]
    has_child: bytearray
    orphan: bytearray
    flags: bytearray
    steps: list[Any]
    outer: array


def _link(cols: Columns) -> _Tree:
    """Pass 1: each span's parent row (-1: none in the file), whether it has a child here, whether its parent
    is an orphan's (a local parent that was never written: it was still open when the file ended), its bucket
    (an unknown one counts as none) and its tokens. Consumes the columns' ids (memory on large files)."""
    tree = _Tree()
    n = tree.n = len(cols.names)
    tree.names, tree.starts, tree.flags = cols.names, cols.starts, cols.flags
    tree.ends = array("q", (e if e > s else s for s, e in zip(cols.starts, cols.ends, strict=False)))
    referenced = set(cols.parent_ids)  # (only the spans something points to: a fraction of them)
    index = {span_id: i for i, span_id in enumerate(cols.ids) if span_id in referenced}
    cols.ids = []
    del referenced
    index_get = index.get
    parents = tree.parents = array("q", (index_get(p, -1) for p in cols.parent_ids))
    has_child = tree.has_child = bytearray(n)
    orphan = tree.orphan = bytearray(n)
    none, root, flags = 0 if type(cols.parent_ids) is array else None, cols.root, cols.flags
    for i, p in enumerate(parents):
        if p == i:
            parents[i] = -1
        elif p != -1:
            has_child[p] = 1
        else:
            parent_id = cols.parent_ids[i]
            if parent_id != none and parent_id != root and not flags[i] & REMOTE_PARENT:
                orphan[i] = 1
    cols.parent_ids = []
    del index, index_get
    buckets: list[Any] = cols.buckets  # in place: an unknown bucket counts as none
    for i, b in enumerate(buckets):
        if b is not None and b not in _BUCKET_SET:
            buckets[i] = None
    tree.buckets, tree.own_steps = buckets, cols.steps
    tree.tokens = {i: float(tok) for i, tok in enumerate(cols.tokens)
                   if tok is not None and isinstance(tok, (int, float)) and not isinstance(tok, bool)}  # fmt: skip
    return tree


def _resolve(tree: _Tree) -> None:
    """Pass 2: each span's step (its own, else its nearest ancestor's) and nearest bucketed proper ancestor
    (memoised walks up: each span resolved once, top-down)."""
    n, parents, buckets, own_steps = tree.n, tree.parents, tree.buckets, tree.own_steps
    steps: list[Any] = [None] * n
    outer = array("q", [-1]) * n
    done = bytearray(n)
    for i in range(n):
        if done[i]:
            continue
        p = parents[i]
        if p == -1:  # the common cases first: a root, or a parent already resolved
            steps[i] = own_steps[i]
            done[i] = True
            continue
        if done[p]:
            step = own_steps[i]
            steps[i] = step if step is not None else steps[p]
            outer[i] = p if buckets[p] is not None else outer[p]
            done[i] = True
            continue
        trail = []
        on_trail = set()
        j = i
        while j != -1 and not done[j] and j not in on_trail:  # a malformed cycle ends the walk
            trail.append(j)
            on_trail.add(j)
            j = parents[j]
        for k in reversed(trail):  # top-down: each parent is resolved before its child
            p = parents[k]
            if p == -1 or not done[p]:
                steps[k] = own_steps[k]
            else:
                step = own_steps[k]
                steps[k] = step if step is not None else steps[p]
                outer[k] = p if buckets[p] is not None else outer[p]
            done[k] = True
    tree.steps, tree.outer = steps, outer


def _inner(tree: _Tree) -> dict[int, list[tuple[int, int]]]:
    """Pass 3: each bucketed span's nearest bucketed descendants' intervals (its time is taken from it)."""
    inner: dict[int, list[tuple[int, int]]] = {}
    buckets, outer, starts, ends = tree.buckets, tree.outer, tree.starts, tree.ends
    for i in range(tree.n):
        if buckets[i] is not None and outer[i] != -1:
            inner.setdefault(outer[i], []).append((starts[i], ends[i]))
    return inner


def part_from_columns(key: tuple[str, int, int], cols: Columns, resources: Iterable[Mapping[str, Any]] = (),
                      *, step_rows: bool = True) -> ProcessPart:  # fmt: skip
    """One process's columns reduced to its part, in four passes (link, resolve, inner, reduce): the hot path
    of the offline tools over millions of spans, no object per span. It consumes ``cols``.

    ``step_rows`` False (a worker of a run with a driver, whose view makes the step rows): no step rows
    and no job-view intervals are kept (memory: O(steps) per driver, not per process)."""
    part = ProcessPart(key)
    for resource in (*resources, *cols.resources.values()):
        _resource_flags(part, resource)
    part.spans = len(cols.names)
    if not part.spans:
        return part
    tree = _link(cols)
    _resolve(tree)
    _reduce(part, tree, _inner(tree), step_rows)
    return part


def _reduce(part: ProcessPart, tree: _Tree, inner: dict[int, list[tuple[int, int]]], step_rows: bool) -> None:
    """Pass 4: every span's exclusive seconds into the part's buckets, phases, compute series and steps."""
    names, starts, ends, buckets, steps, outer = tree.names, tree.starts, tree.ends, tree.buckets, tree.steps, tree.outer
    own_steps, parents, has_child, orphan, flags, tokens = (tree.own_steps, tree.parents, tree.has_child, tree.orphan,
                                                            tree.flags, tree.tokens)  # fmt: skip
    seconds = part.seconds
    part_steps = part.steps
    compute: dict[str, Any] = {}  # phase -> [steps, seconds] arrays (or a dict), made a Series at the end
    phases = part.phases
    top_level = array("q")  # rows of top-level bucketed spans (indexes: no tuple per interval)
    lo = hi = None
    for i in range(tree.n):
        name = names[i]
        start, end = starts[i], ends[i]
        if name == "rl.job":
            part.jobs.append((start, end))
            continue
        lo = start if lo is None or start < lo else lo
        hi = end if hi is None or end > hi else hi
        duration_s = (end - start) / 1e9
        bucket = buckets[i]
        excl_s = 0.0
        if bucket is not None:
            kids = inner.get(i)
            if not kids:
                excl_s = duration_s
            elif len(kids) == 1:
                a, b = kids[0]
                excl_s = max(duration_s - max(min(b, end) - max(a, start), 0) / 1e9, 0.0)
            else:
                excl_s = exclusive_time(start, end, kids) / 1e9
            seconds[bucket] += excl_s
            if outer[i] == -1:
                top_level.append(i)
        phase = phases.get((name, bucket))
        if phase is None:
            phase = phases[(name, bucket)] = PhasePart()
        phase.count += 1
        phase.total_s += duration_s
        phase.durations.append(duration_s)
        if i in tokens:
            phase.tokens += tokens[i]
            phase.token_s += duration_s
        step = steps[i]
        if step is None:
            continue
        own = own_steps[i]
        if bucket is None and not has_child[i]:  # an unbucketed leaf in a step (not the step's own umbrella)
            p = parents[i]
            if own is None or (p != -1 and steps[p] == own):
                phase.leaf_s += duration_s
        if bucket is not None and bucket in COMPUTE_BUCKETS:
            by_step: Any = compute.get(name)
            if by_step is None:
                by_step = compute[name] = [array("q"), array("d")]
            if type(by_step) is list and type(step) is int and -INT64_END <= step < INT64_END:
                by_step[0].append(step)  # (16 bytes a span; summed per step at the end)
                by_step[1].append(excl_s)
            else:  # a step that is not an int: this phase's steps stay a dict
                if type(by_step) is list:
                    by_step = compute[name] = _step_dict(by_step)
                by_step[step] = by_step.get(step, 0.0) + excl_s
        if not step_rows:
            continue
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
        if bucket is None:
            if own is not None:
                if sp.umbrellas is None:
                    sp.umbrellas = []
                sp.umbrellas.append(i)
                if flags[i] & ENDED_BY_SHUTDOWN:  # the step was cut short by a shutdown
                    sp.incomplete = True
            continue
        sp.seconds[_BUCKET_INDEX[bucket]] += excl_s
        if outer[i] == -1 or steps[outer[i]] != step:  # nested ones lie inside it: union unchanged
            if sp.bucketed is None:
                sp.bucketed = []
            sp.bucketed.append(i)
    for sp in part_steps.values():  # packed: a run has steps x processes of these (rows until here)
        if sp.bucketed is not None:
            sp.bucketed = merge_indexed(sp.bucketed, starts, ends)
        if sp.umbrellas is not None:
            sp.umbrellas = pack((starts[i], ends[i]) for i in sp.umbrellas)
    part.compute = {name: _summed(by_step) if type(by_step) is list else Series.of(by_step)
                    for name, by_step in compute.items()}  # fmt: skip
    for phase in phases.values():
        phase.bound()
    part.bucketed = merge_indexed(top_level, starts, ends)
    del top_level
    if lo is not None and hi is not None:
        part.lifetime = (lo, hi)
        part.covered_s = covered([part.bucketed], [(lo, hi)]) / 1e9
        if not part.is_driver:  # a worker's uncovered lifetime is measured idle
            seconds["idle"] += max((hi - lo) / 1e9 - part.covered_s, 0.0)
    if not step_rows:  # a worker of a run with a driver: only the job view's are needed again
        part.bucketed = array("q")


_BUCKET_SET = frozenset(BUCKETS)
_BUCKET_INDEX = {b: i for i, b in enumerate(BUCKETS)}


def _step_dict(pairs_: list[array]) -> dict[Any, float]:
    """``[steps, seconds]`` arrays as the step -> summed seconds dict, in the order they came."""
    out: dict[Any, float] = {}
    for step, value in zip(pairs_[0], pairs_[1], strict=True):
        out[step] = out.get(step, 0.0) + value
    return out


def _summed(pairs_: list[array]) -> Series:
    """``[steps, seconds]`` arrays (int steps, in span order) as a :class:`Series`: each step's seconds
    summed in span order from 0.0, exactly as a dict accumulating them would have."""
    steps, values = pairs_
    keys, sums = array("q"), array("d")
    for i in _by(range(len(steps)), steps.__getitem__):  # stable: a step's spans keep their order
        step = steps[i]
        if keys and keys[-1] == step:
            sums[-1] += values[i]
        else:
            keys.append(step)
            sums.append(0.0 + values[i])
    return Series(keys, sums)


def merge_parts(parts: Iterable[ProcessPart]) -> list[ProcessPart]:
    """Parts of the same process folded together, in a stable order (the merge is exact)."""
    merged: dict[tuple[str, int, int], ProcessPart] = {}
    for part in parts:
        if part.key in merged:
            merged[part.key].merge(part)
        else:
            merged[part.key] = part
    return [merged[k] for k in sorted(merged)]



def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2



def file_parts(path: str | os.PathLike[str], driver_in_run: bool = False) -> tuple[list[ProcessPart], ReadStats]:
    """One span file reduced to its process part(s) (a v1 file may hold several) and what its read found.

    ``driver_in_run``: the run has a driver, whose view makes the step rows, so a
    worker's part keeps only what its ranks are compared on (memory: O(steps) per driver).
    """
    stats = ReadStats()
    return [part_from_columns(k, c, step_rows=not driver_in_run or k[0] == "driver")
            for k, c in read_columns(path, stats).items()], stats  # fmt: skip


