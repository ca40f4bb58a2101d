"""Goodput rollup: exclusive bucket time per job, step, phase, worker group and rank; stragglers.

Goodput = productive seconds / wall-clock seconds of the view.

* **Exclusive time.** Within one process, a bucketed span's time is its duration minus the union of its
  nearest bucketed descendants, clipped to it (:func:`lens_rl.buckets.exclusive_time`, the rule the live
  metric uses too).
* **Views.** ``goodput`` is the job's wall-clock view: the driver's own spans (the loop as it waited on
  workers), start-up included, over its wall (``rl.job``, else its first to last span); time no bucketed
  span covers is unattributed, never productive. With no driver spans, all processes are summed.
  ``steady_state_goodput`` covers the complete steps only, skipping the job's first ``warmup_steps`` (by step
  number, whatever ``steps`` selects: a selection past them keeps all its steps). Worker
  groups and ranks get a resource-seconds view: a worker's lifetime not covered by a bucketed span is idle.
* **Steps.** A span belongs to the step of its own ``rl.step`` (a carried step is recorded as its own),
  else its nearest ancestor's. A step's wall is its umbrellas' (unbucketed spans carrying ``rl.step``),
  else first start to last end; one whose umbrella never ended is incomplete, out of the step figures; so is
  a failed one (an exception ended its umbrella: status ERROR), with its ``error`` and a note.
* **Sampling.** With ``sample_rate`` < 1 the seconds are the kept phases'; the job's ``goodput`` estimates the
  unsampled figure: each process's kept productive time over its ``sample_rate`` (every top-level phase is
  kept with that probability, its subtree with it) over the wall, which ``rl.job`` measures in full
  (:mod:`lens_rl.offline.rollup.sampled`: unbiased, clipped at 1). Step figures are ratios within kept steps.
* **Streaming.** Each process is reduced to a compact part as soon as its spans are read
  (:mod:`lens_rl.offline.read.reduce`); parts merge exactly, so files can be read one at a time, in parallel,
  or on a Ray cluster, with identical results.

* **Attempts.** A run's attempts (``rl.attempt``) are one job (:mod:`lens_rl.offline.rollup.attempts`): steps a
  later attempt ran again are wasted (reason ``rerun``) on every process, the downtime between attempts
  wasted (reason ``restart``); the job's wall runs from the first start to the last end; the steady state
  skips each attempt's first ``warmup_steps``; every other figure uses each step's final run.

JSON schema (``lens-rl goodput --json``), ``"schema": "lens_rl.goodput/1"`` (extended compatibly):
``goodput``, ``steady_state_goodput``, ``warmup_steps``, ``job`` {``view``, ``seconds``, ``wall_s``,
``unattributed_s``, ``goodput``, ``wasted_reasons`` {``rerun``, ``restart``, ``phases``}, ``restarts``},
``attempts`` [{``attempt``, ``start_s``, ``wall_s``, ``first_step``, ``last_step``, ``resumed_from_step``,
``rerun_steps``, ``rerun_s``, ``downtime_before_s``, ``ended``, ``error``, ``goodput``}], ``steps``
[{``step``, ``attempt``, ``seconds``, ``wall_s``, ``unattributed_s``, ``goodput``, ``incomplete``, ``error``
(a failed step's {``type``, ``message``})}],
``step_range``, ``step_time`` {``p50_s``, ``p95_s``, ``max_s``},
``slowest_steps`` [{``step``, ``wall_s``}], ``phases`` [{``phase``, ``worker_group``, ``bucket``,
``count``, ``total_s``, ``exclusive_s``, ``mean_s``, ``p95_s``, ``share`` (of ``exclusive_s``), ``share_of``,
``tokens_per_s``}], ``unbucketed_phases`` [{``phase``, ``worker_group``, ``total_s``, ``share``,
``did_you_mean``}], ``warnings`` [{``kind`` (``step_inside_phase`` | ``unattributed``), ``message``, and per
kind: ``phase``, ``bucket``, ``worker_group``, ``steps`` | ``share``, ``unattributed_s``, ``between``,
``worker_group``, ``rank``, ``pid``, ``gap_s``, ``gap_share``}], ``broken_cycles``,
``worker_groups`` [{``worker_group``, ``processes``, ``seconds``, ``goodput``, ``wall_s``}], ``ranks``
[{``worker_group``, ``rank``, ``pid``, ``attempt``, ``seconds``, ``goodput``, ``wall_s``}], ``stragglers``
{``per_step``, ``persistent``, ``degrading``}, ``critical_path`` {``phases``, ``steps``}, ``throughput``
{``gpus``, ``tokens``, ``e2e_tokens_per_s_per_gpu``}, ``requests`` [{``worker_group``, ``requests``, ``e2e_p50_s``,
``e2e_p95_s``, ``queue_share``, ``queue_p95_s``, ``ttft_p50_s``, ``ttft_p95_s``, ``prefill_s``, ``decode_s``,
``output_tokens``, ``busy_s``, ``output_tokens_per_s``, ``skipped_values``}] (vLLM's request spans, :mod:`lens_rl.offline.rollup.requests`),
``pipeline`` {``pools``, ``imbalance``, ``overlap``, ``bubble``, ``weight_sync``, ``staleness``, ``verdict``,
``per_step``} or None (:mod:`lens_rl.offline.rollup.pipeline`), ``sampled``, ``concurrent``, ``runs``, ``notes``,
``spans``, ``files``, ``skipped_lines``; with ``steps`` (A, B), ``selection`` (:mod:`~lens_rl.offline.rollup.selected`:
``goodput`` and the phase, group and rank rows then cover those steps). Phase rows also carry ``tokens_per_s_per_gpu`` and ``mfu``, step rows
``tokens`` and ``e2e_tokens_per_s_per_gpu`` (docs/optimise.md).

The passes over the files that feed it are :mod:`lens_rl.offline.run.analyze`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from lens_rl.buckets import goodput_of
from lens_rl.offline.read.intervals import covered, merge_intervals
from lens_rl.offline.read.parts import BUCKETS, ProcessPart, merge_parts
from lens_rl.offline.rollup.attempts import Attempts, attempts_of
from lens_rl.offline.rollup.critical import Memo, critical_path
from lens_rl.offline.rollup.pipe_memo import PipeMemo
from lens_rl.offline.rollup.pipeline import pipeline_row
from lens_rl.offline.rollup.pools import pool_warnings
from lens_rl.offline.rollup.requests import requests_rows
from lens_rl.offline.rollup.rows import (
    UNBUCKETED_SHARE,
    group_and_rank_rows,
    phase_rows,
    throughput_row,
    unbucketed_rows,
    warning_rows,
)
from lens_rl.offline.rollup.sampled import estimated_goodput
from lens_rl.offline.rollup.schema import (
    AttemptRow,
    CriticalPath,
    GoodputReport,
    GroupRow,
    JobRow,
    PhaseRow,
    Pipeline,
    RankRow,
    RequestsRow,
    Selection,
    StepRow,
    Stragglers,
    Throughput,
    UnbucketedRow,
    WarningRow,
)
from lens_rl.offline.rollup.selected import (
    cut_phases,
    incomplete_steps,
    selected_window,
    selection_row,
    steps_group_and_rank_rows,
)
from lens_rl.offline.rollup.steps import steady_goodput, step_rows, step_times, warmup_of
from lens_rl.offline.rollup.stragglers import stragglers
from lens_rl.offline.rollup.throughput import with_remote_tokens

__all__ = ["SCHEMA", "UNBUCKETED_SHARE", "report_from_parts"]

SCHEMA = "lens_rl.goodput/1"


def _seconds(ns: Mapping[str, float]) -> dict[str, float]:
    return {b: round(ns.get(b, 0) / 1e9, 6) for b in BUCKETS}


def _of_wall(productive_ns: float, wall_ns: float | None) -> float | None:
    """productive / wall (None without a wall): time no bucketed span covers is never productive."""
    return productive_ns / wall_ns if wall_ns else None


def report_from_parts(
    parts: Iterable[ProcessPart],
    *,
    warmup_steps: int = 1,
    steps: tuple[int, int] | None = None,
    files: int | None = None,
    skipped_lines: int = 0,
    notes: Sequence[str] = (),
    memo: Memo | None = None,
    cut_links: Callable[[Sequence[ProcessPart]], Any] | None = None,
    pipe_memo: PipeMemo | None = None,
    selected: dict[str, Any] | None = None,
) -> GoodputReport:
    """The goodput report (the module docstring's schema, typed in :mod:`~lens_rl.offline.rollup.schema`)
    from process parts; ``steps`` (A, B) selects steps; ``memo``: the critical path's per-step results of an
    earlier look (:class:`~lens_rl.offline.rollup.critical.Memo`), ``pipe_memo`` the pipeline's coverage of
    each step (:class:`~lens_rl.offline.rollup.pipe_memo.PipeMemo`); ``cut_links``: the tree rule over the links
    between the merged processes (:func:`lens_rl.offline.read.crosslinks.cross_cut`; its ``cycles`` are counted
    in ``broken_cycles``, its cut links not walked by the critical path); ``selected``: with ``steps``, filled
    with the selected complete steps and their walls (:func:`~lens_rl.offline.rollup.selected.selected_window`:
    what the GPU section is joined over)."""
    processes = merge_parts(parts)
    driver = [p for p in processes if p.is_driver]
    view = driver or processes
    attempts = attempts_of(processes, view, bool(driver))
    job = _job_row(view, bool(driver), attempts)
    if len(attempts.rows) == 1:  # one attempt: its row is the job's (the same wall, the same goodput)
        attempts.rows[0].update(wall_s=job["wall_s"], goodput=job["goodput"])
    rows, walls_ns, productive_ns = step_rows(view, steps)
    runs = sorted(set().union(*(p.runs for p in processes))) if processes else []
    groups, ranks, concurrent = group_and_rank_rows(processes)
    run_steps = [s for p in view for s in p.steps if type(s) is int]
    tokened = with_remote_tokens(processes)  # (a vLLM process's requests give tokens to their phases)
    cut = None if cut_links is None else cut_links(processes)  # (parent cycles through several processes)
    cross_cycles = 0 if cut is None else int(cut.cycles)
    throughput = throughput_row(tokened, rows, walls_ns)  # (adds to the step rows)
    phases = phase_rows(tokened, job["wall_s"] if driver else None)
    selection = None
    within: list[ProcessPart] = []
    if steps is not None:  # (--steps A-B: the figures over those steps, lens_rl.offline.rollup.selected)
        selection, within, phases, groups, ranks = _over_steps(
            tokened, view, rows, walls_ns, productive_ns, steps, selected
        )
    report: GoodputReport = {
        "schema": SCHEMA,
        "goodput": job["goodput"] if selection is None else selection["goodput"],
        "steady_state_goodput": steady_goodput(rows, walls_ns, productive_ns, warmup_of(view, warmup_steps)),
        "warmup_steps": warmup_steps,
        "job": cast(JobRow, job),
        "attempts": cast("list[AttemptRow]", attempts.rows),
        "steps": cast("list[StepRow]", rows),
        "step_range": [min(run_steps), max(run_steps)] if run_steps else None,
        **step_times(rows),  # type: ignore[typeddict-item]
        "phases": cast("list[PhaseRow]", phases),
        "unbucketed_phases": _unbucketed(processes, within, rows, walls_ns, selection),
        "warnings": cast("list[WarningRow]", warning_rows(view, rows, steps is not None) + pool_warnings(processes)),
        "broken_cycles": sum(p.cycles for p in processes) + cross_cycles,
        "worker_groups": cast("list[GroupRow]", groups),
        "ranks": cast("list[RankRow]", ranks),
        "stragglers": cast(Stragglers, stragglers(processes, steps)),
        "critical_path": cast(
            CriticalPath, critical_path(processes, rows, memo, cut, None if selection is None else within)
        ),
        "throughput": cast(Throughput, throughput),
        "requests": cast("list[RequestsRow]", requests_rows(processes)),
        "pipeline": cast("Pipeline | None", pipeline_row(processes, view, rows, warmup_steps, steps, pipe_memo)),
        "sampled": any(p.sampled for p in processes),
        "concurrent": concurrent,
        "runs": runs,
        "notes": _notes(notes, driver, rows, runs, attempts, sum(p.cycles for p in processes) + cross_cycles),
        "spans": sum(p.spans for p in processes),
        "files": files,
        "skipped_lines": skipped_lines,
    }
    if selection is not None:
        report["selection"] = cast(Selection, selection)
    return report


class _OverSteps(NamedTuple):
    """The figures over ``--steps A-B``: the selection row, the phases cut to those steps, their rows."""

    selection: dict[str, Any]
    within: list[ProcessPart]
    phases: list[dict[str, Any]]
    groups: Any
    ranks: Any


def _over_steps(
    tokened: list[ProcessPart],
    view: list[ProcessPart],
    rows: list[dict[str, Any]],
    walls_ns: Any,
    productive_ns: Any,
    steps: tuple[int, int],
    selected: dict[str, Any] | None,
) -> _OverSteps:
    """The figures over the steps ``steps`` selects (:mod:`lens_rl.offline.rollup.selected`); ``selected``
    filled with the selected complete steps and their walls."""
    selection = selection_row(rows, walls_ns, productive_ns, steps)
    skip = incomplete_steps(rows)
    within = cut_phases(tokened, steps, skip)
    phases = phase_rows(within, selection["wall_s"], selection["wall_s"])
    groups, ranks = steps_group_and_rank_rows(within, int(round(selection["wall_s"] * 1e9)), steps, skip)
    if selected is not None:
        selected.update(selected_window(view, rows, steps))
    return _OverSteps(selection, within, phases, groups, ranks)


def _unbucketed(
    processes: list[ProcessPart],
    within: list[ProcessPart],
    rows: list[dict[str, Any]],
    walls_ns: Any,
    selection: dict[str, Any] | None,
) -> list[UnbucketedRow]:
    """The unbucketed phases over the complete steps' walls, or over the selected steps' wall (``--steps``)."""
    if selection is None:
        wall_s = sum(walls_ns[i] for i, r in enumerate(rows) if not r["incomplete"]) / 1e9
        return cast("list[UnbucketedRow]", unbucketed_rows(processes, wall_s))
    return cast("list[UnbucketedRow]", unbucketed_rows(within, selection["wall_s"]))


def _notes(
    given: Sequence[str],
    driver: list[ProcessPart],
    step_rows: list[dict[str, Any]],
    runs: list[str],
    attempts: Attempts,
    cycles: int = 0,
) -> list[str]:
    """What a reader should be told about the store: the readers' notes, then the rollup's own."""
    notes = list(given)
    if cycles:
        notes.append(
            f"{cycles} parent cycle(s) broken (a span its own parent or ancestor): each cycle's first span in "
            "its file was read as having no parent"
        )
    if attempts.overlapping:
        notes.append(
            "attempts overlap (a later attempt started while an earlier one's processes were still writing): "
            "no downtime is counted between them"
        )
    if driver and not any(p.jobs for p in driver):
        notes.append(
            "no rl.job span (the driver was killed, or has not shut down yet): the job's wall runs from "
            "the driver's first span to its last"
        )
    failed = [r for r in step_rows if r.get("error")]
    for row in failed[:5]:
        error = row["error"]
        notes.append(
            f"step {row['step']} failed ({error['type'] or 'an error'}: {error['message'][:200]}): its umbrella "
            "ended in error; left out of the step figures"
        )
    if len(failed) > 5:
        notes.append(f"{len(failed) - 5} more failed step(s): left out of the step figures")
    incomplete = [r["step"] for r in step_rows if r["incomplete"] and not r.get("error")]
    if incomplete:
        notes.append(
            f"{len(incomplete)} incomplete step(s) ({', '.join(map(str, incomplete[:5]))}"
            f"{', ...' if len(incomplete) > 5 else ''}): their umbrella never ended; left out of the step "
            "figures"
        )
    if len(runs) > 1:
        notes.append(
            f"spans of {len(runs)} runs in one folder ({', '.join(runs)}): their figures are mixed; "
            "keep one run per folder (trace_dir/<run_id>/)"
        )
    return notes


def _job_row(view: list[ProcessPart], is_driver: bool, attempts: Attempts) -> dict[str, Any]:
    """The job's figures. The driver's view: its exclusive bucket time over the wall (one attempt: its
    ``rl.job``, else its first to last span, from the first start of any of its processes; several: the first
    start to the last end over all of them),
    what no bucketed span covers unattributed. Without a driver, every process is summed as
    resource-seconds: lifetimes, a worker's uncovered lifetime idle. Re-runs and the downtime between
    attempts are wasted, and said so in ``wasted_reasons``."""
    rerun = sum(p.rerun_ns for p in view)
    restart = attempts.restart_ns
    if is_driver:
        ns = {b: sum(p.bucket_ns[b] for p in view) for b in BUCKETS}
        ns["wasted"] += rerun + restart
        if attempts.several and attempts.start_ns is not None and attempts.end_ns is not None:
            windows = [(attempts.start_ns, attempts.end_ns)]
        else:
            windows = merge_intervals(j for p in view for j in p.jobs) or merge_intervals(
                p.lifetime for p in view if p.lifetime is not None
            )
            if windows and attempts.start_ns is not None and attempts.start_ns < windows[0][0]:
                # the first start: a process of the job before its root (a launch of the same attempt that
                # failed before its loop, then run again)
                windows = merge_intervals([(attempts.start_ns, windows[0][0]), *windows])
        wall = sum(hi - lo for lo, hi in windows) if windows else None
        coverage = [array for p in view for array in p.coverage]
        unattributed = None if wall is None else max(wall - covered(coverage, windows) - restart, 0)
        seconds = _seconds(ns)
        ratio = estimated_goodput(view, _of_wall(ns["productive"], wall), wall)
        phases_wasted = ns["wasted"] - rerun - restart
    else:
        per = [p.seconds() for p in view]
        summed = {b: sum(s[b] for s in per) for b in BUCKETS}
        summed["wasted"] += restart / 1e9
        seconds = {b: round(value, 6) for b, value in summed.items()}
        wall = (sum(p.lifetime_ns for p in view) + restart) or None
        # (over the lifetimes: a sampled run's unsampled phases are in its idle)
        unattributed, ratio = 0, estimated_goodput(view, goodput_of(summed), sum(summed.values()) * 1e9)
        phases_wasted = sum(p.bucket_ns["wasted"] for p in view)
    return {
        "view": "driver" if is_driver else "all processes",
        "seconds": seconds,
        "wall_s": None if wall is None else round(wall / 1e9, 6),
        "unattributed_s": None if unattributed is None else round(unattributed / 1e9, 6),
        "goodput": ratio,
        "wasted_reasons": {
            "rerun": round(rerun / 1e9, 6),
            "restart": round(restart / 1e9, 6),
            "phases": round(phases_wasted / 1e9, 6),
        },
        "restarts": max(len(attempts.rows) - 1, 0),
    }
