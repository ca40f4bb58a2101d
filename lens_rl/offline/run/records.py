"""The refresh cache's records as typed data: one declared schema per kind of record (msgspec ``Struct``s
encoded as MessagePack), and the conversion between them and the parts a read reduces to
(:class:`~lens_rl.offline.read.parts.ProcessPart` and what it holds). This module is the cache's format: a
new figure of a part is a field here and a line of its conversion, and :data:`FORMAT` is not the layout of a
class.

Arrays are raw little-endian buffers (MessagePack ``bin``): a reader decodes them as views into the bytes it
read and makes each array from its view (no object per item). Decoding validates as it goes: a record of
another shape or version, cut short, or claiming more than its bytes hold is a :class:`msgspec.DecodeError`
(msgspec checks every length against the bytes left before allocating); arrays that do not add up (a step
column longer than the steps, a buffer cut mid-item) are a ``ValueError``. Nothing read can run code.

Example::

    data = encode(part_record(part))
    assert part_from(decode(data, PartRec)) == part
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping
from typing import Any

import msgspec

from lens_rl.offline.read.critical import CritPart
from lens_rl.offline.read.intervals import intervals_column, intervals_from_column
from lens_rl.offline.read.parts import PhasePart, ProcessPart, RequestsPart, Series
from lens_rl.offline.read.pipe import PipePart
from lens_rl.offline.read.steps import StepPart
from lens_rl.store import Process, ReadStats

__all__ = [
    "UNENCODABLE",
    "VERSION",
    "DeltaRec",
    "EntryRec",
    "PartRec",
    "StatsRec",
    "array_of",
    "decode",
    "encode",
    "part_from",
    "part_record",
    "raw",
    "stats_from",
    "stats_record",
]

#: the records' schema version (a record of another is refused by its tag: the file is read cold)
VERSION = 1

#: what encoding a value the schema cannot hold raises (an int past 64 bits, a type it has no form for): such a
#: value is kept nowhere, and the next look reads cold
UNENCODABLE = (OverflowError, TypeError, ValueError)

#: a step, a phase or bucket name, an attribute's value: a JSON scalar
Scalar = int | float | str | bool | None
#: a span id (a lens_rl id is 16 hex digits, kept as the int they spell where the column is an int array)
Id = str | int
Num = int | float
#: an array's items, raw little-endian (a view into the bytes read)
Raw = memoryview
#: an array's items (raw), else its values as they are (ids or steps that are not all 64-bit ints)
Column = memoryview | list[Scalar]

_SWAP = sys.byteorder != "little"


def raw(values: array, typecode: str) -> Any:
    """``values`` (an array of ``typecode``) as raw little-endian bytes to encode."""
    if values.typecode != typecode:
        raise TypeError(f"an array of {values.typecode!r} where the schema says {typecode!r}")
    if _SWAP:  # pragma: no cover - a big-endian host
        values = array(typecode, values)
        values.byteswap()
    return memoryview(values)


def array_of(typecode: str, buffer: memoryview) -> array:
    """The array of ``typecode`` whose raw little-endian items ``buffer`` holds (ValueError: cut mid-item)."""
    out = array(typecode)
    if len(buffer) % out.itemsize:
        raise ValueError("an array cut mid-item")
    out.frombytes(buffer)
    if _SWAP:  # pragma: no cover - a big-endian host
        out.byteswap()
    return out


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


# ------------------------------------------------------------------------------------------- schemas


class _Rec(msgspec.Struct, array_like=True, gc=False, forbid_unknown_fields=True):
    """A record's fields in order (a MessagePack array), no cycle among them."""


class StepsRec(_Rec):
    """A part's steps (:class:`~lens_rl.offline.read.steps.StepPart`) as columns: per step its key, four
    bucket ns, flags (4 incomplete, 2 no lo, 1 no hi), lo and hi, and its umbrellas' and bucketed spans'
    packed intervals (lengths, -1 for none; items)."""

    keys: Column
    ns: Raw
    flags: bytes
    lows: Raw
    highs: Raw
    umbrella_lengths: Raw
    umbrellas: Raw
    bucketed_lengths: Raw
    bucketed: Raw


class PhaseRec(_Rec):
    """One (phase, bucket)'s :class:`~lens_rl.offline.read.parts.PhasePart`."""

    name: Scalar
    bucket: Scalar
    count: int
    total_ns: int
    excl_ns: int
    durations: Raw
    tokens: Num
    token_ns: int
    flops: Num
    flops_tokens: Num
    leaf_ns: int
    sketch: dict[int, int] | None


class ComputeRec(_Rec):
    """One phase's compute ns by step: a :class:`~lens_rl.offline.read.steps.Series` (two int64 arrays), or
    (steps of other types) its items."""

    name: Scalar
    steps: Raw | None
    ns: Raw | None
    items: list[tuple[Scalar, int]]


class RequestsRec(_Rec):
    """A process's :class:`~lens_rl.offline.read.parts.RequestsPart`."""

    e2e: Raw
    queue: Raw
    ttft: Raw
    prefill_s: Num
    decode_s: Num
    output_tokens: Num
    busy: Raw


class PipeRec(_Rec):
    """A process's share of the async-pipeline figures (:class:`~lens_rl.offline.read.pipe.PipePart`): its
    productive spans' union (packed), its weight syncs (start, end, step) and consumed versions (step, policy
    version, trajectory versions, trajectory tokens, max staleness: attribute values as written)."""

    productive: Raw
    syncs: list[tuple[int, int, Scalar]]
    consumed: list[tuple[Scalar, Any, Any, Any, Any]]


class GpuRec(_Rec):
    """A GPU process's phase spans kept for the join with its devices' samples
    (:mod:`lens_rl.offline.read.gpu_spans`): its devices' uuids, each span's start and end, the (phase,
    bucket) table, each span's index into it and its step."""

    uuids: list[str]
    starts: Raw
    ends: Raw
    keys: list[tuple[Scalar, Scalar]]
    index: Raw
    steps: Raw


#: CritPart's arrays and their typecodes (node_ids and e_parent: a Column of ids)
_CRIT_ARRAYS = (
    ("node_attr", "i"),
    ("a", "q"),
    ("node", "i"),
    ("e_start", "q"),
    ("e_end", "q"),
    ("e_node", "i"),
    ("k_node", "i"),
    ("k_start", "q"),
    ("k_end", "q"),
    ("w_entry", "i"),
    ("w_off", "q"),
    ("w_len", "i"),
)


class CritRec(_Rec):
    """A process's critical-path walks (:class:`~lens_rl.offline.read.critical.CritPart`)."""

    node_ids: Column
    e_parent: Column
    attrs: list[tuple[Scalar, Scalar]]
    steps: list[tuple[Scalar, list[tuple[int, int, int]]]]
    arrays: list[Raw]  # in _CRIT_ARRAYS' order


class PartRec(_Rec):
    """A :class:`~lens_rl.offline.read.parts.ProcessPart`, field by field."""

    key: tuple[str, int, int, int, bool]
    spans: int
    runs: list[Scalar]
    sampled: bool
    bucket_ns: dict[str, int]
    lifetime: tuple[int, int] | None
    jobs: list[tuple[int, int]]
    bucketed: Raw
    steps: StepsRec
    phases: list[PhaseRec]
    compute: list[ComputeRec]
    since: int | None
    job_error: dict[str, Any] | None
    rerun: Raw
    rerun_steps: list[Scalar]
    crit: CritRec | None
    step_tokens: list[tuple[str, Scalar, Num]]
    device: dict[str, Any]
    cycles: int
    enclosing: list[tuple[Scalar, Scalar, int]]
    gaps: list[tuple[Scalar, Scalar, int]]
    untokened: list[tuple[Id, Scalar, Scalar, int, Scalar]]
    remote_tokens: list[tuple[Id, Num, Num]]
    requests: RequestsRec | None
    pipe: PipeRec | None
    gpu: GpuRec | None


class StatsRec(_Rec):
    """A :class:`~lens_rl.store.ReadStats`."""

    files: int
    lines: int
    skipped: int
    duplicates: int
    notes: list[str]
    cache_hits: int
    cache_notes: list[str]
    cache_reads: list[tuple[str, str | None, str | None, int | None]]


class EntryRec(msgspec.Struct, array_like=True, gc=False, tag=f"entry/{VERSION}"):
    """A whole cache entry (:class:`~lens_rl.offline.run.cache_files.Entry`): the first record of its file."""

    options: str
    identity: tuple[int, int, str]
    end: int
    size: int
    mtime_ns: int
    ctime_ns: int
    tail: bytes
    heads: list[dict[str, Any]]
    head_at_end: int | None
    settled: list[PartRec]
    held: Raw
    ids: Column
    stats: StatsRec
    token: str | None


class DeltaRec(msgspec.Struct, array_like=True, gc=False, tag=f"delta/{VERSION}"):
    """What one look added to the entry whose token was ``parent``: the parts it settled, their ids (new
    ones), and the entry's state after it."""

    parent: str | None
    token: str | None
    end: int
    size: int
    mtime_ns: int
    ctime_ns: int
    tail: bytes
    heads: list[dict[str, Any]]
    head_at_end: int | None
    held: Raw
    stats: StatsRec
    parts: list[PartRec]
    ids: list[Id]


_ENCODER = msgspec.msgpack.Encoder()
_DECODERS: dict[Any, msgspec.msgpack.Decoder[Any]] = {}


def encode(record: Any) -> bytes:
    """``record`` as MessagePack (TypeError / OverflowError / msgspec.EncodeError: a value the schema cannot
    hold, e.g. an int past 64 bits: the caller keeps nothing)."""
    return _ENCODER.encode(record)


def decode(data: Any, kind: Any) -> Any:
    """The record of ``kind`` (a schema, or a Union of them) ``data`` holds (msgspec.DecodeError: it does not
    hold one: another shape or version, cut short, or lengths past its bytes)."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    return decoder.decode(data)


# ------------------------------------------------------------------------------------------- conversion


def stats_record(stats: ReadStats) -> StatsRec:
    return StatsRec(
        stats.files,
        stats.lines,
        stats.skipped,
        stats.duplicates,
        list(stats.notes),
        stats.cache_hits,
        list(stats.cache_notes),
        [tuple(r) for r in stats.cache_reads],  # type: ignore[misc]
    )


def stats_from(rec: StatsRec) -> ReadStats:
    return ReadStats(
        rec.files,
        rec.lines,
        rec.skipped,
        rec.duplicates,
        rec.notes,
        rec.cache_hits,
        rec.cache_notes,
        list(rec.cache_reads),
    )


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
    )


def _steps_from(rec: StepsRec) -> dict[Any, StepPart]:
    keys = _from_column(rec.keys, "q")
    ns = array_of("q", rec.ns).tolist()
    if len(ns) != 4 * len(keys):
        raise ValueError("step columns that do not add up")
    umbrellas = _intervals(rec.umbrella_lengths, rec.umbrellas)
    bucketed = _intervals(rec.bucketed_lengths, rec.bucketed)
    lows, highs = array_of("q", rec.lows), array_of("q", rec.highs)
    new = StepPart.__new__
    out = {}
    for n, (key, flag, lo, hi, umbrella, spans) in enumerate(
        zip(keys, rec.flags, lows, highs, umbrellas, bucketed, strict=True)
    ):
        sp = new(StepPart)  # (its fields all set here: no defaults made to be replaced)
        sp.lo = None if flag & 2 else lo
        sp.hi = None if flag & 1 else hi
        sp.incomplete = bool(flag & 4)
        sp.ns = ns[4 * n : 4 * n + 4]
        sp.umbrellas, sp.bucketed = umbrella, spans
        out[key] = sp
    return out


def _intervals(lengths: memoryview, items: memoryview) -> list[array | None]:
    """Packed interval arrays from their columns (ValueError: lengths that do not add up to the items)."""
    counts, flat = array_of("q", lengths), array_of("q", items)
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
    )


def _requests_from(rec: RequestsRec) -> RequestsPart:
    out = RequestsPart()
    out.e2e, out.queue, out.ttft = array_of("d", rec.e2e), array_of("d", rec.queue), array_of("d", rec.ttft)
    out.prefill_s, out.decode_s, out.output_tokens = rec.prefill_s, rec.decode_s, rec.output_tokens
    out.busy = array_of("q", rec.busy)
    return out


def _crit_record(part: CritPart) -> CritRec:
    return CritRec(
        _column(part.node_ids, "Q"),
        _column(part.e_parent, "Q"),
        list(part.attrs),
        list(part.steps.items()),
        [raw(getattr(part, name), code) for name, code in _CRIT_ARRAYS],
    )


def _crit_from(rec: CritRec) -> CritPart:
    if len(rec.arrays) != len(_CRIT_ARRAYS):
        raise ValueError("critical-path columns that do not add up")
    out = CritPart()
    out.node_ids = _from_column(rec.node_ids, "Q")
    out.e_parent = _from_column(rec.e_parent, "Q")
    out.attrs = rec.attrs
    out.steps = {step: runs for step, runs in rec.steps}
    for (name, code), buffer in zip(_CRIT_ARRAYS, rec.arrays, strict=True):
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


def _gpu_from(rec: GpuRec) -> Any:
    starts, ends, index, steps = (
        array_of(c, b) for c, b in (("q", rec.starts), ("q", rec.ends), ("i", rec.index), ("q", rec.steps))
    )
    if not len(starts) == len(ends) == len(index) == len(steps) or any(not 0 <= i < len(rec.keys) for i in index):
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
    )


def part_from(rec: PartRec) -> ProcessPart:
    """The part ``rec`` records (ValueError: columns that do not add up)."""
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
    )


# ------------------------------------------------------------------------------------------- the memo


class MemoRec(msgspec.Struct, gc=False, tag=f"memo/{VERSION}"):
    """The critical path's memo whole (:mod:`~lens_rl.offline.run.memo_file`): the cache key it was made
    under, the tokens of the entries it was made from, its stretch keys, its per-step records and sums."""

    key: str
    tokens: dict[str, str | None]
    keys: list[list[Scalar]]
    records: list[list[Any]]
    sums: dict[int, list[int]] | None


class MemoDeltaRec(msgspec.Struct, gc=False, tag=f"memo-delta/{VERSION}"):
    """What one look added to the memo made from the tokens ``parent``."""

    parent: dict[str, str | None]
    tokens: dict[str, str | None]
    keys_from: int
    keys: list[list[Scalar]]
    records: list[list[Any]]
    dropped: list[tuple[str, str]]
    sums: dict[int, list[int]] | None
