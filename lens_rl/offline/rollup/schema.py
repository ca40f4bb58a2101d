"""The report's types: ``lens_rl.goodput/1`` (``lens-rl goodput --json``) as ``TypedDict``s, so mypy checks
every reader of the report outside ``rollup/`` (the table, the HTML report, watch, the demo) against what
:func:`lens_rl.offline.rollup.goodput.report_from_parts` builds. Extended compatibly: a field is added,
never renamed or removed (SPEC, "Stable outputs").

Seconds are rounded to the microsecond; a ratio with no wall to divide by is None; ``seconds`` maps every
bucket (:data:`BUCKETS`, in the report's order) to its seconds.
"""

from __future__ import annotations

from typing import Any, TypedDict

from lens_rl.offline.read.parts import BUCKETS

__all__ = [
    "BUCKETS",
    "AttemptRow",
    "CriticalPath",
    "CriticalPhase",
    "CriticalStep",
    "CriticalTop",
    "Degrading",
    "GoodputReport",
    "GroupRow",
    "JobRow",
    "Persistent",
    "PhaseRow",
    "RankRow",
    "RequestsRow",
    "SlowStep",
    "StepRow",
    "StepTime",
    "StragglerStep",
    "Stragglers",
    "Throughput",
    "UnbucketedRow",
    "WarningRow",
    "WastedReasons",
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
    share_of: str  # "job wall" | "group lifetime"
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


class GoodputReport(TypedDict):
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
    sampled: bool
    concurrent: bool
    runs: list[str]
    notes: list[str]
    spans: int
    files: int | None
    skipped_lines: int
