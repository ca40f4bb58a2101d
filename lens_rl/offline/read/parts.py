"""Each process's spans reduced to a compact, mergeable part: what every offline tool builds on.

A :class:`ProcessPart` holds one process's exclusive bucket time, lifetime, steps (for the job view's step
rows), phase numbers (count, durations for the p95, tokens) and compute time per phase and step (what
stragglers are judged on). Every duration is an int of nanoseconds, so parts merge exactly and in any
order: files reduce one at a time, in parallel, on a Ray cluster, or a grown file from where its last read
stopped, with identical results. :mod:`lens_rl.offline.read.reduce` makes them.

Example::

    parts = merge_parts(file_parts(path)[0] for path in paths)
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lens_rl.buckets import COMPUTE_BUCKETS, Bucket
from lens_rl.offline.read.gpu_spans import NO_STEP, merged_gpu
from lens_rl.offline.read.intervals import (
    covered,
    merge_packed,
    pairs,
)
from lens_rl.offline.read.sketch import folded, quantile_s
from lens_rl.offline.read.steps import Series, StepPart
from lens_rl.store import Process

__all__ = [
    "BUCKETS",
    "COMPUTE_BUCKETS",
    "EXACT_DURATIONS",
    "NO_STEP",
    "PhasePart",
    "ProcessPart",
    "RequestsPart",
    "Series",
    "SlotsState",
    "StepPart",
    "median",
    "merged_gpu",
    "merge_parts",
    "share_steps",
    "step_key",
]

BUCKETS: tuple[str, ...] = tuple(b.value for b in Bucket)


def step_key(step: Any) -> tuple[str, Any]:
    """A sort key for steps of any JSON type (ints in order, then the others)."""
    return (type(step).__name__, step)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


class SlotsState:
    """Equality of a part kept in ``__slots__``: field by field, in slot order."""

    __slots__: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)


#: Durations a phase keeps exactly (per process, and merged per group); past it, a log-scale sketch.
EXACT_DURATIONS = 65_536


@dataclass
class PhasePart:
    """One (phase, bucket)'s numbers in one process (or merged, in a worker group): count, total, tokens,
    and its durations (ns) for the p95: exactly while at most :data:`EXACT_DURATIONS`, else as a sketch
    (log-scale buckets, 0.5 % relative accuracy) so memory stays bounded however long the run.

    ``leaf_ns``: time of its spans that were unbucketed leaves inside a step (time no bucket covers)."""

    count: int = 0
    total_ns: int = 0
    #: exclusive ns (a bucketed phase's: what its nearest bucketed descendants leave it)
    excl_ns: int = 0
    durations: array = field(default_factory=lambda: array("q"))
    tokens: float = 0
    token_ns: int = 0
    #: FLOPs of the spans that said their FLOPs per token (``rl.flops_per_token``), and their tokens
    flops: float = 0.0
    flops_tokens: float = 0
    leaf_ns: int = 0
    sketch: dict[int, int] | None = None

    def bound(self) -> None:
        """Past :data:`EXACT_DURATIONS`, fold the durations into the sketch."""
        if len(self.durations) > EXACT_DURATIONS or (self.sketch is not None and self.durations):
            self.sketch = folded(self.sketch if self.sketch is not None else {}, self.durations)
            self.durations = array("q")

    def quantile_s(self, q: float) -> float | None:
        """Nearest-rank quantile of the durations, in seconds (exact, or within 0.5 % from the sketch)."""
        if self.sketch is not None and self.durations:
            self.bound()  # (exact durations beside a sketch: folded in)
        if self.sketch is not None:
            return quantile_s(self.sketch, q)
        if not self.durations:
            return None
        ordered = sorted(self.durations)
        return ordered[max(math.ceil(q * len(ordered)) - 1, 0)] / 1e9

    def merge(self, other: PhasePart, bound: bool = True) -> None:
        """Fold ``other`` in; ``bound`` False keeps the durations exact past the bound (a rollup's transient
        merge: the quantile then sorts them in C instead of folding each into the sketch)."""
        self.count += other.count
        self.total_ns += other.total_ns
        self.excl_ns += other.excl_ns
        self.durations.extend(other.durations)
        self.tokens += other.tokens
        self.token_ns += other.token_ns
        self.flops += other.flops
        self.flops_tokens += other.flops_tokens
        self.leaf_ns += other.leaf_ns
        if other.sketch is not None:
            self.sketch = dict(self.sketch or {})
            _add_counts(self.sketch, other.sketch)
        if bound:
            self.bound()


class RequestsPart(SlotsState):
    """One process's requests: their latencies (seconds, one array each), summed prefill / decode seconds and
    output tokens, the union of their spans' intervals (packed ns), and how many of their values were skipped
    (no plausible number: :func:`lens_rl.offline.read.requests.request_numbers`). Exact and mergeable."""

    __slots__ = ("e2e", "queue", "ttft", "prefill_s", "decode_s", "output_tokens", "busy", "skipped")

    def __init__(self) -> None:
        self.e2e, self.queue, self.ttft = array("d"), array("d"), array("d")
        self.prefill_s = self.decode_s = self.output_tokens = 0.0
        self.busy = array("q")
        self.skipped = 0

    @property
    def count(self) -> int:
        return len(self.e2e)

    def merge(self, other: RequestsPart) -> None:
        """Fold another part of the same process in."""
        self.e2e.extend(other.e2e)
        self.queue.extend(other.queue)
        self.ttft.extend(other.ttft)
        self.prefill_s += other.prefill_s
        self.decode_s += other.decode_s
        self.output_tokens += other.output_tokens
        self.busy = merge_packed(self.busy, other.busy)
        self.skipped += other.skipped


@dataclass
class ProcessPart:
    """Everything the reports need of one process, compact and mergeable (picklable for --jobs / --ray; the
    refresh cache keeps it as a record: :mod:`lens_rl.offline.run.records`)."""

    key: Process
    spans: int = 0
    runs: set[str] = field(default_factory=set)
    sampled: bool = False
    #: the ``sample_rate`` its spans were kept at (``rl.sample_rate``; 1.0: all of them): what the job's
    #: goodput scales its productive time by (:func:`lens_rl.offline.rollup.goodput.estimated_productive_ns`)
    sample_rate: float = 1.0
    #: exclusive ns per bucket (a worker's idle: its bucketed spans' own, the uncovered lifetime is added
    #: by :attr:`idle_ns`)
    bucket_ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0))
    lifetime: tuple[int, int] | None = None
    jobs: list[tuple[int, int]] = field(default_factory=list)
    bucketed: array = field(default_factory=lambda: array("q"))  # merged top-level bucketed intervals, packed
    steps: dict[Any, StepPart] = field(default_factory=dict)
    phases: dict[tuple[str, str | None], PhasePart] = field(default_factory=dict)
    #: phase -> step -> exclusive ns of compute phases (what stragglers are judged on);
    #: a :class:`Series` (two arrays) when the steps are integers, else a dict
    compute: dict[str, Mapping[Any, int]] = field(default_factory=dict)
    #: the earliest header's ``since`` (ns), None when absent
    since: int | None = None
    #: the job root's error ({"type", "message"}) when it ended in one (a driver's)
    job_error: dict[str, str] | None = None
    #: runs of steps a later attempt ran again (wasted, reason rerun): their spans' merged intervals
    #: (packed; none of them is in the buckets, phases, steps or compute above) and which steps they were
    rerun: array = field(default_factory=lambda: array("q"))
    rerun_steps: set[Any] = field(default_factory=set)
    #: the critical path's walks of this process (:class:`lens_rl.offline.read.critical.CritPart`), or None
    crit: Any = None
    #: ("own" | "gen", step) -> tokens: a step umbrella's own rl.num_tokens, its generation phases' sum
    step_tokens: dict[tuple[str, Any], float] = field(default_factory=dict)
    #: host, rl.num_gpus, rl.gpu_ids, rl.device.name, rl.device.peak_tflops, rl.model.num_params (as set)
    device: dict[str, Any] = field(default_factory=dict)
    #: parent cycles (self-parents included) the tree rule broke in its spans
    cycles: int = 0
    #: (phase, bucket) -> step umbrellas inside a bucketed span of that phase (its bucket does not apply to them)
    enclosing: dict[tuple[str, str | None], int] = field(default_factory=dict)
    #: (phase before, phase after) -> ns of its step umbrellas no bucketed span of theirs covers, by where the
    #: gap falls ("step start" / "step end" at the edges): where unattributed time is
    gaps: dict[tuple[str, str], int] = field(default_factory=dict)
    #: span id -> (phase, bucket, ns, step) of its generation phases with no token count of their own: what
    #: requests in another file (a vLLM process's) may give tokens to, matched at the rollup
    untokened: dict[str, tuple[Any, Any, int, Any]] = field(default_factory=dict)
    #: parent span id -> [output, input] tokens of third-party spans (``gen_ai.usage``) whose phase is in
    #: another file
    remote_tokens: dict[str, list[float]] = field(default_factory=dict)
    #: span id -> its generation phase's id (in :attr:`untokened`): third-party spans with no child in the file
    #: (an HTTP client's call) whose nearest phase has no token count, what a request in another file may hang
    #: from (:meth:`lens_rl.offline.read.tally.Tally.tokens`)
    relays: dict[str, str] = field(default_factory=dict)
    #: its vLLM request spans' numbers (:class:`RequestsPart`), or None
    requests: RequestsPart | None = None
    #: its share of the async-pipeline figures (:class:`lens_rl.offline.read.pipe.PipePart`), or None
    pipe: Any = None
    #: (phase, bucket) -> its count, total and exclusive ns, tokens and durations per integer step
    #: (:class:`lens_rl.offline.read.phase_steps.PhaseSteps`): what ``--steps A-B`` cuts phases and ranks to
    phase_steps: dict[tuple[str, str | None], Any] = field(default_factory=dict)
    #: a GPU process's phase spans kept for the join with its devices' samples
    #: (:mod:`lens_rl.offline.read.gpu_spans`), or None
    gpu: Any = None

    @property
    def is_driver(self) -> bool:
        return self.key.driver

    @property
    def borrowed(self) -> bool:
        """Whether it holds third-party spans alone (a vLLM process's file, written with its caller's group and
        rank): no time of its own, its time is its caller's rank's (the ranks table and the pipeline's pools
        leave it out)."""
        return self.lifetime is None and not any(self.bucket_ns.values())

    @property
    def first_ns(self) -> int | None:
        """When the process began: its earliest header ``since``, job root or span start."""
        starts = [t for t in (self.since, self.lifetime and self.lifetime[0]) if t is not None]
        starts += [start for start, _ in self.jobs]
        return min(starts) if starts else None

    @property
    def last_ns(self) -> int | None:
        """Its last recorded end (a span's or the job root's)."""
        ends = [end for _, end in self.jobs] + ([self.lifetime[1]] if self.lifetime is not None else [])
        return max(ends) if ends else None

    @property
    def lifetime_ns(self) -> int:
        return 0 if self.lifetime is None else self.lifetime[1] - self.lifetime[0]

    @property
    def rerun_ns(self) -> int:
        """Wasted time of its re-run steps: their runs' union, less what bucketed spans of final runs cover
        (a phase of a later step running beside them keeps its own bucket)."""
        if not self.rerun:
            return 0
        total = sum(end - start for start, end in pairs(self.rerun))
        return total - covered([self.bucketed], pairs(self.rerun))

    @property
    def coverage(self) -> list[array]:
        """What its spans cover of its time: bucketed spans and re-run steps (the rest is unattributed, or a
        worker's idle)."""
        return [self.bucketed, self.rerun] if self.rerun else [self.bucketed]

    def seconds(self) -> dict[str, float]:
        """Seconds per bucket, the resource view: re-run steps are wasted; a worker's lifetime not covered by a
        bucketed span (or a re-run step) is idle (measured, never negative); the driver's is not (it
        orchestrates: its gaps are unattributed)."""
        out = {b: ns / 1e9 for b, ns in self.bucket_ns.items()}
        if self.rerun:
            out["wasted"] += self.rerun_ns / 1e9
        if not self.is_driver and self.lifetime is not None:
            out["idle"] += max(self.lifetime_ns - covered(self.coverage, [self.lifetime]), 0) / 1e9
        return out

    def compute_items(self) -> Iterator[tuple[str, Any, int]]:
        """(phase, step, exclusive ns) of the compute phases stragglers are judged on."""
        for phase, by_step in self.compute.items():
            for step, value in by_step.items():
                yield phase, step, value

    def merge(self, other: ProcessPart) -> None:
        """Fold another part of the same process in (another file of it, or a file's next lines)."""
        self.spans += other.spans
        self.runs |= other.runs
        self.sampled = self.sampled or other.sampled
        self.sample_rate = min(self.sample_rate, other.sample_rate)
        _add_counts(self.bucket_ns, other.bucket_ns)
        self.lifetime = _hull(self.lifetime, other.lifetime)
        self.jobs.extend(other.jobs)
        self.bucketed = merge_packed(self.bucketed, other.bucketed)
        if other.since is not None and (self.since is None or other.since < self.since):
            self.since = other.since
        self.job_error = self.job_error or other.job_error
        if other.rerun:
            self.rerun = merge_packed(self.rerun, other.rerun)
        self.rerun_steps |= other.rerun_steps
        self.device = self.device or other.device
        self.cycles += other.cycles
        self.requests = _folded(self.requests, other.requests)
        self.crit = _folded(self.crit, other.crit)
        self.pipe = _folded(self.pipe, other.pipe)
        self.gpu = merged_gpu(self.gpu, other.gpu)
        self._merge_tables(other)

    def _merge_tables(self, other: ProcessPart) -> None:
        """:meth:`merge`'s keyed numbers: tokens, enclosures and gaps summed by key, steps, phases and compute
        series merged by theirs."""
        _add_counts(self.step_tokens, other.step_tokens)
        _add_counts(self.enclosing, other.enclosing)
        _add_counts(self.gaps, other.gaps)
        self.untokened.update(other.untokened)
        self.relays.update(other.relays)
        for parent, (out, into) in other.remote_tokens.items():
            found = self.remote_tokens.setdefault(parent, [0.0, 0.0])
            found[0] += out
            found[1] += into
        for step, part in other.steps.items():
            self.steps.setdefault(step, StepPart()).merge(part)
        for key, phase in other.phases.items():
            self.phases.setdefault(key, PhasePart()).merge(phase)
        for name, by_step in other.compute.items():
            self.compute[name] = Series.merged(self.compute.get(name, {}), by_step)
        for key, table in other.phase_steps.items():
            if key in self.phase_steps:
                self.phase_steps[key].merge(table)
            else:  # (a table of its own: merging into it never changes ``other``'s)
                self.phase_steps[key] = table.copy()


def _add_counts(into: dict[Any, Any], other: Mapping[Any, Any]) -> None:
    """``other``'s numbers added to ``into``'s, key by key."""
    for key, count in other.items():
        into[key] = into.get(key, 0) + count


def _hull(mine: tuple[int, int] | None, other: tuple[int, int] | None) -> tuple[int, int] | None:
    """The smallest interval holding both (None: neither)."""
    if mine is None or other is None:
        return mine or other
    return min(mine[0], other[0]), max(mine[1], other[1])


def _folded(mine: Any, other: Any) -> Any:
    """``other`` folded into ``mine`` (a part with a ``merge``, or None), the result returned."""
    if other is None:
        return mine
    if mine is None:
        return other
    mine.merge(other)
    return mine


def merge_parts(parts: Iterable[ProcessPart]) -> list[ProcessPart]:
    """Parts of the same process folded together, in a stable order (the merge is exact)."""
    merged: dict[Process, ProcessPart] = {}
    for part in parts:
        if part.key in merged:
            merged[part.key].merge(part)
        else:
            merged[part.key] = part
    return [merged[k] for k in sorted(merged)]


def share_steps(part: ProcessPart, seen: dict[bytes, array]) -> None:
    """Make ``part``'s :class:`Series` and phases per step use one ``steps`` array per distinct set of steps seen (``seen``):
    ranks of a run mostly share their steps, so a 1,000-rank, 100 k-step run keeps one copy, not 1,000."""
    for series in part.compute.values():
        if isinstance(series, Series):
            series.steps = seen.setdefault(series.steps.tobytes(), series.steps)
    for table in part.phase_steps.values():  # (its phases per step likewise: their arrays are never changed)
        table.steps = seen.setdefault(table.steps.tobytes(), table.steps)
