"""The report's newer sections, typed (the async pipeline, GPU truth, profiler captures): parts of
:class:`lens_rl.offline.rollup.schema.GoodputReport`, which re-exports them; kept apart so each stays small."""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = [
    "GpuDeviceRow",
    "GpuFigures",
    "GpuGoodput",
    "GpuPhaseRow",
    "GpuRankRow",
    "GpuSection",
    "GpuStepRow",
    "GpuUser",
    "PhaseSummary",
    "Pipeline",
    "PipelinePool",
    "PipelineRank",
    "PipelineStep",
    "ProfileRow",
    "Staleness",
    "Verdict",
    "VerdictFigures",
    "VerdictWindow",
    "WeightSync",
]

#: a step: ``rl.step`` as recorded (an int; a string where a framework says so)
Step = Any


# ---- the async pipeline (lens_rl.offline.rollup.pipeline)


class PipelineRank(TypedDict):
    worker_group: str
    rank: int
    pid: int
    busy: float


class PipelinePool(TypedDict):
    pool: str  # rollout | trainer | other
    worker_groups: list[str]
    busy: float
    idle: float
    busy_s: float
    ranks: list[PipelineRank]


class WeightSync(TypedDict):
    count: int
    total_s: float
    pause_s: float | None
    pause_share: float | None


class Staleness(TypedDict):
    mean: float
    p90: float
    max: float
    beyond: float | None  # the share of trajectories older than their bound
    bound: float | list[float] | None  # the job's, else the phases' (a list where they differ)
    trajectories: int
    tokens: float


class VerdictFigures(TypedDict):
    trainer_idle: float | None
    rollout_idle: float | None
    sync_pause_share: float | None


class VerdictWindow(TypedDict):
    first_step: Step
    last_step: Step
    verdict: str | None  # rollout-bound | trainer-bound | sync-bound | balanced
    figures: VerdictFigures
    move: str


class Verdict(TypedDict):
    verdict: str | None
    figures: VerdictFigures
    move: str
    windows: list[VerdictWindow]


class PipelineStep(TypedDict):
    step: Step
    wall_s: float
    busy: dict[str, float]
    imbalance: float | None  # |idle(trainer) - idle(rollout)| of this step; None without both pools
    overlap: float
    bubble: float
    sync_s: float
    pause_s: float | None
    staleness_mean: float | None
    staleness_p90: float | None
    staleness_max: float | None
    staleness_beyond: float | None
    verdict: str | None  # the rule's name for this step alone (lens_rl.buckets.verdict_name)


class Pipeline(TypedDict):
    """The async pipeline (:mod:`lens_rl.offline.rollup.pipeline`): shares are of the steady-state wall."""

    wall_s: float
    steps: int
    pools: list[PipelinePool]
    imbalance: float | None
    overlap: float
    bubble: float
    weight_sync: WeightSync
    staleness: Staleness | None
    verdict: Verdict
    per_step: list[PipelineStep]


# ---- GPU truth (lens_rl.offline.rollup.gpu): present only where the run has GPU sample files


class GpuFigures(TypedDict):
    gpu_busy: float | None  # time-weighted utilisation, 0..1 (None: no reading: unavailable, never 0)
    gpu_idle_s: float | None
    gpu_measured_s: float
    gpu_idle_share: float | None
    mem_peak_bytes: int | None
    sm_active: float | None
    tensor_active: float | None


class GpuUser(TypedDict):
    worker_group: str
    rank: int
    pid: int


class GpuDeviceRow(GpuFigures):
    uuid: str
    host: str
    index: int
    name: str
    mem_total_bytes: int | None
    has: list[str]
    samples: int
    unavailable: bool
    processes: list[GpuUser]
    files: list[str]


class GpuPhaseRow(GpuFigures):
    worker_group: str
    phase: str
    bucket: str | None
    count: int
    total_s: float


class GpuStepRow(GpuFigures):
    step: Step


class GpuRankRow(GpuFigures):
    worker_group: str
    rank: int
    pid: int
    attempt: int
    devices: list[str]


class GpuGoodput(TypedDict):
    goodput: float | None
    busy_productive_s: float
    devices: int
    gpu_s: float


class GpuSection(TypedDict):
    devices: list[GpuDeviceRow]
    phases: list[GpuPhaseRow]
    steps: list[GpuStepRow]
    ranks: list[GpuRankRow]
    goodput: GpuGoodput


# ---------------------------------------------------------------------- profiler captures (issue 47)


class PhaseSummary(TypedDict):
    """One phase inside a ``torch`` capture's window."""

    phase: str
    wall_s: float
    cpu_op_s: float
    kernel_s: float | None  # None: the trace has no device kernels (a CPU-only capture)
    no_kernel_share: float | None


class ProfileRow(TypedDict):
    """One profiler capture (``lens-rl goodput --json`` ``profiles``): an ``rl.profile`` span and its file."""

    step: int | None
    worker_group: str
    rank: int
    pid: int
    backend: str  # torch | cuda | vllm
    reason: str  # config | request | auto: step N took X.Xx the median
    path: str | None  # relative to the run folder: profiles/<group>-<rank>-step<N>.<ext>
    exists: bool
    ended_by: str  # step end | max_bytes | shutdown
    wall_s: float
    summary: list[PhaseSummary] | None  # torch captures only
