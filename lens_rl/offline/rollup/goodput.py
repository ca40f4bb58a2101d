"""Goodput rollup: exclusive bucket time per job, step, phase, worker group and rank; stragglers.

Goodput = productive seconds / wall-clock seconds of the view.

* **Exclusive time.** Within one process, a bucketed span's time is its duration minus the union of its
  nearest bucketed descendants, clipped to it (:func:`lens_rl.buckets.exclusive_time`, the rule the live
  metric uses too).
* **Views.** ``goodput`` is the job's wall-clock view: the driver's own spans (the loop as it waited on
  workers), start-up included, over its wall (``rl.job``, else its first to last span); time no bucketed
  span covers is unattributed, never productive. With no driver spans, all processes are summed.
  ``steady_state_goodput`` covers the complete steps only, skipping the first ``warmup_steps``. Worker
  groups and ranks get a resource-seconds view: a worker's lifetime not covered by a bucketed span is idle.
* **Steps.** A span belongs to the step of its own ``rl.step`` (a carried step is recorded as its own),
  else its nearest ancestor's. A step's wall is its umbrellas' (unbucketed spans carrying ``rl.step``),
  else first start to last end; one whose umbrella never ended is incomplete, out of the step figures.
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
[{``step``, ``attempt``, ``seconds``, ``wall_s``, ``unattributed_s``, ``goodput``, ``incomplete``}],
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
``output_tokens``, ``busy_s``, ``output_tokens_per_s``}] (vLLM's request spans, :mod:`lens_rl.offline.rollup.requests`), ``sampled``, ``concurrent``, ``runs``, ``notes``,
``spans``, ``files``, ``skipped_lines``. Phase rows also carry ``tokens_per_s_per_gpu`` and ``mfu``, step rows
``tokens`` and ``e2e_tokens_per_s_per_gpu`` (docs/optimise.md).

The passes over the files that feed it are :mod:`lens_rl.offline.run.analyze`'s.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import chain, islice
from typing import Any, cast

import numpy as np

from lens_rl.buckets import goodput_of
from lens_rl.offline.read.intervals import merge_intervals, pairs
from lens_rl.offline.read.parts import BUCKETS, ProcessPart, StepPart, merge_parts, step_key
from lens_rl.offline.rollup.attempts import Attempts, attempts_of
from lens_rl.offline.rollup.bulk import covered, packed_spans, resource_seconds, seconds_rounded
from lens_rl.offline.rollup.critical import Memo, critical_path
from lens_rl.offline.rollup.requests import requests_rows
from lens_rl.offline.rollup.rows import (
    UNBUCKETED_SHARE,
    group_and_rank_rows,
    phase_rows,
    throughput_row,
    unbucketed_rows,
    warning_rows,
)
from lens_rl.offline.rollup.schema import (
    AttemptRow,
    CriticalPath,
    GoodputReport,
    GroupRow,
    JobRow,
    PhaseRow,
    RankRow,
    RequestsRow,
    StepRow,
    Stragglers,
    Throughput,
    UnbucketedRow,
    WarningRow,
)
from lens_rl.offline.rollup.stragglers import in_range, stragglers
from lens_rl.offline.rollup.throughput import with_remote_tokens

__all__ = ["SCHEMA", "UNBUCKETED_SHARE", "report_from_parts"]

SCHEMA = "lens_rl.goodput/1"
_EMPTY = array("q")


def _seconds(ns: Mapping[str, float]) -> dict[str, float]:
    return {b: round(ns.get(b, 0) / 1e9, 6) for b in BUCKETS}


def _percentile(ordered: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of sorted values (exact, deterministic)."""
    if not ordered:
        return None
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


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
) -> GoodputReport:
    """The goodput report (the module docstring's schema, typed in :mod:`~lens_rl.offline.rollup.schema`)
    from process parts; ``steps`` (A, B) selects steps; ``memo``: the critical path's per-step results of an
    earlier look (:class:`~lens_rl.offline.rollup.critical.Memo`)."""
    processes = merge_parts(parts)
    driver = [p for p in processes if p.is_driver]
    view = driver or processes
    attempts = attempts_of(processes, view, bool(driver))
    job = _job_row(view, bool(driver), attempts)
    step_rows, walls_ns, productive_ns = _step_rows(view, steps)
    runs = sorted(set().union(*(p.runs for p in processes))) if processes else []
    groups, ranks, concurrent = group_and_rank_rows(processes)
    run_steps = [s for p in view for s in p.steps if type(s) is int]
    tokened = with_remote_tokens(processes)  # (a vLLM process's requests give tokens to their phases)
    throughput = throughput_row(tokened, step_rows, walls_ns)  # (adds to the step rows)
    return {
        "schema": SCHEMA,
        "goodput": job["goodput"],
        "steady_state_goodput": _steady(step_rows, walls_ns, productive_ns, warmup_steps),
        "warmup_steps": warmup_steps,
        "job": cast(JobRow, job),
        "attempts": cast("list[AttemptRow]", attempts.rows),
        "steps": cast("list[StepRow]", step_rows),
        "step_range": [min(run_steps), max(run_steps)] if run_steps else None,
        **_step_times(step_rows),  # type: ignore[typeddict-item]
        "phases": cast("list[PhaseRow]", phase_rows(tokened, job["wall_s"] if driver else None)),
        "unbucketed_phases": cast(
            "list[UnbucketedRow]",
            unbucketed_rows(processes, sum(walls_ns[i] for i, r in enumerate(step_rows) if not r["incomplete"]) / 1e9),
        ),
        "warnings": cast("list[WarningRow]", warning_rows(view, step_rows)),
        "broken_cycles": sum(p.cycles for p in processes),
        "worker_groups": cast("list[GroupRow]", groups),
        "ranks": cast("list[RankRow]", ranks),
        "stragglers": cast(Stragglers, stragglers(processes, steps)),
        "critical_path": cast(CriticalPath, critical_path(processes, step_rows, memo)),
        "throughput": cast(Throughput, throughput),
        "requests": cast("list[RequestsRow]", requests_rows(processes)),
        "sampled": any(p.sampled for p in processes),
        "concurrent": concurrent,
        "runs": runs,
        "notes": _notes(notes, driver, step_rows, runs, attempts, sum(p.cycles for p in processes)),
        "spans": sum(p.spans for p in processes),
        "files": files,
        "skipped_lines": skipped_lines,
    }


def _step_times(step_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``step_time`` (p50, p95, max of the complete steps' walls) and ``slowest_steps`` (the five longest,
    ties by step)."""
    complete = [r for r in step_rows if not r["incomplete"]]
    walls = sorted(r["wall_s"] for r in complete)
    return {
        "step_time": {
            "p50_s": _percentile(walls, 0.5),
            "p95_s": _percentile(walls, 0.95),
            "max_s": walls[-1] if walls else None,
        },
        "slowest_steps": [
            {"step": r["step"], "wall_s": r["wall_s"]}
            for r in sorted(_slow(complete, walls), key=lambda r: (-r["wall_s"], step_key(r["step"])))[:5]
        ],
    }


def _slow(complete: list[dict[str, Any]], walls: list[float]) -> list[dict[str, Any]]:
    """The rows a sort of the complete steps by wall (longest first, ties by step) puts first five, among a few
    others: those over the fifth longest wall, and the first five at it (the rows are in step order)."""
    if len(walls) <= 5:
        return complete
    fifth = walls[-5]
    return [r for r in complete if r["wall_s"] > fifth] + list(islice((r for r in complete if r["wall_s"] == fifth), 5))


def _steady(
    step_rows: list[dict[str, Any]], walls_ns: list[int], productive_ns: list[int], warmup_steps: int
) -> float | None:
    """The steady state's goodput: its complete final runs' productive over wall time, skipping each
    attempt's first ``warmup_steps`` (a resumed attempt warms up again: compilation, caches, the first
    rollouts); None without such a step (or a wall)."""
    taken = [n for n in _after_warmup(step_rows, max(warmup_steps, 0)) if not step_rows[n]["incomplete"]]
    return _of_wall(sum(productive_ns[n] for n in taken), sum(walls_ns[n] for n in taken)) if taken else None


def _after_warmup(step_rows: list[dict[str, Any]], warm: int) -> Sequence[int]:
    """The indexes of the rows after their attempt's first ``warm``."""
    if len({row["attempt"] for row in step_rows}) == 1:  # (one attempt: a range)
        return range(warm, len(step_rows))
    seen: dict[Any, int] = defaultdict(int)
    out = []
    for n, row in enumerate(step_rows):
        seen[row["attempt"]] += 1
        if seen[row["attempt"]] > warm:
            out.append(n)
    return out


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
    incomplete = [r["step"] for r in step_rows if r["incomplete"]]
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


def _step_rows(
    view: list[ProcessPart], steps: tuple[int, int] | None
) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """One row per step of the view (and each one's wall and productive time in ns): exclusive bucket
    seconds, its wall (its umbrellas' union, else first start to last end), what no bucketed span covers,
    goodput = productive / wall. A step whose umbrella never ended, or was cut short by a shutdown (while
    others have theirs), is incomplete."""
    combined, attempt_of = _combined(view, steps)
    only = view[0].key.attempt if view else 0
    order = _in_order(combined)
    parts = [combined[step] for step in order]
    walls, unattributed = _walls(parts)
    productive = [sp.ns[0] for sp in parts]
    incomplete = _incomplete(parts)
    seconds, wall_s, unattributed_s = (
        seconds_rounded(v) for v in (list(chain.from_iterable(sp.ns for sp in parts)), walls, unattributed)
    )
    p, o, i, w = BUCKETS
    rows = [
        {
            "step": step,
            "attempt": attempt_of.get(step, only),
            "seconds": {p: seconds[4 * n], o: seconds[4 * n + 1], i: seconds[4 * n + 2], w: seconds[4 * n + 3]},
            "wall_s": wall_s[n],
            "unattributed_s": unattributed_s[n],
            "goodput": productive[n] / walls[n] if walls[n] else None,
            "incomplete": incomplete[n],
        }
        for n, step in enumerate(order)
    ]
    return rows, walls, productive


def _incomplete(parts: list[StepPart]) -> list[bool]:
    """Which steps are incomplete: an umbrella that never ended, or one cut short by a shutdown (no umbrella,
    while other steps have theirs)."""
    with_umbrellas = any(sp.umbrellas for sp in parts)
    return [sp.incomplete or (with_umbrellas and not sp.umbrellas) for sp in parts]


def _in_order(steps: Collection[Any]) -> list[Any]:
    """``steps`` sorted by :func:`step_key` (integers alone: as they compare, the same order)."""
    return sorted(steps) if all(type(s) is int for s in steps) else sorted(steps, key=step_key)


def _combined(view: list[ProcessPart], steps: tuple[int, int] | None) -> tuple[dict[Any, StepPart], dict[Any, int]]:
    """The view's steps (in ``steps``) merged across its processes, and each one's final run's attempt where
    several processes ran it (re-runs were reduced apart)."""
    attempt_of: dict[Any, int] = {}
    if len(view) == 1:  # one driver: its steps as they are (no copy of every step)
        if steps is None:
            return view[0].steps, attempt_of
        return {step: sp for step, sp in view[0].steps.items() if in_range(step, steps)}, attempt_of
    combined: dict[Any, StepPart] = {}
    for part in view:
        for step, sp in part.steps.items():
            if in_range(step, steps):
                combined.setdefault(step, StepPart()).merge(sp)
                attempt_of[step] = max(attempt_of.get(step, part.key.attempt), part.key.attempt)
    return combined, attempt_of


def _walls(parts: list[StepPart]) -> tuple[list[int], list[int]]:
    """Each step's :func:`_wall`, in bulk where a step has one umbrella and its bucketed spans lie inside it
    (the common case: the same two subtractions), the others one by one."""
    if len(parts) < 64:
        each = [_wall(sp) for sp in parts]
        return [wall for wall, _ in each], [uncovered for _, uncovered in each]
    umbrellas = [sp.umbrellas or _EMPTY for sp in parts]
    lo, hi, _ = packed_spans(umbrellas)
    first, last, length = packed_spans([sp.bucketed or _EMPTY for sp in parts])
    one = np.fromiter(map(len, umbrellas), np.int64, len(parts)) == 2
    wall = hi - lo
    walls, unattributed = wall.tolist(), np.maximum(wall - length, 0).tolist()
    for n in np.flatnonzero(~(one & (first >= lo) & (last <= hi))).tolist():
        walls[n], unattributed[n] = _wall(parts[n])
    return walls, unattributed


def _wall(sp: StepPart) -> tuple[int, int]:
    """A step's wall (its umbrellas' union, else first start to last end) and what of it no bucketed span
    covers, in ns."""
    windows = _windows(sp)
    wall = sum(hi - lo for lo, hi in windows)
    return wall, max(wall - (covered([sp.bucketed], windows) if sp.bucketed else 0), 0)


def _windows(sp: StepPart) -> list[tuple[int, int]]:
    """A step's wall as intervals: its umbrellas' union, else first start to last end."""
    umbrellas = sp.umbrellas
    if umbrellas:  # (one umbrella, the common case: its interval as it is)
        return [(umbrellas[0], umbrellas[1])] if len(umbrellas) == 2 else merge_intervals(pairs(umbrellas))
    return [(sp.lo, sp.hi)] if sp.lo is not None and sp.hi is not None else []


def _job_row(view: list[ProcessPart], is_driver: bool, attempts: Attempts) -> dict[str, Any]:
    """The job's figures. The driver's view: its exclusive bucket time over the wall (one attempt: its
    ``rl.job``, else its first to last span; several: the first start to the last end over all of them),
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
        wall = sum(hi - lo for lo, hi in windows) if windows else None
        coverage = [array for p in view for array in p.coverage]
        unattributed = None if wall is None else max(wall - covered(coverage, windows) - restart, 0)
        seconds = _seconds(ns)
        ratio = _of_wall(ns["productive"], wall)
        phases_wasted = ns["wasted"] - rerun - restart
    else:
        per = [resource_seconds(p) for p in view]
        summed = {b: sum(s[b] for s in per) for b in BUCKETS}
        summed["wasted"] += restart / 1e9
        seconds = {b: round(value, 6) for b, value in summed.items()}
        wall = (sum(p.lifetime_ns for p in view) + restart) or None
        unattributed, ratio = 0, goodput_of(summed)
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
