"""Goodput rollup: exclusive bucket time per job, step, phase, worker group and rank; stragglers.

Goodput = productive / (productive + overhead + idle + wasted) seconds.

* **Exclusive time.** Within one process, a bucketed span's time is its duration minus
  the union of its nearest bucketed descendants, clipped to it
  (:func:`lens_rl.buckets.exclusive_time`, the rule the live metric uses too).
* **Views.** ``goodput`` is the job's wall-clock view: the driver's own spans (the
  loop as it waited on workers), start-up included; with no driver spans, all
  processes are summed. ``steady_state_goodput`` covers the steps only, skipping the
  first ``warmup_steps`` (default 1). Worker groups and ranks get a resource-seconds
  view: a worker's lifetime (its first span's start to its last span's end) minus
  what its bucketed spans cover is ``idle``. On the driver, time in a step that no
  bucketed span covers stays ``unattributed_s`` (the driver orchestrates).
* **Steps.** A span belongs to the step of its own ``rl.step`` (a carried step is
  recorded as its own), else its nearest ancestor's. A step's wall time is its
  umbrella spans' (unbucketed spans carrying ``rl.step``), else first start to last end.
* **Stragglers.** Per worker group, step and phase, a rank whose exclusive time
  exceeds the group's median by more than 20 % and by more than 3 median absolute
  deviations; persistent when flagged in at least half of its steps. Idle phases
  (collective waits) are not compared.
* **Streaming.** Each process is reduced to a compact :class:`ProcessPart` as soon as
  its spans are read; parts merge exactly, so files can be read one at a time, in
  parallel, or on a Ray cluster, with identical results.

JSON schema (``lens-rl goodput --json``), ``"schema": "lens_rl.goodput/1"`` (extended
compatibly): ``goodput``, ``steady_state_goodput``, ``warmup_steps``, ``job`` {``view``,
``seconds``, ``wall_s``, ``unattributed_s``, ``goodput``}, ``steps`` [{``step``,
``seconds``, ``wall_s``, ``unattributed_s``, ``goodput``}], ``step_time`` {``p50_s``,
``p95_s``, ``max_s``}, ``slowest_steps`` [{``step``, ``wall_s``}], ``phases`` [{``phase``,
``bucket``, ``count``, ``total_s``, ``mean_s``, ``p95_s``, ``share``, ``tokens_per_s``}],
``worker_groups`` [{``worker_group``, ``processes``, ``seconds``, ``goodput``,
``wall_s``}], ``ranks`` [{``worker_group``, ``rank``, ``pid``, ``seconds``, ``goodput``,
``wall_s``}], ``stragglers`` {``per_step``, ``persistent``}, ``sampled``,
``concurrent``, ``runs``, ``spans``, ``files``, ``skipped_lines``.

Example::

    report = rollup(iter_span_records("lens_traces/run42"))
    print(report["goodput"], report["steady_state_goodput"])
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl._parts import (
    BUCKETS,
    PhasePart,
    ProcessPart,
    Series,
    StepPart,
    covered,
    file_parts,
    median,
    merge_intervals,
    merge_parts,
    pairs,
    process_part,
    share_steps,
    step_key,
)
from lens_rl.buckets import closest_phase_name, goodput_of, union_length
from lens_rl.store import ReadStats, process_of, read_head

__all__ = ["BUCKETS", "SCHEMA", "ProcessPart", "analyze", "analyze_parts", "file_parts", "format_table", "goodput_ratio", "merge_parts",
           "process_part", "report_from_parts", "rollup", "spans_to_records"]  # fmt: skip

SCHEMA = "lens_rl.goodput/1"
STRAGGLER_RATIO = 1.2
STRAGGLER_MADS = 3.0
MAX_STEP_ROWS = 20
goodput_ratio = goodput_of


def _bucket_dict(seconds: Mapping[str, float]) -> dict[str, float]:
    return {b: round(seconds.get(b, 0.0), 6) for b in BUCKETS}


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (exact, deterministic)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def _in_range(step: Any, steps: tuple[int, int] | None) -> bool:
    return steps is None or (isinstance(step, int) and steps[0] <= step <= steps[1])


def _step_rows(view: list[ProcessPart], steps: tuple[int, int] | None) -> list[dict[str, Any]]:
    """One row per step of the view: exclusive bucket seconds, its wall (its umbrellas' union, else first
    start to last end), what no bucketed span covers, and goodput = productive / wall. A step whose
    umbrella never ended, or was cut short by a shutdown (while other steps have theirs), is incomplete."""
    if len(view) == 1:  # one driver: its steps as they are (no copy of every step)
        combined = {step: sp for step, sp in view[0].steps.items() if _in_range(step, steps)}
    else:
        combined = {}
        for part in view:
            for step, sp in part.steps.items():
                if _in_range(step, steps):
                    combined.setdefault(step, StepPart()).merge(sp)
    with_umbrellas = any(sp.umbrellas for sp in combined.values())
    rows = []
    for step in sorted(combined, key=step_key):
        sp = combined[step]
        windows = merge_intervals(pairs(sp.umbrellas)) if sp.umbrellas else (
            [(sp.lo, sp.hi)] if sp.lo is not None and sp.hi is not None else [])  # fmt: skip
        wall_s = union_length(windows) / 1e9
        covered_s = covered([sp.bucketed], windows) / 1e9 if sp.bucketed else 0.0
        seconds = dict(zip(BUCKETS, sp.seconds, strict=True))
        rows.append({"step": step, "seconds": _bucket_dict(seconds), "wall_s": round(wall_s, 6),
                     "unattributed_s": round(max(wall_s - covered_s, 0.0), 6), "goodput": _of_wall(seconds, wall_s),
                     "incomplete": sp.incomplete or (with_umbrellas and not sp.umbrellas)})  # fmt: skip
    return rows


def _of_wall(seconds: Mapping[str, float], wall_s: float | None) -> float | None:
    """productive / wall-clock seconds (None without a wall): time no bucketed span covers is never productive."""
    return seconds.get("productive", 0.0) / wall_s if wall_s else None


def _stragglers(parts: list[ProcessPart], steps: tuple[int, int] | None) -> dict[str, Any]:
    """The SPEC's straggler rule, one (group, phase) column at a time over the parts' own
    step -> seconds maps (no run-sized table: a 1,000-rank, 100 k-step run stays in memory)."""
    columns: dict[tuple[str, str], dict[int, list[Mapping[Any, float]]]] = defaultdict(dict)
    for part in parts:
        if part.is_driver:
            continue
        group, rank, _ = part.key
        for phase, by_step in part.compute.items():
            columns[(group, phase)].setdefault(rank, []).append(by_step)
    per_step: list[dict[str, Any]] = []
    flagged: dict[tuple[str, int], set[Any]] = defaultdict(set)
    rank_steps: dict[tuple[str, int], list[Iterable[Any]]] = defaultdict(list)
    for (group, phase), by_rank_maps in columns.items():
        maps: dict[int, Mapping[Any, float]] = {}
        for rank, found in by_rank_maps.items():
            if len(found) == 1:
                maps[rank] = found[0]
            else:  # a rank seen under several pids (a restart): its seconds add up
                merged: dict[Any, float] = {}
                for by_step in found:
                    for step, value in by_step.items():
                        merged[step] = merged.get(step, 0.0) + value
                maps[rank] = merged
            rank_steps[(group, rank)].append(maps[rank].keys())
        if len(maps) < 2:
            continue
        aligned = _aligned(maps)
        if aligned is not None:  # every rank has the same integer steps: compare index by index
            ranks, step_list, value_arrays = aligned
            for i, step in enumerate(step_list):
                if _in_range(step, steps):
                    _flag(step, group, phase, ranks, [arr[i] for arr in value_arrays], per_step, flagged)
            continue
        for step in set().union(*(m.keys() for m in maps.values())):
            if not _in_range(step, steps):
                continue
            present = [rank for rank, m in maps.items() if step in m]
            if len(present) >= 2:
                _flag(step, group, phase, present, [maps[rank][step] for rank in present], per_step, flagged)
    per_step.sort(key=lambda s: (s["worker_group"], step_key(s["step"]), s["phase"], s["rank"]))
    persistent = []
    for (group, rank), steps_flagged in sorted(flagged.items()):
        seen = {step_key(step) for keys in rank_steps[(group, rank)] for step in keys if _in_range(step, steps)}
        of_steps = len(seen)
        if of_steps and len(steps_flagged) * 2 >= of_steps:
            persistent.append({"worker_group": group, "rank": rank, "steps_flagged": len(steps_flagged),
                               "of_steps": of_steps})  # fmt: skip
    return {"per_step": per_step, "persistent": persistent}


def _flag(step: Any, group: str, phase: str, ranks: Sequence[int], values: list[float],
          per_step: list[dict[str, Any]], flagged: dict[tuple[str, int], set[Any]]) -> None:  # fmt: skip
    """The SPEC's straggler rule at one step of one (group, phase): each rank over 1.2x the median
    and more than 3 MADs above it is flagged."""
    med = median(values)
    if med <= 0 or max(values) <= STRAGGLER_RATIO * med:  # no rank over the ratio: no MAD needed
        return
    mad = median([abs(v - med) for v in values])
    for rank, value in zip(ranks, values, strict=True):
        if value > STRAGGLER_RATIO * med and value - med > STRAGGLER_MADS * mad:
            per_step.append({"step": step, "worker_group": group, "rank": rank, "phase": phase,
                             "over_median": round(value / med - 1.0, 6)})  # fmt: skip
            flagged[(group, rank)].add(step_key(step))


def _aligned(maps: Mapping[int, Mapping[Any, float]]) -> tuple[list[int], Any, list[Any]] | None:
    """(ranks, steps, value arrays) when every map is a Series over the very same steps."""
    series = list(maps.values())
    if not all(isinstance(m, Series) for m in series):
        return None
    first = series[0].steps  # type: ignore[attr-defined]
    if not all(m.steps == first for m in series[1:]):  # type: ignore[attr-defined]
        return None
    return list(maps), first, [m.seconds for m in series]  # type: ignore[attr-defined]


def report_from_parts(
    parts: Iterable[ProcessPart],
    *,
    warmup_steps: int = 1,
    steps: tuple[int, int] | None = None,
    files: int | None = None,
    skipped_lines: int = 0,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The goodput report (the module docstring's schema) from process parts; ``steps`` (A, B) selects steps."""
    processes = merge_parts(parts)
    driver = [p for p in processes if p.is_driver]
    view = driver or processes
    job = _job_row(view, bool(driver))
    step_rows = _step_rows(view, steps)
    complete = [r for r in step_rows if not r["incomplete"]]
    steady = [r for r in step_rows[max(warmup_steps, 0):] if not r["incomplete"]]
    walls = [r["wall_s"] for r in complete]
    runs = sorted(set().union(*(p.runs for p in processes))) if processes else []
    notes = list(notes)
    if driver and not any(p.jobs for p in driver):
        notes.append("no rl.job span (the driver was killed, or has not shut down yet): the job's wall runs from "
                     "the driver's first span to its last")  # fmt: skip
    incomplete = [r["step"] for r in step_rows if r["incomplete"]]
    if incomplete:
        notes.append(f"{len(incomplete)} incomplete step(s) ({', '.join(map(str, incomplete[:5]))}"
                     f"{', ...' if len(incomplete) > 5 else ''}): their umbrella never ended; left out of the step "
                     "figures")  # fmt: skip
    if len(runs) > 1:
        notes.append(f"spans of {len(runs)} runs in one folder ({', '.join(runs)}): their figures are mixed; "
                     "keep one run per folder (trace_dir/<run_id>/)")  # fmt: skip
    groups, ranks, concurrent = _group_and_rank_rows(processes)
    steps_wall_s = sum(walls)
    run_steps = sorted({s for p in view for s in p.steps if type(s) is int})
    return {
        "schema": SCHEMA,
        "goodput": job["goodput"],
        "steady_state_goodput": _of_wall(_summed_seconds(steady), sum(r["wall_s"] for r in steady)) if steady else None,
        "warmup_steps": warmup_steps,
        "job": job,
        "steps": step_rows,
        "step_range": [run_steps[0], run_steps[-1]] if run_steps else None,
        "step_time": {"p50_s": _percentile(walls, 0.5), "p95_s": _percentile(walls, 0.95),
                      "max_s": max(walls) if walls else None},  # fmt: skip
        "slowest_steps": [{"step": r["step"], "wall_s": r["wall_s"]}
                          for r in sorted(complete, key=lambda r: (-r["wall_s"], step_key(r["step"])))[:5]],  # fmt: skip
        "phases": _phase_rows(processes, job["wall_s"] if driver else None),
        "unbucketed_phases": _unbucketed(processes, steps_wall_s),
        "worker_groups": groups,
        "ranks": ranks,
        "stragglers": _stragglers(processes, steps),
        "sampled": any(p.sampled for p in processes),
        "concurrent": concurrent,
        "runs": runs,
        "notes": notes,
        "spans": sum(p.spans for p in processes),
        "files": files,
        "skipped_lines": skipped_lines,
    }


def _summed_seconds(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    total = dict.fromkeys(BUCKETS, 0.0)
    for row in rows:
        for b in BUCKETS:
            total[b] += row["seconds"][b]
    return total


def _job_row(view: list[ProcessPart], is_driver: bool) -> dict[str, Any]:
    """The job's figures. The driver's view: its exclusive bucket seconds over the wall (its ``rl.job``, else
    its first to last span), what no bucketed span covers unattributed. Without a driver, every process is
    summed as resource-seconds: lifetimes, a worker's uncovered lifetime idle."""
    seconds = dict.fromkeys(BUCKETS, 0.0)
    for part in view:
        for b in BUCKETS:
            seconds[b] += part.seconds[b]
    if is_driver:
        windows = merge_intervals(j for p in view for j in p.jobs) or merge_intervals(
            p.lifetime for p in view if p.lifetime is not None)  # fmt: skip
        wall_s = union_length(windows) / 1e9 if windows else None
        covered_s = covered((p.bucketed for p in view), windows) / 1e9
        unattributed = None if wall_s is None else max(wall_s - covered_s, 0.0)
        ratio = _of_wall(seconds, wall_s)
    else:
        wall_s = sum((p.lifetime[1] - p.lifetime[0]) / 1e9 for p in view if p.lifetime is not None) or None
        unattributed, ratio = 0.0, goodput_of(seconds)
    return {
        "view": "driver" if is_driver else "all processes",
        "seconds": _bucket_dict(seconds),
        "wall_s": None if wall_s is None else round(wall_s, 6),
        "unattributed_s": None if unattributed is None else round(unattributed, 6),
        "goodput": ratio,
    }


def _phase_rows(processes: list[ProcessPart], job_wall_s: float | None) -> list[dict[str, Any]]:
    """Every process's phases, by worker group: count, total, mean, p95, tokens/s, and the share of the
    group's seconds (the driver's: the job's wall; a worker group's: its processes' lifetimes)."""
    merged: dict[tuple[str, str, str | None], PhasePart] = {}
    lifetimes: dict[str, float] = defaultdict(float)
    for part in processes:
        group = part.key[0]
        if part.lifetime is not None:
            lifetimes[group] += (part.lifetime[1] - part.lifetime[0]) / 1e9
        for (name, bucket), phase in part.phases.items():
            merged.setdefault((group, name, bucket), PhasePart()).merge(phase)
    rows: list[dict[str, Any]] = []
    for (group, name, bucket), ph in merged.items():
        is_driver = group == "driver"
        of_s = job_wall_s if is_driver else lifetimes.get(group)
        rows.append({
            "phase": name, "worker_group": group, "bucket": bucket, "count": ph.count, "total_s": round(ph.total_s, 6),
            "mean_s": round(ph.total_s / ph.count, 6) if ph.count else None,
            "p95_s": None if not ph.count else round(ph.quantile(0.95) or 0.0, 6),
            "share": round(ph.total_s / of_s, 6) if of_s else None,
            "share_of": "job wall" if is_driver else "group lifetime",
            "tokens_per_s": round(ph.tokens / ph.token_s, 3) if ph.token_s > 0 and ph.tokens > 0 else None,
        })  # fmt: skip
    rows.sort(key=lambda r: (r["worker_group"] != "driver", r["worker_group"], -(r["total_s"] or 0.0),
                             str(r["phase"]), str(r["bucket"])))  # fmt: skip
    return rows


#: An unbucketed leaf phase covering more of the steps' wall than this is named, with a did-you-mean.
UNBUCKETED_SHARE = 0.05


def _unbucketed(processes: list[ProcessPart], steps_wall_s: float) -> list[dict[str, Any]]:
    """Leaf phases with no bucket inside the steps covering more than 5 % of the steps' wall (per process of
    their group): time no bucket counts, most likely a name lens_rl does not know."""
    if steps_wall_s <= 0:
        return []
    leaf: dict[tuple[str, str], float] = defaultdict(float)
    members: dict[str, int] = defaultdict(int)
    for part in processes:
        members[part.key[0]] += 1
        for (name, bucket), phase in part.phases.items():
            if bucket is None and phase.leaf_s > 0:
                leaf[(part.key[0], name)] += phase.leaf_s
    rows = []
    for (group, name), seconds in leaf.items():
        share = seconds / (steps_wall_s * members[group])
        if share > UNBUCKETED_SHARE:
            rows.append({"phase": name, "worker_group": group, "total_s": round(seconds, 6), "share": round(share, 6),
                         "did_you_mean": closest_phase_name(str(name))})  # fmt: skip
    return sorted(rows, key=lambda r: (-r["share"], r["worker_group"], str(r["phase"])))


def _group_and_rank_rows(processes: list[ProcessPart]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """Resource-seconds per worker group and per rank (a worker's uncovered lifetime is idle), and whether any
    process's bucket seconds sum past its lifetime (concurrent phases)."""
    groups: dict[str, dict[str, Any]] = {}
    ranks = []
    concurrent = False
    for part in processes:
        group, rank, pid = part.key
        wall_s = 0.0 if part.lifetime is None else (part.lifetime[1] - part.lifetime[0]) / 1e9
        attributed_s = sum(part.seconds[b] for b in BUCKETS)
        concurrent = concurrent or (wall_s > 0 and attributed_s > wall_s * 1.001)
        entry = groups.setdefault(group, {"worker_group": group, "processes": 0,
                                          "seconds": dict.fromkeys(BUCKETS, 0.0), "wall_s": 0.0})  # fmt: skip
        entry["processes"] += 1
        entry["wall_s"] += wall_s
        for b in BUCKETS:
            entry["seconds"][b] += part.seconds[b]
        ranks.append({"worker_group": group, "rank": rank, "pid": pid, "seconds": _bucket_dict(part.seconds),
                      "goodput": goodput_of(part.seconds), "wall_s": round(wall_s, 6)})  # fmt: skip
    group_rows = [{**e, "seconds": _bucket_dict(e["seconds"]), "goodput": goodput_of(e["seconds"]),
                   "wall_s": round(e["wall_s"], 6)} for e in groups.values()]  # fmt: skip
    group_rows.sort(key=lambda r: (r["worker_group"] != "driver", r["worker_group"]))
    ranks.sort(key=lambda r: (r["worker_group"] != "driver", r["worker_group"], r["rank"], r["pid"]))
    return group_rows, ranks, concurrent


def analyze_parts(
    paths: Sequence[Path], *, jobs: int | None = None, use_ray: bool = False, ray_address: str | None = None
) -> tuple[list[ProcessPart], ReadStats]:
    """Every span file reduced to process parts, one file per worker at a time (identical whatever ``jobs``)."""
    from lens_rl.analysis import map_files, no_gc

    parts: list[ProcessPart] = []
    stats = ReadStats()
    driver_in_run = False
    for path in paths:  # a process's identity is its header's; a driver's file with no span line is none
        header, has_spans = read_head(path)
        resource = header.get("resource") if header is not None else None
        if type(resource) is dict and process_of({"resource": resource})[0] == "driver":
            if has_spans:
                driver_in_run = True
            else:
                stats.notes.append(f"{Path(path).name}: a driver file with no spans (the driver was killed before "
                                   "its first export?); read as no driver file: the job view sums every process")  # fmt: skip
    steps_seen: dict[bytes, Any] = {}
    with no_gc():
        for file_result, file_stats in map_files(file_parts, paths, driver_in_run, jobs=jobs, use_ray=use_ray,
                                                 ray_address=ray_address, desc="goodput"):  # fmt: skip
            for part in file_result:
                share_steps(part, steps_seen)
            parts.extend(file_result)
            stats.add(file_stats)
    return parts, stats


def analyze(
    paths: Sequence[Path],
    *,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The report for these span files, read in bounded memory (see :func:`analyze_parts`)."""
    from lens_rl.analysis import no_gc

    parts, stats = analyze_parts(paths, jobs=jobs, use_ray=use_ray, ray_address=ray_address)
    with no_gc():
        return report_from_parts(parts, files=stats.files, skipped_lines=stats.skipped, notes=stats.notes, **options)


def rollup(records: Iterable[Mapping[str, Any]], **options: Any) -> dict[str, Any]:
    """The goodput report for span records of any number of processes (in memory; see ``report_from_parts``)."""
    by_process: dict[tuple[str, int, int], list[Mapping[str, Any]]] = defaultdict(list)
    for rec in records:
        by_process[process_of(rec)].append(rec)
    return report_from_parts((process_part(k, v) for k, v in by_process.items()), **options)


def spans_to_records(spans: Iterable[Any]) -> list[dict[str, Any]]:
    """File-store records for finished OpenTelemetry spans (e.g. from the pytest fixture)."""
    from lens_rl.exporters.file import span_record

    return [span_record(s) for s in spans]


# ---------------------------------------------------------------------- the table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:5.1f}%"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def format_table(report: Mapping[str, Any], *, all_steps: bool = False) -> str:
    """The report as a human-readable table: at most 20 step rows unless ``all_steps``."""
    lines = _headline(report)
    lines += ["", _HEAD, _row("job", report["job"]["seconds"], report["job"]["goodput"], _wall(report["job"]))]
    steps = report["steps"]
    if steps:
        lines.append("")
        many = not all_steps and len(steps) > MAX_STEP_ROWS
        shown = steps[: MAX_STEP_ROWS // 2] + [None] + steps[-(MAX_STEP_ROWS // 2):] if many else steps
        for step in shown:
            if step is None:
                lines.append(f"  ... {len(steps) - MAX_STEP_ROWS} more steps (--steps all, or --steps A-B)")
                continue
            mark = " (incomplete: its umbrella never ended)" if step.get("incomplete") else ""
            lines.append(_row(f"step {step['step']}", step["seconds"], step["goodput"], _wall(step) + mark))
    lines += _phase_table(report)
    lines += _group_lines(report)
    lines += _straggler_lines(report)
    return "\n".join(lines)


_HEAD = f"{'':30s}" + "".join(f"{b:>12s}" for b in BUCKETS) + f"{'goodput':>10s}"


def _row(label: str, seconds: Mapping[str, float], ratio: float | None, extra: str = "") -> str:
    return f"{label:30s}" + "".join(f"{seconds.get(b, 0.0):11.2f}s" for b in BUCKETS) + f"{_pct(ratio):>10s}{extra}"


def _wall(row: Mapping[str, Any]) -> str:
    if row.get("wall_s") is None:
        return ""
    unattributed = row.get("unattributed_s")
    return f"   wall {row['wall_s']:.2f}s" + ("" if unattributed is None else f", unattributed {unattributed:.2f}s")


def _headline(report: Mapping[str, Any]) -> list[str]:
    job = report["job"]
    lines = [f"goodput {_pct(report['goodput']).strip()} (productive over the whole job's wall, start-up included)   "
             f"steady state {_pct(report['steady_state_goodput']).strip()} "
             f"(steps after the first {report['warmup_steps']})",
             f"job view: {job['view']}; runs: {', '.join(report['runs']) or '-'}; spans: {report['spans']}"
             + ("; SAMPLED run: seconds are those of the sampled phases, ratios are estimates"
                if report.get("sampled") else "")]  # fmt: skip
    st = report["step_time"]
    if st["max_s"] is not None:
        slow = ", ".join(f"{s['step']} ({s['wall_s']:.2f}s)" for s in report["slowest_steps"])
        lines.append(f"step time p50 {_secs(st['p50_s'])}  p95 {_secs(st['p95_s'])}  max {_secs(st['max_s'])};"
                     f"  slowest steps: {slow}")  # fmt: skip
    lines += [f"note: {note}" for note in report.get("notes", ())]
    return lines


def _phase_table(report: Mapping[str, Any]) -> list[str]:
    if not report["phases"]:
        return []
    lines = ["", f"{'phase':30s}{'group':>16s}{'bucket':>12s}{'count':>8s}{'total':>11s}{'mean':>10s}{'p95':>10s}"
                 f"{'share':>8s}{'tokens/s':>11s}",
             "  (share: of the job's wall for the driver's phases, of the group's lifetimes for a worker group's)"]  # fmt: skip
    for ph in report["phases"]:
        tps = "-" if ph["tokens_per_s"] is None else f"{ph['tokens_per_s']:.0f}"
        lines.append(f"{str(ph['phase'])[:29]:30s}{str(ph['worker_group'])[:15]:>16s}{str(ph['bucket'] or '-'):>12s}"
                     f"{ph['count']:8d}{ph['total_s']:10.2f}s{ph['mean_s'] or 0:9.3f}s{ph['p95_s'] or 0:9.3f}s"
                     f"{_pct(ph['share']):>8s}{tps:>11s}")  # fmt: skip
    for un in report.get("unbucketed_phases", ()):
        hint = f"; did you mean {un['did_you_mean']!r}?" if un["did_you_mean"] else ""
        lines.append(f"  unbucketed: {un['phase']!r} ({un['worker_group']}) covers {un['share'] * 100:.0f}% of the "
                     f"steps' wall and counts in no bucket (pass bucket=, or name it as the table does{hint})")  # fmt: skip
    return lines


def _group_lines(report: Mapping[str, Any]) -> list[str]:
    job = report["job"]
    lines = ["", "per worker group and rank: resource-seconds (a worker's uncovered lifetime is idle"
             + ("; concurrent phases overlap, so seconds can sum to more than wall time" if report.get("concurrent")
                else "") + ")"]  # fmt: skip
    for group in report["worker_groups"]:
        label = f"group {group['worker_group']} (x{group['processes']})"
        if group["worker_group"] == "driver" and job["view"] == "driver":
            lines.append(f"{label:30s}the job row above is its wall-clock view; lifetime {group['wall_s']:.2f}s")
            continue
        lines.append(_row(label, group["seconds"], group["goodput"], f"   lifetime {group['wall_s']:.2f}s"))
    ranks = report["ranks"]
    shown_ranks = ranks if len(ranks) <= 32 else sorted(ranks, key=lambda r: (r["goodput"] or 0.0))[:16]
    if len(ranks) > 32:
        lines.append(f"  (the 16 ranks with the lowest goodput of {len(ranks)})")
    for rank in shown_ranks:
        if rank["worker_group"] == "driver" and job["view"] == "driver":
            continue
        lines.append(_row(f"  {rank['worker_group']} rank {rank['rank']}", rank["seconds"], rank["goodput"]))
    return lines


def _straggler_lines(report: Mapping[str, Any]) -> list[str]:
    strag = report["stragglers"]
    if not strag["per_step"]:
        return []
    persistent = ", ".join(f"{p['worker_group']} rank {p['rank']} ({p['steps_flagged']}/{p['of_steps']} steps)"
                           for p in strag["persistent"]) or "none"  # fmt: skip
    lines = ["", f"stragglers: {len(strag['per_step'])} (rank, step, phase) over the group median; "
                 f"persistent: {persistent}"]  # fmt: skip
    for s in sorted(strag["per_step"], key=lambda s: -s["over_median"])[:5]:
        lines.append(f"  step {s['step']}: {s['worker_group']} rank {s['rank']} {s['phase']} "
                     f"+{s['over_median'] * 100:.0f}% over the median")  # fmt: skip
    return lines
