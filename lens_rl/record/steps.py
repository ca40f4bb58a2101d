"""The last step's goodput, live on this process: what :func:`lens_rl.step_goodput` and
:func:`lens_rl.step_metrics` answer, kept by the engine when a step umbrella ends.

A step is a phase with its own ``rl.step`` and no bucket. Its bucketed phases' exclusive seconds are
summed as they close; when the umbrella closes, the time none of them covers is its unattributed time
and goodput = productive / wall, the offline rollup's rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lens_rl._runtime import RUNTIME, Handle
from lens_rl.buckets import (
    VERDICTS,
    Bucket,
    claimed,
    exclusive_time,
    family_of,
    is_weight_sync,
    staleness,
    subtracted,
    union_length,
    verdict_name,
)

__all__ = ["end_step", "step_goodput", "step_metrics"]


def end_step(node: Any, end_ns: int, wall_s: float, handle: Handle | None) -> None:
    """What ``step_goodput()`` answers after a step umbrella ends: its phases' seconds by bucket (all four)
    over the wall, the time none of them covers (the offline rollup's rule: the umbrella's own exclusive time),
    and goodput = productive / wall. Phases that ran at once (threads, async tasks) count once: where their
    exclusive seconds add up to more than they cover, each instant goes to one bucket, productive first
    (:func:`lens_rl.buckets.claimed`, the offline driver view's rule); the bucket-seconds metric of its phases
    is recorded here, the same way."""
    spans, node.step_spans = node.step_spans or [], None
    unattributed_ns = exclusive_time(node.start_ns, end_ns, node.inner)
    seconds = dict.fromkeys(_BUCKET_VALUES, 0.0)
    seconds.update(node.step_seconds or {})
    shares = None
    covered_s = (end_ns - node.start_ns - unattributed_ns) / 1e9
    if sum(seconds.values()) > covered_s + 1e-9 * max(len(spans), 1):  # (beyond the floats' rounding)
        totals, shares = claimed(_segments(spans))
        seconds = {value: ns / 1e9 for value, ns in zip(_BUCKET_VALUES, totals, strict=True)}
    metrics = handle.phase_metrics if handle is not None else None
    if metrics is not None:
        for n, (_, _, value, _, name, exclusive_s) in enumerate(spans):
            metrics.record_seconds(name, value, exclusive_s if shares is None else shares.get(n, 0.0) / 1e9)
    attempt = handle.resource.attributes.get("rl.attempt", 0) if handle is not None else 0
    pipeline: dict[str, Any] = _pipeline(spans, node.start_ns, end_ns)
    consumed, node.consumed = node.consumed, None
    if consumed:  # its training phases said what they consumed: the offline rollup's staleness, for this step
        bound = handle.resource.attributes.get("rl.max_staleness") if handle is not None else None
        stale = staleness(consumed, bound) or {}
        for key in ("mean", "p90", "max", "beyond"):
            if stale.get(key) is not None:
                pipeline[f"staleness_{key}"] = float(stale[key])
    RUNTIME.last_step = {
        "step": node.step,
        "attempt": attempt,
        "seconds": seconds,
        "unattributed_s": unattributed_ns / 1e9,
        "wall_s": wall_s,
        "goodput": seconds["productive"] / wall_s if wall_s > 0 else None,
        "pipeline": pipeline,
    }


def _pipeline(spans: list[tuple[Any, ...]], lo: int, hi: int) -> dict[str, Any]:
    """The step's pipeline figures within this process (its threads and tasks are its pools): busy of its
    generation-family (rollout) and training or logprob (trainer) productive phases, their overlap, the bubble
    where no productive phase runs (shares of the wall), weight-sync seconds and the pause (the part of them no
    generation ran beside), ``imbalance`` = |idle(trainer) - idle(rollout)| where both pools ran here, and the
    ``verdict`` (:func:`lens_rl.buckets.verdict_name`, the offline rollup's one rule: a name, or None): the
    offline pipeline's rules, on this process's spans. A process whose step runs neither pool's phases itself (a
    Ray driver whose pools are its workers) cannot see them: weight-sync seconds only (a bubble of 1 there would
    be a falsehood; ``lens-rl goodput`` has the figures across processes)."""
    wall = hi - lo
    gen, train, productive, sync = [], [], [], []
    for start, end, value, _, name, _ in spans:
        interval = (max(start, lo), min(end, hi))
        if interval[1] <= interval[0]:
            continue
        if value == "productive":
            productive.append(interval)
            kind = family_of(name)
            if kind == "generation":
                gen.append(interval)
            elif kind in ("training", "logprob"):
                train.append(interval)
        if is_weight_sync(name):
            sync.append(interval)
    g, t = union_length(gen), union_length(train)
    sync_ns = union_length(sync)
    if not gen and not train:
        return {"sync_s": sync_ns / 1e9}
    pause_ns = union_length(sync + gen) - g
    out: dict[str, Any] = {
        "busy_rollout": g / wall if wall > 0 else 0.0,
        "busy_trainer": t / wall if wall > 0 else 0.0,
        "overlap": (g + t - union_length(gen + train)) / wall if wall > 0 else 0.0,
        "bubble": (wall - union_length(productive)) / wall if wall > 0 else 0.0,
        "sync_s": sync_ns / 1e9,
        "pause_s": pause_ns / 1e9,
    }
    # (a pool is here when its phases ran in this step: the other's idle is unknown, as offline without its ranks)
    trainer_idle = 1 - out["busy_trainer"] if train else None
    rollout_idle = 1 - out["busy_rollout"] if gen else None
    if trainer_idle is not None and rollout_idle is not None:
        out["imbalance"] = abs(trainer_idle - rollout_idle)
    out["verdict"] = verdict_name(trainer_idle, rollout_idle, pause_ns / wall if wall > 0 else None)
    return out


def _segments(spans: list[tuple[Any, ...]]) -> Iterator[tuple[int, int, int, int]]:
    """The step's phases' exclusive stretches as ``(start, end, bucket rank, phase index)``."""
    for n, (start, end, value, inner, _, _) in enumerate(spans):
        rank = _RANK[value]
        for a, b in subtracted(start, end, inner) if inner else ((start, end),):
            yield a, b, rank, n


_BUCKET_VALUES = tuple(b.value for b in Bucket)
_RANK = {value: n for n, value in enumerate(_BUCKET_VALUES)}


def step_goodput() -> dict[str, Any] | None:
    """The last completed step's goodput on this process, or None.

    ``{"step", "attempt", "seconds": {bucket: s} (all four, zeros included), "unattributed_s", "wall_s",
    "goodput", "pipeline"}`` (``pipeline``: :func:`step_metrics`' ``pipeline/`` figures as a dict, with the
    verdict as its name: ``"verdict"``, one of :data:`lens_rl.buckets.VERDICTS` or None, where this process ran
    a pool's phases). A step is a phase with its own ``rl.step`` and no bucket (the umbrella of one training
    step); ``seconds`` are the exclusive seconds of the bucketed phases inside it, ``unattributed_s`` the
    time none of them covers, and goodput = productive / wall: computed live with the rules the offline
    rollup uses. A plain read; None while off or before the first step.

    Example::

        with lens_rl.traced_phase("step", step=step):
            ...
        print(lens_rl.step_goodput()["goodput"])
    """
    last = RUNTIME.last_step
    return None if last is None else {**last, "seconds": dict(last["seconds"])}


def step_metrics(prefix: str = "goodput/") -> dict[str, float]:
    """:func:`step_goodput` as flat floats, keys under ``prefix``: what ``wandb.log``,
    ``SummaryWriter.add_scalar`` and ``mlflow.log_metrics`` take. Empty before the first step (or off).

    Keys: ``step``, ``attempt``, ``goodput`` (absent for a zero-length step), ``wall_s``,
    ``unattributed_s``, ``productive_s``, ``overhead_s``, ``idle_s``, ``wasted_s``, and the step's pipeline
    figures on this process: ``pipeline/busy_rollout``, ``pipeline/busy_trainer``, ``pipeline/overlap``,
    ``pipeline/bubble`` (shares of the wall), ``pipeline/sync_s``, ``pipeline/pause_s`` (``sync_s`` only in a
    process whose step runs no generation or training phase itself: its pools are elsewhere);
    ``pipeline/imbalance`` (|idle(trainer) - idle(rollout)|, where both pools ran in this process); the step's
    verdict (:func:`lens_rl.buckets.verdict_name`, the offline rollup's rule) as four 0/1 floats, one 1 where it
    has one: ``pipeline/verdict/rollout-bound``, ``pipeline/verdict/trainer-bound``,
    ``pipeline/verdict/sync-bound``, ``pipeline/verdict/balanced`` (none of them without a verdict); where the step's
    phases said what they consumed (``trajectory_versions=``), its staleness by the offline rollup's rule
    (:func:`lens_rl.buckets.staleness`): ``pipeline/staleness_mean``, ``pipeline/staleness_p90``,
    ``pipeline/staleness_max`` and, where a bound is set (the phase's or the job's ``rl.max_staleness``),
    ``pipeline/staleness_beyond`` (the share of trajectories past it).

    Example::

        wandb.log({"loss": loss, **lens_rl.step_metrics()}, step=step)
        for key, value in lens_rl.step_metrics().items():
            writer.add_scalar(key, value, step)               # TensorBoard
        mlflow.log_metrics(lens_rl.step_metrics(prefix="goodput."), step=step)
    """
    last = RUNTIME.last_step
    if last is None:
        return {}
    out = {
        f"{prefix}step": float(last["step"]) if isinstance(last["step"], (int, float)) else float("nan"),
        f"{prefix}attempt": float(last["attempt"]),
    }
    if last["goodput"] is not None:
        out[f"{prefix}goodput"] = float(last["goodput"])
    out[f"{prefix}wall_s"] = float(last["wall_s"])
    out[f"{prefix}unattributed_s"] = float(last["unattributed_s"])
    for bucket, seconds in last["seconds"].items():
        out[f"{prefix}{bucket}_s"] = float(seconds)
    for key, value in (last.get("pipeline") or {}).items():
        if key != "verdict":
            out[f"{prefix}pipeline/{key}"] = float(value)
        elif value is not None:  # (dashboards take floats: the name as one 1 among its four)
            for name in VERDICTS:
                out[f"{prefix}pipeline/verdict/{name}"] = 1.0 if name == value else 0.0
    return out
