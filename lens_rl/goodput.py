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
from lens_rl.buckets import goodput_of, union_length
from lens_rl.store import ReadStats, process_of

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
    if len(view) == 1:  # one driver: its steps as they are (no copy of every step)
        combined = {step: sp for step, sp in view[0].steps.items() if _in_range(step, steps)}
    else:
        combined = {}
        for part in view:
            for step, sp in part.steps.items():
                if _in_range(step, steps):
                    combined.setdefault(step, StepPart()).merge(sp)
    rows = []
    for step in sorted(combined, key=step_key):
        sp = combined[step]
        windows = merge_intervals(pairs(sp.umbrellas)) if sp.umbrellas else (
            [(sp.lo, sp.hi)] if sp.lo is not None and sp.hi is not None else [])  # fmt: skip
        wall_s = union_length(windows) / 1e9
        covered_s = covered([sp.bucketed], windows) / 1e9 if sp.bucketed else 0.0
        seconds = dict(zip(BUCKETS, sp.seconds, strict=True))
        rows.append({"step": step, "seconds": _bucket_dict(seconds), "wall_s": round(wall_s, 6),
                     "unattributed_s": round(max(wall_s - covered_s, 0.0), 6), "goodput": goodput_of(seconds)})  # fmt: skip
    return rows


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
) -> dict[str, Any]:
    """The goodput report (the module docstring's schema) from process parts; ``steps`` (A, B) selects steps."""
    processes = merge_parts(parts)
    driver = [p for p in processes if p.is_driver]
    view = driver or processes
    job_seconds = dict.fromkeys(BUCKETS, 0.0)
    for part in view:
        for b in BUCKETS:
            job_seconds[b] += part.seconds[b]
    jobs = merge_intervals(j for p in view for j in p.jobs)
    job_wall_s = union_length(jobs) / 1e9 if jobs else None
    job_covered_s = covered((p.bucketed for p in view), jobs) / 1e9
    step_rows = _step_rows(view, steps)
    steady = [r for r in step_rows[max(warmup_steps, 0):]]
    steady_seconds = dict.fromkeys(BUCKETS, 0.0)
    for row in steady:
        for b in BUCKETS:
            steady_seconds[b] += row["seconds"][b]
    walls = [r["wall_s"] for r in step_rows]
    ratio = goodput_of(job_seconds)

    # Phases as the job view saw them (the driver's loop: how long did generation take?); tokens
    # recorded anywhere (a vLLM worker's generation under the same phase and bucket) count for it.
    phases = []
    merged_phases: dict[tuple[str, str | None], PhasePart] = {}
    holders: dict[tuple[str, str | None], int] = defaultdict(int)
    for part in view:
        for key, phase in part.phases.items():
            merged_phases.setdefault(key, PhasePart()).merge(phase)
            holders[key] += 1
    tokens: dict[tuple[str, str | None], float] = defaultdict(float)
    for part in processes:
        for key, phase in part.phases.items():
            tokens[key] += phase.tokens
    for (name, bucket), ph in merged_phases.items():
        share = ph.total_s / (job_wall_s * holders[(name, bucket)]) if job_wall_s else None
        ph.tokens, ph.token_s = tokens[(name, bucket)], ph.total_s
        phases.append({
            "phase": name, "bucket": bucket, "count": ph.count, "total_s": round(ph.total_s, 6),
            "mean_s": round(ph.total_s / ph.count, 6) if ph.count else None,
            "p95_s": None if not ph.count else round(_percentile(ph.durations, 0.95) or 0.0, 6),
            "share": None if share is None else round(share, 6),
            "tokens_per_s": round(ph.tokens / ph.token_s, 3) if ph.token_s > 0 and ph.tokens > 0 else None,
        })  # fmt: skip
    phases.sort(key=lambda r: (-(r["total_s"] or 0.0), str(r["phase"]), str(r["bucket"])))  # type: ignore[operator]

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
    return {
        "schema": SCHEMA,
        "goodput": ratio,
        "steady_state_goodput": goodput_of(steady_seconds) if steady else None,
        "warmup_steps": warmup_steps,
        "job": {
            "view": "driver" if driver else "all processes",
            "seconds": _bucket_dict(job_seconds),
            "wall_s": None if job_wall_s is None else round(job_wall_s, 6),
            "unattributed_s": None if job_wall_s is None else round(max(job_wall_s - job_covered_s, 0.0), 6),
            "goodput": ratio,
        },
        "steps": step_rows,
        "step_time": {"p50_s": _percentile(walls, 0.5), "p95_s": _percentile(walls, 0.95),
                      "max_s": max(walls) if walls else None},  # fmt: skip
        "slowest_steps": [{"step": r["step"], "wall_s": r["wall_s"]}
                          for r in sorted(step_rows, key=lambda r: (-r["wall_s"], step_key(r["step"])))[:5]],  # fmt: skip
        "phases": phases,
        "worker_groups": sorted(group_rows, key=lambda r: (r["worker_group"] != "driver", r["worker_group"])),
        "ranks": sorted(ranks, key=lambda r: (r["worker_group"] != "driver", r["worker_group"], r["rank"], r["pid"])),
        "stragglers": _stragglers(processes, steps),
        "sampled": any(p.sampled for p in processes),
        "concurrent": concurrent,
        "runs": sorted(set().union(*(p.runs for p in processes))) if processes else [],
        "spans": sum(p.spans for p in processes),
        "files": files,
        "skipped_lines": skipped_lines,
    }


def analyze_parts(
    paths: Sequence[Path], *, jobs: int | None = None, use_ray: bool = False, ray_address: str | None = None
) -> tuple[list[ProcessPart], ReadStats]:
    """Every span file reduced to process parts, one file per worker at a time (identical whatever ``jobs``)."""
    from lens_rl.analysis import map_files, no_gc

    parts: list[ProcessPart] = []
    stats = ReadStats()
    driver_in_run = any(Path(p).name.startswith("spans-driver-") for p in paths)
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
        return report_from_parts(parts, files=stats.files, skipped_lines=stats.skipped, **options)


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
    lines = []
    head = f"{'':30s}" + "".join(f"{b:>12s}" for b in BUCKETS) + f"{'goodput':>10s}"

    def row(label: str, seconds: Mapping[str, float], ratio: float | None, extra: str = "") -> str:
        return f"{label:30s}" + "".join(f"{seconds.get(b, 0.0):11.2f}s" for b in BUCKETS) + f"{_pct(ratio):>10s}{extra}"

    job = report["job"]
    lines.append(f"goodput {_pct(report['goodput']).strip()} (whole job, start-up included)   "
                 f"steady state {_pct(report['steady_state_goodput']).strip()} "
                 f"(steps after the first {report['warmup_steps']})")  # fmt: skip
    lines.append(f"job view: {job['view']}; runs: {', '.join(report['runs']) or '-'}; spans: {report['spans']}"
                 + ("; SAMPLED run: seconds are those of the sampled phases, ratios are estimates"
                    if report.get("sampled") else ""))  # fmt: skip
    st = report["step_time"]
    if st["max_s"] is not None:
        slow = ", ".join(f"{s['step']} ({s['wall_s']:.2f}s)" for s in report["slowest_steps"])
        lines.append(f"step time p50 {_secs(st['p50_s'])}  p95 {_secs(st['p95_s'])}  max {_secs(st['max_s'])};"
                     f"  slowest steps: {slow}")  # fmt: skip
    lines.append("")
    lines.append(head)
    wall = "" if job["wall_s"] is None else f"   wall {job['wall_s']:.2f}s, unattributed {job['unattributed_s']:.2f}s"
    lines.append(row("job", job["seconds"], job["goodput"], wall))
    steps = report["steps"]
    if steps:
        lines.append("")
        shown = steps if all_steps or len(steps) <= MAX_STEP_ROWS else steps[: MAX_STEP_ROWS // 2] + [None] + steps[-(MAX_STEP_ROWS // 2):]
        for step in shown:
            if step is None:
                lines.append(f"  ... {len(steps) - MAX_STEP_ROWS} more steps (--steps all, or --steps A-B)")
                continue
            extra = f"   wall {step['wall_s']:.2f}s, unattributed {step['unattributed_s']:.2f}s"
            lines.append(row(f"step {step['step']}", step["seconds"], step["goodput"], extra))
    if report["phases"]:
        lines.append("")
        lines.append(f"{'phase':30s}{'bucket':>12s}{'count':>8s}{'total':>11s}{'mean':>10s}{'p95':>10s}"
                     f"{'share':>8s}{'tokens/s':>11s}")  # fmt: skip
        for ph in report["phases"]:
            tps = "-" if ph["tokens_per_s"] is None else f"{ph['tokens_per_s']:.0f}"
            lines.append(f"{str(ph['phase'])[:29]:30s}{str(ph['bucket'] or '-'):>12s}{ph['count']:8d}{ph['total_s']:10.2f}s"
                         f"{ph['mean_s'] or 0:9.3f}s{ph['p95_s'] or 0:9.3f}s{_pct(ph['share']):>8s}{tps:>11s}")  # fmt: skip
    lines.append("")
    lines.append("per worker group and rank: resource-seconds (a worker's uncovered lifetime is idle"
                 + ("; concurrent phases overlap, so seconds can sum to more than wall time" if report.get("concurrent")
                    else "") + ")")  # fmt: skip
    for group in report["worker_groups"]:
        label = f"group {group['worker_group']} (x{group['processes']})"
        if group["worker_group"] == "driver" and job["view"] == "driver":
            lines.append(f"{label:30s}the job row above is its wall-clock view; lifetime {group['wall_s']:.2f}s")
            continue
        lines.append(row(label, group["seconds"], group["goodput"], f"   lifetime {group['wall_s']:.2f}s"))
    ranks = report["ranks"]
    shown_ranks = ranks if len(ranks) <= 32 else sorted(ranks, key=lambda r: (r["goodput"] or 0.0))[:16]
    if len(ranks) > 32:
        lines.append(f"  (the 16 ranks with the lowest goodput of {len(ranks)})")
    for rank in shown_ranks:
        if rank["worker_group"] == "driver" and job["view"] == "driver":
            continue
        lines.append(row(f"  {rank['worker_group']} rank {rank['rank']}", rank["seconds"], rank["goodput"]))
    strag = report["stragglers"]
    if strag["per_step"]:
        lines.append("")
        persistent = ", ".join(f"{p['worker_group']} rank {p['rank']} ({p['steps_flagged']}/{p['of_steps']} steps)"
                               for p in strag["persistent"]) or "none"  # fmt: skip
        lines.append(f"stragglers: {len(strag['per_step'])} (rank, step, phase) over the group median; "
                     f"persistent: {persistent}")  # fmt: skip
        for s in sorted(strag["per_step"], key=lambda s: -s["over_median"])[:5]:
            lines.append(f"  step {s['step']}: {s['worker_group']} rank {s['rank']} {s['phase']} "
                         f"+{s['over_median'] * 100:.0f}% over the median")  # fmt: skip
    return "\n".join(lines)
