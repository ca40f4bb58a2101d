"""The declared schema of a read's parts in the refresh cache: one record per part
(:class:`PartRec`, a :class:`~lens_rl.offline.read.parts.ProcessPart` field by field) and one per what it
holds (steps as columns, phases, compute, requests, the pipeline, GPU spans, critical-path walks).
:mod:`~lens_rl.offline.run.part_records` converts between the parts and these; a new figure of a part is a
field here and a line there.

Example::

    rec = decode(data, PartRec)  # msgspec.DecodeError: not a part of this schema
"""

from __future__ import annotations

from typing import Any

from lens_rl.offline.run.record_codec import Column, Id, Num, Raw, Rec, Scalar

__all__ = [
    "CRIT_ARRAYS",
    "ComputeRec",
    "CritRec",
    "GpuRec",
    "PartRec",
    "PhaseRec",
    "PhaseStepsRec",
    "PipeRec",
    "RequestsRec",
    "StepsRec",
]


class StepsRec(Rec):
    """A part's steps (:class:`~lens_rl.offline.read.steps.StepPart`) as columns: per step its key, four
    bucket ns, flags (4 incomplete, 2 no lo, 1 no hi), lo and hi, and its umbrellas' and bucketed spans'
    packed intervals (lengths, -1 for none; items); the failed steps' errors by their index."""

    keys: Column
    ns: Raw
    flags: bytes
    lows: Raw
    highs: Raw
    umbrella_lengths: Raw
    umbrellas: Raw
    bucketed_lengths: Raw
    bucketed: Raw
    errors: dict[int, dict[str, str]]


class PhaseRec(Rec):
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


class ComputeRec(Rec):
    """One phase's compute ns by step: a :class:`~lens_rl.offline.read.steps.Series` (two int64 arrays), or
    (steps of other types) its items."""

    name: Scalar
    steps: Raw | None
    ns: Raw | None
    items: list[tuple[Scalar, int]]


class PhaseStepsRec(Rec):
    """One (phase, bucket)'s :class:`~lens_rl.offline.read.phase_steps.PhaseSteps`: int64 columns of its
    steps, counts, total, exclusive, token and unbucketed leaves' ns, float64 columns of its tokens, FLOPs and tokens with FLOPs
    given, and its spans' durations (int64, in step order)."""

    name: Scalar
    bucket: Scalar
    steps: Raw
    count: Raw
    total: Raw
    excl: Raw
    token_ns: Raw
    leaf: Raw
    tokens: Raw
    flops: Raw
    flops_tokens: Raw
    durations: Raw


class RequestsRec(Rec):
    """A process's :class:`~lens_rl.offline.read.parts.RequestsPart`."""

    e2e: Raw
    queue: Raw
    ttft: Raw
    prefill_s: Num
    decode_s: Num
    output_tokens: Num
    busy: Raw
    skipped: int = 0


class PipeRec(Rec):
    """A process's share of the async-pipeline figures (:class:`~lens_rl.offline.read.pipe.PipePart`): its
    productive spans' union (packed), its weight syncs (start, end, step) and consumed versions (step, policy
    version, trajectory versions, trajectory tokens, max staleness, trajectory counts: attribute values as
    written; the phase's end, ns)."""

    productive: Raw
    syncs: list[tuple[int, int, Scalar]]
    consumed: list[tuple[Scalar, Any, Any, Any, Any, Any, int]]


class GpuRec(Rec):
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
CRIT_ARRAYS = (
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


class CritRec(Rec):
    """A process's critical-path walks (:class:`~lens_rl.offline.read.critical.CritPart`)."""

    node_ids: Column
    e_parent: Column
    attrs: list[tuple[Scalar, Scalar]]
    steps: list[tuple[Scalar, list[tuple[int, int, int]]]]
    arrays: list[Raw]  # in CRIT_ARRAYS' order


class PartRec(Rec):
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
    sample_rate: float = 1.0
    phase_steps: list[PhaseStepsRec] = []
    relays: list[tuple[Id, Id]] = []
