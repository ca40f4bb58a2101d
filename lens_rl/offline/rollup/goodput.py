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
``count``, ``total_s``, ``mean_s``, ``p95_s``, ``share``, ``share_of``, ``tokens_per_s``}],
``unbucketed_phases`` [{``phase``, ``worker_group``, ``total_s``, ``share``, ``did_you_mean``}],
``worker_groups`` [{``worker_group``, ``processes``, ``seconds``, ``goodput``, ``wall_s``}], ``ranks``
[{``worker_group``, ``rank``, ``pid``, ``attempt``, ``seconds``, ``goodput``, ``wall_s``}], ``stragglers``
{``per_step``, ``persistent``, ``degrading``}, ``critical_path`` {``phases``, ``steps``}, ``throughput``
{``gpus``, ``tokens``, ``e2e_tokens_per_s_per_gpu``}, ``sampled``, ``concurrent``, ``runs``, ``notes``,
``spans``, ``files``, ``skipped_lines``. Phase rows also carry ``tokens_per_s_per_gpu`` and ``mfu``, step rows
``tokens`` and ``e2e_tokens_per_s_per_gpu`` (docs/optimise.md).

Example::

    report = analyze(span_files("lens_traces/run42"))
    print(report["goodput"], report["steady_state_goodput"])
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.buckets import goodput_of
from lens_rl.offline.read.critical import Memo, critical_path
from lens_rl.offline.read.intervals import covered, merge_intervals, pairs
from lens_rl.offline.read.parts import BUCKETS, ProcessPart, StepPart, merge_parts, share_steps, step_key
from lens_rl.offline.read.reduce import file_steps
from lens_rl.offline.rollup.attempts import Attempts, attempts_of, superseded_steps
from lens_rl.offline.rollup.rows import (
    UNBUCKETED_SHARE,
    group_and_rank_rows,
    phase_rows,
    throughput_row,
    unbucketed_rows,
)
from lens_rl.offline.rollup.stragglers import in_range, stragglers
from lens_rl.offline.run.cache import (
    grown_bytes,
    load_memo,
    load_report,
    read_parts,
    save_memo,
    save_report,
    save_sizes,
    store_fingerprint,
)
from lens_rl.store import ReadStats, heads, read_head

__all__ = ["SCHEMA", "UNBUCKETED_SHARE", "analyze", "analyze_parts", "report_from_parts", "rolled_up"]

_log = logging.getLogger("lens_rl")

SCHEMA = "lens_rl.goodput/1"


def _seconds(ns: Mapping[str, float]) -> dict[str, float]:
    return {b: round(ns.get(b, 0) / 1e9, 6) for b in BUCKETS}


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (exact, deterministic)."""
    if not values:
        return None
    ordered = sorted(values)
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
) -> dict[str, Any]:
    """The goodput report (the module docstring's schema) from process parts; ``steps`` (A, B) selects steps;
    ``memo``: the critical path's per-step results of an earlier look (:class:`~lens_rl.offline.read.critical.Memo`)."""
    processes = merge_parts(parts)
    driver = [p for p in processes if p.is_driver]
    view = driver or processes
    attempts = attempts_of(processes, view, bool(driver))
    job = _job_row(view, bool(driver), attempts)
    step_rows, walls_ns = _step_rows(view, steps)
    complete = [r for r in step_rows if not r["incomplete"]]
    steady = _steady(step_rows, walls_ns, warmup_steps)
    walls = [r["wall_s"] for r in complete]
    runs = sorted(set().union(*(p.runs for p in processes))) if processes else []
    groups, ranks, concurrent = group_and_rank_rows(processes)
    run_steps = sorted({s for p in view for s in p.steps if type(s) is int})
    throughput = throughput_row(processes, step_rows, walls_ns)  # (adds to the step rows: before they are copied)
    return {
        "schema": SCHEMA,
        "goodput": job["goodput"],
        "steady_state_goodput": _of_wall(sum(r["ns"][0] for r, _ in steady), sum(w for _, w in steady))
        if steady
        else None,
        "warmup_steps": warmup_steps,
        "job": {k: v for k, v in job.items() if k != "ns"},
        "attempts": attempts.rows,
        "steps": [{k: v for k, v in r.items() if k != "ns"} for r in step_rows],
        "step_range": [run_steps[0], run_steps[-1]] if run_steps else None,
        "step_time": {
            "p50_s": _percentile(walls, 0.5),
            "p95_s": _percentile(walls, 0.95),
            "max_s": max(walls) if walls else None,
        },
        "slowest_steps": [
            {"step": r["step"], "wall_s": r["wall_s"]}
            for r in sorted(complete, key=lambda r: (-r["wall_s"], step_key(r["step"])))[:5]
        ],
        "phases": phase_rows(processes, job["wall_s"] if driver else None),
        "unbucketed_phases": unbucketed_rows(
            processes, sum(walls_ns[i] for i, r in enumerate(step_rows) if not r["incomplete"]) / 1e9
        ),
        "worker_groups": groups,
        "ranks": ranks,
        "stragglers": stragglers(processes, steps),
        "critical_path": critical_path(processes, step_rows, memo),
        "throughput": throughput,
        "sampled": any(p.sampled for p in processes),
        "concurrent": concurrent,
        "runs": runs,
        "notes": _notes(notes, driver, step_rows, runs, attempts),
        "spans": sum(p.spans for p in processes),
        "files": files,
        "skipped_lines": skipped_lines,
    }


def _steady(step_rows: list[dict[str, Any]], walls_ns: list[int], warmup_steps: int) -> list[tuple[Any, int]]:
    """The steady state's (step row, wall ns): complete final runs, skipping each attempt's first
    ``warmup_steps`` (a resumed attempt warms up again: compilation, caches, the first rollouts)."""
    seen: dict[Any, int] = defaultdict(int)
    out = []
    for row, wall in zip(step_rows, walls_ns, strict=True):
        seen[row["attempt"]] += 1
        if seen[row["attempt"]] > max(warmup_steps, 0) and not row["incomplete"]:
            out.append((row, wall))
    return out


def _notes(
    given: Sequence[str],
    driver: list[ProcessPart],
    step_rows: list[dict[str, Any]],
    runs: list[str],
    attempts: Attempts,
) -> list[str]:
    """What a reader should be told about the store: the readers' notes, then the rollup's own."""
    notes = list(given)
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


def _step_rows(view: list[ProcessPart], steps: tuple[int, int] | None) -> tuple[list[dict[str, Any]], list[int]]:
    """One row per step of the view (and each one's wall in ns): exclusive bucket seconds, its wall (its
    umbrellas' union, else first start to last end), what no bucketed span covers, goodput = productive /
    wall. A step whose umbrella never ended, or was cut short by a shutdown (while others have theirs), is
    incomplete."""
    attempt_of: dict[Any, int] = {}  # a step's final run: re-runs were reduced apart
    if len(view) == 1:  # one driver: its steps as they are (no copy of every step)
        combined = {step: sp for step, sp in view[0].steps.items() if in_range(step, steps)}
    else:
        combined = {}
        for part in view:
            for step, sp in part.steps.items():
                if in_range(step, steps):
                    combined.setdefault(step, StepPart()).merge(sp)
                    attempt_of[step] = max(attempt_of.get(step, part.key.attempt), part.key.attempt)
    only = view[0].key.attempt if view else 0
    with_umbrellas = any(sp.umbrellas for sp in combined.values())
    rows, walls = [], []
    for step in sorted(combined, key=step_key):
        sp = combined[step]
        umbrellas = sp.umbrellas
        if umbrellas:  # (one umbrella, the common case: its interval as it is)
            windows = [(umbrellas[0], umbrellas[1])] if len(umbrellas) == 2 else merge_intervals(pairs(umbrellas))
        else:
            windows = [(sp.lo, sp.hi)] if sp.lo is not None and sp.hi is not None else []
        wall = sum(hi - lo for lo, hi in windows)
        unattributed = max(wall - (covered([sp.bucketed], windows) if sp.bucketed else 0), 0)
        rows.append(
            {
                "step": step,
                "attempt": attempt_of.get(step, only),
                "seconds": {b: round(ns / 1e9, 6) for b, ns in zip(BUCKETS, sp.ns, strict=True)},
                "wall_s": round(wall / 1e9, 6),
                "unattributed_s": round(unattributed / 1e9, 6),
                "goodput": _of_wall(sp.ns[0], wall),
                "incomplete": sp.incomplete or (with_umbrellas and not sp.umbrellas),
                "ns": sp.ns,
            }
        )
        walls.append(wall)
    return rows, walls


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
        per = [p.seconds() for p in view]
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


#: bytes new since the last look under which a look through the refresh cache reads in this process
#: (measured, 1 M spans, +1 %: worker processes made it 1.06 s against 0.88 s here: each file's settled parts
#: travel back to this process pickled, which costs what reading its cache entry here does)
SMALL_REFRESH = 32 << 20


def analyze_parts(
    paths: Sequence[Path],
    *,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    critical: bool = True,
    cache: str | None = None,
) -> tuple[list[ProcessPart], ReadStats]:
    """Every span file reduced to process parts, one file per worker at a time (identical whatever ``jobs``).

    Whether the run has a driver is read from the files' headers (a driver's file with no span line is none,
    and said so); which file is whose is never read from its name."""
    from lens_rl.offline.run.parallel import map_files, no_gc

    parts: list[ProcessPart] = []
    stats = ReadStats()
    driver_in_run = False
    attempts: set[int] = set()
    driven: set[int] = set()  # attempts with a driver file that has spans
    for path in paths:
        head, has_spans = read_head(path)
        if head is not None:
            attempts.add(head.process.attempt)
        if head is not None and head.process.driver:
            if has_spans:
                driver_in_run = True
                later = heads(path)  # a driver restarted under the same pid appends to the same file
                driven.update(h.process.attempt for h in later if h.process.driver)
                attempts.update(h.process.attempt for h in later)
            else:
                stats.notes.append(
                    f"{Path(path).name}: a driver file with no spans (the driver was killed before "
                    "its first export?); read as no driver file: the job view sums every process"
                )
    if jobs is None and cache is not None and not use_ray and grown_bytes(cache, paths) <= SMALL_REFRESH:
        jobs = 1  # (a look at little that is new: worker processes would cost more than they save)
    options: dict[str, Any] = {"jobs": jobs, "use_ray": use_ray, "ray_address": ray_address}
    superseded = _superseded(paths, frozenset(driven), options) if len(attempts) > 1 else {}
    steps_seen: dict[bytes, Any] = {}
    with no_gc():
        for file_result, file_stats in map_files(
            read_parts, paths, driver_in_run, superseded, critical, cache, desc="goodput", **options
        ):
            for part in file_result:
                share_steps(part, steps_seen)
            parts.extend(file_result)
            stats.add(file_stats)
    if cache is not None:
        save_sizes(cache, paths)
    if stats.cache_notes:  # said once, on stderr: the report is the same either way
        _log.warning(
            "lens-rl: %d cache file(s) not used (%s%s): read cold",
            len(stats.cache_notes),
            stats.cache_notes[0],
            ", ..." if len(stats.cache_notes) > 1 else "",
        )
    return parts, stats


def _superseded(paths: Sequence[Path], driven: frozenset[int], options: Mapping[str, Any]) -> dict[int, frozenset[Any]]:
    """attempt -> its steps a later attempt ran again, in a run of several attempts: the steps of each
    attempt's view (its driver's, or every process's of an attempt without a driver file) read once more,
    before the files are reduced."""
    from lens_rl.offline.run.parallel import map_files

    steps: dict[int, set[Any]] = defaultdict(set)
    for found in map_files(file_steps, paths, driven, desc="attempts", **options):
        for attempt, values in found.items():
            steps[attempt] |= values
    return superseded_steps(steps)


def rolled_up(parts: Iterable[ProcessPart], stats: ReadStats, cache: str | None, **options: Any) -> dict[str, Any]:
    """:func:`report_from_parts` of what :func:`analyze_parts` read, the critical path's per-step results
    kept in the refresh cache's folder ``cache`` between looks (None: walked afresh, nothing kept)."""
    from lens_rl.offline.run.parallel import no_gc

    memo = None
    with no_gc():  # (the memo's and the report's many small objects, beside the parts' millions)
        if cache is not None:
            memo, why = load_memo(cache, stats.cache_reads)
            if why is not None:  # (the report is the same either way)
                _log.warning("lens-rl: the critical path's cache file not used (%s): its steps walked afresh", why)
        report = report_from_parts(
            parts, files=stats.files, skipped_lines=stats.skipped, notes=stats.notes, memo=memo, **options
        )
    if cache is not None and memo is not None:
        save_memo(cache, stats.cache_reads, memo)
    return report


def analyze(
    paths: Sequence[Path],
    *,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    critical: bool = True,
    cache: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The report for these span files, read in bounded memory (see :func:`analyze_parts`); ``critical``
    False leaves the critical path out (its ``phases`` and ``steps`` empty); ``cache``: the refresh cache's
    folder (:func:`lens_rl.offline.run.cache.cache_folder`), or None to read cold."""
    fingerprint = None
    if cache is not None:  # an unchanged store: the report kept for it
        fingerprint = store_fingerprint(paths, (critical, sorted(options.items(), key=str)))
        kept = load_report(cache, fingerprint)
        if kept is not None:
            return kept
    parts, stats = analyze_parts(
        paths, jobs=jobs, use_ray=use_ray, ray_address=ray_address, critical=critical, cache=cache
    )
    report = rolled_up(parts, stats, cache if critical else None, **options)
    if cache is not None and fingerprint is not None:
        save_report(cache, fingerprint, report)
    return report
