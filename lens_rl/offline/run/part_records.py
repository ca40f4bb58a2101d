"""A read's parts as their cache records and back: :func:`part_record` and :func:`part_from` convert a
:class:`~lens_rl.offline.read.parts.ProcessPart` (and what it holds) to and from its declared schema
(:mod:`~lens_rl.offline.run.part_schema`). Arrays go out as raw buffers and come back as arrays made from the
views decoded; columns that do not add up (a step column longer than the steps, a buffer cut mid-item, an
index past its table) are a ``ValueError``.

Example::

    data = encode(part_record(part))
    assert part_from(decode(data, PartRec)) == part
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Any

import numpy as np

from lens_rl.offline.read.critical import CritPart
from lens_rl.offline.read.intervals import intervals_column, intervals_from_column
from lens_rl.offline.read.parts import BUCKETS, PhasePart, ProcessPart, RequestsPart, Series
from lens_rl.offline.read.phase_steps import PhaseSteps
from lens_rl.offline.read.pipe import PipePart
from lens_rl.offline.read.steps import StepPart
from lens_rl.offline.run.part_schema import (
    CRIT_ARRAYS,
    ComputeRec,
    CritRec,
    GpuRec,
    PartRec,
    PhaseRec,
    PhaseStepsRec,
    PipeRec,
    RequestsRec,
    StepsRec,
)
from lens_rl.offline.run.record_codec import array_of, items_of, raw
from lens_rl.store import Process

__all__ = ["UnreadSteps", "part_from", "part_record"]


def _column(values: Any, typecode: str) -> Any:
    """An array or a list (ids, steps) as a :data:`Column`: raw where it is an array of ``typecode``."""
    if type(values) is array:
        return raw(values, typecode)
    return list(values)


def _keys(values: Any) -> Any:
    """Keys (steps) as a :data:`Column`: raw int64 where every one is an int that fits, else as they are."""
    values = list(values)
    if all(type(v) is int for v in values):
        try:
            return raw(array("q", values), "q")
        except OverflowError:
            pass
    return values


def _from_column(column: Any, typecode: str) -> Any:
    return array_of(typecode, column) if type(column) is memoryview else column


def _steps_record(steps: Mapping[Any, StepPart]) -> StepsRec:
    parts = steps.values()
    ns = array("q")
    for sp in parts:
        ns.extend(sp.ns)
    flags = bytes(4 * sp.incomplete + 2 * (sp.lo is None) + (sp.hi is None) for sp in parts)
    lows = array("q", (sp.lo or 0 for sp in parts))
    highs = array("q", (sp.hi or 0 for sp in parts))
    u_lengths, umbrellas = intervals_column(sp.umbrellas for sp in parts)
    b_lengths, bucketed = intervals_column(sp.bucketed for sp in parts)
    q = "q"
    return StepsRec(
        _keys(steps),
        raw(ns, q),
        flags,
        raw(lows, q),
        raw(highs, q),
        raw(u_lengths, q),
        raw(umbrellas, q),
        raw(b_lengths, q),
        raw(bucketed, q),
        {n: sp.error for n, sp in enumerate(parts) if sp.error is not None},
    )


def _steps_from(rec: StepsRec) -> dict[Any, StepPart]:
    # (the columns only read here are read in place: only the interval arrays, kept, are copied out)
    keys = items_of("q", rec.keys) if type(rec.keys) is memoryview else rec.keys
    ns = items_of("q", rec.ns).tolist()
    if len(ns) != 4 * len(keys):
        raise ValueError("step columns that do not add up")
    umbrellas = _intervals(rec.umbrella_lengths, rec.umbrellas)
    bucketed = _intervals(rec.bucketed_lengths, rec.bucketed)
    lows, highs = items_of("q", rec.lows), items_of("q", rec.highs)
    if any(type(n) is not int or not 0 <= n < len(keys) for n in rec.errors):
        raise ValueError("step errors past the steps")
    new = StepPart.__new__
    out = {}
    for n, (key, flag, lo, hi, umbrella, spans) in enumerate(
        zip(keys, rec.flags, lows, highs, umbrellas, bucketed, strict=True)
    ):
        sp = new(StepPart)  # (its fields all set here: no defaults made to be replaced)
        sp.lo = None if flag & 2 else lo
        sp.hi = None if flag & 1 else hi
        sp.incomplete = bool(flag & 4)
        sp.error = rec.errors.get(n)
        sp.ns = ns[4 * n : 4 * n + 4]
        sp.umbrellas, sp.bucketed = umbrella, spans
        out[key] = sp
    return out


def _intervals(lengths: memoryview, items: memoryview) -> list[array | None]:
    """Packed interval arrays from their columns (ValueError: lengths that do not add up to the items)."""
    counts, flat = items_of("q", lengths), array_of("q", items)
    if sum(c for c in counts if c > 0) != len(flat):
        raise ValueError("interval columns that do not add up")
    return list(intervals_from_column(counts, flat))


def _phase_record(key: tuple[Any, Any], phase: PhasePart) -> PhaseRec:
    return PhaseRec(
        key[0],
        key[1],
        phase.count,
        phase.total_ns,
        phase.excl_ns,
        raw(phase.durations, "q"),
        phase.tokens,
        phase.token_ns,
        phase.flops,
        phase.flops_tokens,
        phase.leaf_ns,
        phase.sketch,
    )


def _phase_from(rec: PhaseRec) -> PhasePart:
    return PhasePart(
        rec.count,
        rec.total_ns,
        rec.excl_ns,
        array_of("q", rec.durations),
        rec.tokens,
        rec.token_ns,
        rec.flops,
        rec.flops_tokens,
        rec.leaf_ns,
        rec.sketch,
    )


def _compute_record(name: Any, by_step: Mapping[Any, int]) -> ComputeRec:
    if type(by_step) is Series:
        return ComputeRec(name, raw(by_step.steps, "q"), raw(by_step.ns, "q"), [])
    return ComputeRec(name, None, None, list(by_step.items()))


def _compute_from(rec: ComputeRec) -> Mapping[Any, int]:
    if rec.steps is None or rec.ns is None:
        return dict(rec.items)
    steps, ns = array_of("q", rec.steps), array_of("q", rec.ns)
    if len(steps) != len(ns):
        raise ValueError("a series whose columns do not add up")
    return Series(steps, ns)


#: the typecodes of a :class:`PhaseSteps`' columns, in its constructor's order
_PHASE_STEPS_CODES = "qqqqqqdddq"


def _phase_steps_record(key: tuple[Any, Any], table: PhaseSteps) -> PhaseStepsRec:
    return PhaseStepsRec(
        key[0],
        key[1],
        *(raw(column, code) for column, code in zip(table.all_columns(), _PHASE_STEPS_CODES, strict=True)),
    )


def _phase_steps_from(rec: PhaseStepsRec) -> PhaseSteps:
    given = (rec.steps, rec.count, rec.total, rec.excl, rec.token_ns, rec.leaf, rec.tokens, rec.flops, rec.flops_tokens)
    columns = [array_of(code, b) for b, code in zip(given, _PHASE_STEPS_CODES, strict=False)]
    durations = array_of("q", rec.durations)
    steps = np.frombuffer(columns[0], np.int64) if len(columns[0]) else np.zeros(0, np.int64)
    if len({len(c) for c in columns[:4]}) != 1 or bool((np.diff(steps) <= 0).any()):
        raise ValueError("per-step phase columns that do not add up (or steps not sorted and distinct)")
    steps_, count, total, excl, token_ns, leaf, tokens, flops, flops_tokens = columns
    table = PhaseSteps(steps_, count, total, excl, token_ns, leaf, tokens, flops, flops_tokens, durations)
    if not table.adds_up():
        raise ValueError("per-step phase columns or durations that do not add up to its steps and counts")
    return table


def _requests_record(part: RequestsPart) -> RequestsRec:
    d = "d"
    return RequestsRec(
        raw(part.e2e, d),
        raw(part.queue, d),
        raw(part.ttft, d),
        part.prefill_s,
        part.decode_s,
        part.output_tokens,
        raw(part.busy, "q"),
        part.skipped,
    )


def _requests_from(rec: RequestsRec) -> RequestsPart:
    out = RequestsPart()
    out.e2e, out.queue, out.ttft = array_of("d", rec.e2e), array_of("d", rec.queue), array_of("d", rec.ttft)
    out.prefill_s, out.decode_s, out.output_tokens = rec.prefill_s, rec.decode_s, rec.output_tokens
    out.busy = array_of("q", rec.busy)
    out.skipped = rec.skipped
    return out


def _crit_record(part: CritPart) -> CritRec:
    return CritRec(
        _column(part.node_ids, "Q"),
        _column(part.e_parent, "Q"),
        list(part.attrs),
        list(part.steps.items()),
        [raw(getattr(part, name), code) for name, code in CRIT_ARRAYS],
    )


def _crit_from(rec: CritRec) -> CritPart:
    if len(rec.arrays) != len(CRIT_ARRAYS):
        raise ValueError("critical-path columns that do not add up")
    out = CritPart()
    out.node_ids = _from_column(rec.node_ids, "Q")
    out.e_parent = _from_column(rec.e_parent, "Q")
    out.attrs = rec.attrs
    out.steps = {step: runs for step, runs in rec.steps}
    for (name, code), buffer in zip(CRIT_ARRAYS, rec.arrays, strict=True):
        setattr(out, name, array_of(code, buffer))
    nodes, entries = len(out.node_ids), len(out.e_parent)
    if len(out.node_attr) != nodes or len(out.node) != len(out.a) or len(out.e_start) != entries:
        raise ValueError("critical-path columns that do not add up")
    return out


def _pipe_record(part: PipePart) -> PipeRec:
    return PipeRec(raw(part.productive, "q"), list(part.syncs), list(part.consumed))


def _pipe_from(rec: PipeRec) -> PipePart:
    out = PipePart()
    out.productive, out.syncs, out.consumed = array_of("q", rec.productive), rec.syncs, rec.consumed
    return out


def _gpu_record(gpu: Any) -> GpuRec:
    uuids, starts, ends, keys, index, steps = gpu
    return GpuRec(
        list(uuids), raw(starts, "q"), raw(ends, "q"), [tuple(k) for k in keys], raw(index, "i"), raw(steps, "q")
    )


def _within(index: array, bound: int) -> bool:
    """Whether every item of ``index`` is in [0, ``bound``): numpy's min and max over its buffer (the builtins
    made an int object per item: 0.15 s of a cold look's main process at 1 M spans; a generator was 0.2 s)."""
    if not len(index):
        return True
    items = np.frombuffer(index, f"=i{index.itemsize}")
    return bool(items.min() >= 0 and items.max() < bound)


def _gpu_from(rec: GpuRec) -> Any:
    starts, ends, index, steps = (
        array_of(c, b) for c, b in (("q", rec.starts), ("q", rec.ends), ("i", rec.index), ("q", rec.steps))
    )
    if not len(starts) == len(ends) == len(index) == len(steps) or not _within(index, len(rec.keys)):
        raise ValueError("GPU span columns that do not add up")
    return tuple(rec.uuids), starts, ends, list(rec.keys), index, steps


def part_record(part: ProcessPart) -> PartRec:
    """``part`` as its record."""
    return PartRec(
        tuple(part.key),  # type: ignore[arg-type]
        part.spans,
        list(part.runs),
        part.sampled,
        part.bucket_ns,
        part.lifetime,
        part.jobs,
        raw(part.bucketed, "q"),
        _steps_record(part.steps),
        [_phase_record(key, phase) for key, phase in part.phases.items()],
        [_compute_record(name, by_step) for name, by_step in part.compute.items()],
        part.since,
        part.job_error,
        raw(part.rerun, "q"),
        list(part.rerun_steps),
        None if part.crit is None else _crit_record(part.crit),
        [(kind, step, tokens) for (kind, step), tokens in part.step_tokens.items()],
        part.device,
        part.cycles,
        [(*key, n) for key, n in part.enclosing.items()],
        [(*key, n) for key, n in part.gaps.items()],
        [(span_id, *value) for span_id, value in part.untokened.items()],
        [(parent, out, into) for parent, (out, into) in part.remote_tokens.items()],
        None if part.requests is None else _requests_record(part.requests),
        None if part.pipe is None else _pipe_record(part.pipe),
        None if part.gpu is None else _gpu_record(part.gpu),
        part.sample_rate,
        [_phase_steps_record(key, table) for key, table in part.phase_steps.items()],
        list(part.relays.items()),
    )


def part_from(rec: PartRec, phase_steps: bool = True) -> ProcessPart:
    """The part ``rec`` records (ValueError: columns that do not add up, a bucket the rollups do not know);
    ``phase_steps`` False leaves its phases per step unread (what only ``--steps A-B`` reads: a third of a
    run's records), its ``phase_steps`` an empty :class:`UnreadSteps`."""
    _check_buckets(rec)
    return ProcessPart(
        key=Process(*rec.key),
        spans=rec.spans,
        runs=set(rec.runs),  # type: ignore[arg-type]
        sampled=rec.sampled,
        bucket_ns=rec.bucket_ns,
        lifetime=rec.lifetime,
        jobs=rec.jobs,
        bucketed=array_of("q", rec.bucketed),
        steps=_steps_from(rec.steps),
        phases={(p.name, p.bucket): _phase_from(p) for p in rec.phases},  # type: ignore[misc]
        compute={c.name: _compute_from(c) for c in rec.compute},  # type: ignore[misc]
        since=rec.since,
        job_error=rec.job_error,
        rerun=array_of("q", rec.rerun),
        rerun_steps=set(rec.rerun_steps),
        crit=None if rec.crit is None else _crit_from(rec.crit),
        step_tokens={(kind, step): tokens for kind, step, tokens in rec.step_tokens},
        device=rec.device,
        cycles=rec.cycles,
        enclosing={(name, bucket): n for name, bucket, n in rec.enclosing},  # type: ignore[misc]
        gaps={(before, after): n for before, after, n in rec.gaps},  # type: ignore[misc]
        untokened={span_id: (name, bucket, ns, step) for span_id, name, bucket, ns, step in rec.untokened},  # type: ignore[misc]
        remote_tokens={parent: [out, into] for parent, out, into in rec.remote_tokens},  # type: ignore[misc]
        requests=None if rec.requests is None else _requests_from(rec.requests),
        pipe=None if rec.pipe is None else _pipe_from(rec.pipe),
        gpu=None if rec.gpu is None else _gpu_from(rec.gpu),
        sample_rate=rec.sample_rate,
        phase_steps={(p.name, p.bucket): _phase_steps_from(p) for p in rec.phase_steps}  # type: ignore[misc]
        if phase_steps
        else UnreadSteps(),
        relays=dict(rec.relays),  # type: ignore[arg-type]
    )


class UnreadSteps(dict):  # type: ignore[type-arg]
    """A part's phases per step left unread (:func:`part_from`): empty, or holding only what was merged into it
    since; whoever needs its whole tables reads them from the record again."""

    __slots__ = ()


_BUCKET_KEYS, _BUCKETS_OR_NONE = sorted(BUCKETS), frozenset((*BUCKETS, None))


def _check_buckets(rec: PartRec) -> None:
    """ValueError where ``rec`` names a bucket other than :data:`~lens_rl.offline.read.parts.BUCKETS`' (or
    none, for a phase outside every bucket, as a read makes them): the rollups index their tables by these."""
    named = [
        *(p.bucket for p in rec.phases),
        *(p.bucket for p in rec.phase_steps),
        *(bucket for _, bucket, _ in rec.enclosing),
        *(bucket for _, _, bucket, _, _ in rec.untokened),
        *(bucket for _, bucket in (rec.gpu.keys if rec.gpu is not None else ())),
        *(bucket for _, bucket in (rec.crit.attrs if rec.crit is not None else ())),
    ]
    if sorted(rec.bucket_ns) != _BUCKET_KEYS or not all(b in _BUCKETS_OR_NONE for b in named):
        raise ValueError("a bucket the rollups do not know")
