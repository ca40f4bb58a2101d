"""The report's types: ``lens_rl.goodput/1`` (``lens-rl goodput --json``) as ``TypedDict``s, so mypy checks
every reader of the report outside ``rollup/`` (the table, the HTML report, watch, the demo) against what
:func:`lens_rl.offline.rollup.goodput.report_from_parts` builds. Extended compatibly: a field is added,
never renamed or removed (SPEC, "Stable outputs").

Seconds are rounded to the microsecond; a ratio with no wall to divide by is None; ``seconds`` maps every
bucket (:data:`BUCKETS`, in the report's order) to its seconds.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, TypedDict

from lens_rl.offline.read.parts import BUCKETS
from lens_rl.offline.rollup.sections import (
    GpuSection,
    PhaseSummary,
    Pipeline,
    ProfileRow,
)

__all__ = [
    "BUCKETS",
    "AttemptRow",
    "CriticalPath",
    "CriticalPhase",
    "CriticalStep",
    "CriticalTop",
    "Degrading",
    "GoodputReport",
    "GpuSection",
    "GoodputWithProfiles",
    "GroupRow",
    "JobRow",
    "Persistent",
    "PhaseRow",
    "PhaseSummary",
    "Pipeline",
    "ProfileRow",
    "RankRow",
    "RequestsRow",
    "Selection",
    "SlowStep",
    "StepRow",
    "StepTime",
    "StragglerStep",
    "Stragglers",
    "Throughput",
    "UnbucketedRow",
    "WarningRow",
    "WastedReasons",
    "mismatches",
]

#: a step: ``rl.step`` as recorded (an int; a string where a framework says so)
Step = Any


class WastedReasons(TypedDict):
    rerun: float
    restart: float
    phases: float


class JobRow(TypedDict):
    view: str  # "driver" | "all processes"
    seconds: dict[str, float]
    wall_s: float | None
    unattributed_s: float | None
    goodput: float | None
    wasted_reasons: WastedReasons
    restarts: int


class _AttemptRow(TypedDict):
    attempt: int
    start_s: float | None
    wall_s: float
    first_step: int | None
    last_step: int | None
    resumed_from_step: int | None
    rerun_steps: list[Step]
    rerun_s: float
    downtime_before_s: float
    ended: str
    goodput: float | None


class AttemptRow(_AttemptRow, total=False):
    error: dict[str, str]


class _StepRow(TypedDict):
    step: Step
    attempt: int
    seconds: dict[str, float]
    wall_s: float
    unattributed_s: float
    goodput: float | None
    incomplete: bool


class StepRow(_StepRow, total=False):
    error: dict[str, str]
    tokens: float | None
    e2e_tokens_per_s_per_gpu: float | None


class StepTime(TypedDict):
    p50_s: float | None
    p95_s: float | None
    max_s: float | None


class SlowStep(TypedDict):
    step: Step
    wall_s: float


class PhaseRow(TypedDict):
    phase: str
    worker_group: str
    bucket: str | None
    count: int
    total_s: float  # inclusive
    exclusive_s: float
    mean_s: float | None
    p95_s: float | None
    share: float | None  # of exclusive_s
    share_of: str  # "job wall" | "group lifetime"; with --steps A-B: "steps wall" | "group steps wall"
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None


class UnbucketedRow(TypedDict):
    phase: str
    worker_group: str
    total_s: float
    share: float
    did_you_mean: str | None


class _WarningRow(TypedDict):
    kind: str  # "step_inside_phase" | "unattributed"
    message: str


class WarningRow(_WarningRow, total=False):
    # step_inside_phase
    phase: str
    bucket: str | None
    steps: int
    # unattributed (and where most of it falls, when a gap is known)
    share: float
    unattributed_s: float
    between: list[str]
    rank: int
    pid: int
    gap_s: float
    gap_share: float | None
    # both
    worker_group: str
    # gpu_idle_in_productive, gpu_idle_gap, gpu_unavailable (lens_rl.offline.rollup.gpu_warnings)
    gpu_idle_s: float
    gaps: int
    longest_s: float
    first_at_s: float
    uuid: str
    host: str
    processes: int
    unread_s: float  # gpu_unavailable of a device read only part of its processes' time (and its share)
    # pool_unknown (lens_rl.offline.rollup.pools): an rl.pool value that names no pool, the role read instead
    value: str
    role: str


class GroupRow(TypedDict):
    worker_group: str
    processes: int
    seconds: dict[str, float]
    goodput: float | None
    wall_s: float


class RankRow(TypedDict):
    worker_group: str
    rank: int
    pid: int
    attempt: int
    seconds: dict[str, float]
    goodput: float | None
    wall_s: float


class StragglerStep(TypedDict):
    step: Step
    worker_group: str
    rank: int
    phase: str
    over_median: float


class Persistent(TypedDict):
    worker_group: str
    rank: int
    steps_flagged: int
    of_steps: int


class Degrading(TypedDict):
    worker_group: str
    rank: int
    phase: str
    score: float
    best_s: float
    latest_s: float
    window: int


class Stragglers(TypedDict):
    per_step: list[StragglerStep]
    persistent: list[Persistent]
    degrading: list[Degrading]


class CriticalPhase(TypedDict):
    worker_group: str
    phase: str
    bucket: str | None
    critical_s: float
    critical_share: float | None
    exposed_share: float | None


class CriticalTop(TypedDict):
    worker_group: str
    rank: int
    phase: str
    seconds: float


class CriticalStep(TypedDict):
    step: Step
    critical_s: float
    by_group: dict[str, float]
    by_phase: dict[str, float]
    top: CriticalTop | None


class CriticalPath(TypedDict):
    phases: list[CriticalPhase]
    steps: list[CriticalStep]


class Throughput(TypedDict):
    gpus: int
    tokens: float | None
    e2e_tokens_per_s_per_gpu: float | None


class RequestsRow(TypedDict):
    worker_group: str
    requests: int
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    queue_share: float | None
    queue_p95_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    prefill_s: float
    decode_s: float
    output_tokens: float
    busy_s: float
    output_tokens_per_s: float | None
    skipped_values: int


class _GoodputReport(TypedDict):
    schema: str  # "lens_rl.goodput/1"
    goodput: float | None
    steady_state_goodput: float | None
    warmup_steps: int
    job: JobRow
    attempts: list[AttemptRow]
    steps: list[StepRow]
    step_range: list[int] | None
    step_time: StepTime
    slowest_steps: list[SlowStep]
    phases: list[PhaseRow]
    unbucketed_phases: list[UnbucketedRow]
    warnings: list[WarningRow]
    broken_cycles: int
    worker_groups: list[GroupRow]
    ranks: list[RankRow]
    stragglers: Stragglers
    critical_path: CriticalPath
    throughput: Throughput
    requests: list[RequestsRow]
    pipeline: Pipeline | None
    sampled: bool
    concurrent: bool
    runs: list[str]
    notes: list[str]
    spans: int
    files: int | None
    skipped_lines: int


class Selection(TypedDict):
    """``--steps A-B``'s figures (lens_rl.offline.rollup.selected): what ``goodput`` then is; ``job_wide``
    names the parts that still cover the whole job."""

    steps: list[int]
    complete_steps: int
    seconds: dict[str, float]
    wall_s: float
    unattributed_s: float
    goodput: float | None
    job_wide: list[str]


class GoodputReport(_GoodputReport, total=False):
    gpu: GpuSection
    selection: Selection  # (only with --steps A-B)


def mismatches(value: Any, hint: Any = GoodputReport, where: str = "report", most: int = 5) -> list[str]:
    """Where ``value`` is not the report its types describe (at most ``most`` places): a key its TypedDict
    does not name or a required one missing, a container of the wrong kind, a scalar of the wrong type (an int
    is a float; ``Any`` is anything). How a report read back from somewhere untrusted (the refresh cache) is
    checked before any reader relies on its shape."""
    out: list[str] = []
    _walk(value, hint, where, out, most)
    return out


_SCALARS: dict[Any, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def _walk(value: Any, hint: Any, where: str, out: list[str], most: int) -> None:
    if len(out) >= most or hint is Any:
        return
    if typing.is_typeddict(hint):
        if type(value) is not dict:
            out.append(f"{where}: {type(value).__name__}, not an object")
            return
        hints = _hints(hint)
        out.extend(f"{where}.{k}: not in {hint.__name__}" for k in sorted(set(value) - set(hints), key=str))
        out.extend(f"{where}.{k}: missing" for k in sorted(hint.__required_keys__ - set(value)))
        del out[most:]
        for key in set(value) & set(hints):
            _walk(value[key], hints[key], f"{where}.{key}", out, most)
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:
            _walk(value, kinds[0], where, out, most)
        return
    if origin is list:
        if type(value) is not list:
            out.append(f"{where}: {type(value).__name__}, not a list")
            return
        for i, item in enumerate(value):
            _walk(item, args[0] if args else Any, f"{where}[{i}]", out, most)
            if len(out) >= most:
                return
        return
    if origin is dict:
        if type(value) is not dict:
            out.append(f"{where}: {type(value).__name__}, not an object")
            return
        for key, item in value.items():
            _walk(item, args[1] if len(args) == 2 else Any, f"{where}.{key}", out, most)
        return
    scalar = _SCALARS.get(hint)
    if scalar is not None and type(value) not in scalar:
        out.append(f"{where}: {type(value).__name__}, not {hint.__name__}")


@functools.cache
def _hints(typed_dict: Any) -> dict[str, Any]:
    return typing.get_type_hints(typed_dict)


class GoodputWithProfiles(GoodputReport, total=False):
    """What ``lens-rl goodput --json`` prints: the report and, where the run has captures, ``profiles``."""

    profiles: list[ProfileRow]
