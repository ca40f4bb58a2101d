"""``--steps A-B``: the report's figures over the selected steps, from the numbers the parts keep per step
(the job view's step rows, each process's :class:`~lens_rl.offline.read.phase_steps.PhaseSteps`); no span is
read again.

* **Headline** (``goodput``, ``selection``): the selected complete steps' productive seconds over their wall
  (the step rows summed: a step whose umbrella never ended is out, as in every step figure).
* **Phases**: each phase's spans in those steps: count, total, exclusive, mean, p95, tokens/s, tokens/s per
  GPU and MFU (each phase keeps its spans' durations and tokens per step); ``share`` of the steps' wall
  (the driver's) or of it times the group's processes (a worker group's). Spans outside every step
  (start-up, a final save) are out.
* **Unbucketed phases**: the unbucketed leaves' time in those steps over their wall.
* **Worker groups and ranks**: a process's phases' exclusive seconds in those steps by bucket over the steps'
  wall; a worker's wall not covered is idle (the driver's is not: it orchestrates). Processes with no phase
  in the steps are left out.

* **GPU** (``gpu``): joined to the spans of the selected complete steps alone (:func:`cut_gpu`: phases, ranks,
  steps, warnings), its device rows over those steps' walls (:func:`selected_window`) and its goodput over
  their wall times the devices.

Job-wide by nature, whatever ``--steps`` says (``selection["job_wide"]``): the ``job`` row (start-up
included), ``attempts``, ``requests`` (request spans carry no step), the ``step_inside_phase`` warnings,
and where the ``unattributed`` warning says most of the time falls (``between``, ``gap_s``: the gaps are
kept per process, not per step; its share is the selected steps').

Example::

    row = selection_row(rows, walls_ns, productive_ns, (2, 3))     # {"steps": [2, 3], "goodput": ...}
"""

from __future__ import annotations

from array import array
from collections.abc import Collection
from dataclasses import replace
from typing import Any

import numpy as np

from lens_rl.buckets import goodput_of
from lens_rl.offline.read.intervals import merge_intervals
from lens_rl.offline.read.parts import BUCKETS, PhasePart, ProcessPart
from lens_rl.offline.rollup.bulk import seconds_rounded
from lens_rl.offline.rollup.steps import step_windows
from lens_rl.offline.rollup.stragglers import in_range

__all__ = [
    "JOB_WIDE",
    "cut_gpu",
    "cut_gpu_steps",
    "cut_phases",
    "incomplete_steps",
    "selected_window",
    "selection_row",
    "steps_group_and_rank_rows",
]

#: The report's parts that cover the whole job whatever ``--steps`` selects.
JOB_WIDE = (
    "job",
    "attempts",
    "requests",
    "warnings.step_inside_phase",
    "warnings.unattributed.between",
)


def selection_row(
    rows: list[dict[str, Any]], walls_ns: list[int], productive_ns: list[int], steps: tuple[int, int]
) -> dict[str, Any]:
    """The selected steps' figures: their complete steps' bucket seconds, wall and unattributed time summed,
    goodput = productive / wall; what stays job-wide named in ``job_wide``."""
    taken = [n for n, row in enumerate(rows) if not row["incomplete"]]
    ns = dict.fromkeys(BUCKETS, 0.0)
    for n in taken:
        for b in BUCKETS:
            ns[b] += rows[n]["seconds"][b]
    wall = sum(walls_ns[n] for n in taken)
    return {
        "steps": [steps[0], steps[1]],
        "complete_steps": len(taken),
        "seconds": {b: round(s, 6) for b, s in ns.items()},
        "wall_s": round(wall / 1e9, 6),
        "unattributed_s": round(sum(rows[n]["unattributed_s"] for n in taken), 6),
        "goodput": sum(productive_ns[n] for n in taken) / wall if wall else None,
        "job_wide": list(JOB_WIDE),
    }


def incomplete_steps(rows: list[dict[str, Any]]) -> frozenset[Any]:
    """The selected steps left out of the figures (their umbrella never ended)."""
    return frozenset(row["step"] for row in rows if row["incomplete"])


def _runs(steps: tuple[int, int], skip: Collection[Any]) -> list[tuple[int, int]]:
    """The ranges of ``steps`` left once the ``skip`` steps are taken out."""
    out, lo = [], steps[0]
    for step in sorted(s for s in skip if type(s) is int and steps[0] <= s <= steps[1]):
        if step > lo:
            out.append((lo, step - 1))
        lo = step + 1
    if lo <= steps[1]:
        out.append((lo, steps[1]))
    return out


def _phase_in(table: Any, runs: list[tuple[int, int]]) -> PhasePart:
    """A :class:`PhaseSteps`' spans in the ``runs`` of steps as one phase's numbers: count, total and
    exclusive ns, tokens, FLOPs, and the durations for its p95 where the table keeps them."""
    phase = PhasePart()
    timed = True
    for run in runs:
        window = table.window(run)
        phase.count += window.spans
        phase.total_ns += window.total_ns
        phase.excl_ns += window.excl_ns
        phase.token_ns += window.token_ns
        phase.leaf_ns += window.leaf_ns
        phase.tokens += window.tokens
        phase.flops += window.flops
        phase.flops_tokens += window.flops_tokens
        if window.durations is None:
            timed = False
        else:
            phase.durations.extend(window.durations)
    if not timed:
        phase.durations = array("q")
    return phase


def cut_phases(processes: list[ProcessPart], steps: tuple[int, int], skip: Collection[Any] = ()) -> list[ProcessPart]:
    """Each process with a phase in ``steps`` (less ``skip``), its ``phases`` those steps' only: counts,
    times, tokens, FLOPs and durations, as if the job had only those steps."""
    runs = _runs(steps, skip)
    out = []
    for part in processes:
        phases = {}
        for key, table in part.phase_steps.items():
            phase = _phase_in(table, runs)
            if phase.count:
                phases[key] = phase
        if phases:
            out.append(replace(part, phases=phases))
    return out


def _step_ns(part: ProcessPart, steps: tuple[int, int], skip: Collection[Any]) -> dict[str, int]:
    """A part's bucket ns from its own step rows (the driver's, or every process's without one: its
    concurrent spans counted once over the wall, as the headline's are) in ``steps`` less ``skip``."""
    ns = dict.fromkeys(BUCKETS, 0)
    for step, sp in part.steps.items():
        if type(step) is int and steps[0] <= step <= steps[1] and step not in skip:
            for b, value in zip(BUCKETS, sp.ns, strict=True):
                ns[b] += value
    return ns


def steps_group_and_rank_rows(
    cut: list[ProcessPart], wall_ns: int, steps: tuple[int, int], skip: Collection[Any] = ()
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Worker-group and rank rows over the selected steps' wall ``wall_ns`` from :func:`cut_phases`' parts:
    their bucket ns in ``steps`` (less ``skip``): from their step rows where they keep them (the driver's),
    else their phases' exclusive ns; a worker's wall no bucket covers is idle."""
    groups: dict[str, dict[str, Any]] = {}
    ranks = []
    wall_s = round(wall_ns / 1e9, 6)
    for part in cut:
        ns = _step_ns(part, steps, skip) if part.steps else None
        if ns is None:
            ns = dict.fromkeys(BUCKETS, 0)
            for (_name, bucket), phase in part.phases.items():
                if bucket is not None:
                    ns[bucket] += phase.excl_ns
        if not part.is_driver:
            ns["idle"] += max(wall_ns - sum(ns.values()), 0)
        seconds = dict(zip(BUCKETS, seconds_rounded([ns[b] for b in BUCKETS]), strict=True))
        group = part.key.group
        entry = groups.setdefault(
            group,
            {"worker_group": group, "processes": 0, "seconds": None, "wall_s": 0.0, "ns": dict.fromkeys(BUCKETS, 0)},
        )
        entry["processes"] += 1
        entry["wall_s"] += wall_ns / 1e9
        for b in BUCKETS:
            entry["ns"][b] += ns[b]
        ranks.append(
            {
                "worker_group": group,
                "rank": part.key.rank,
                "pid": part.key.pid,
                "attempt": part.key.attempt,
                "seconds": seconds,
                "goodput": goodput_of({b: ns[b] / 1e9 for b in BUCKETS}),
                "wall_s": wall_s,
            }
        )
    group_rows = []
    for e in groups.values():
        total = e.pop("ns")
        group_rows.append(
            {
                **e,
                "seconds": dict(zip(BUCKETS, seconds_rounded([total[b] for b in BUCKETS]), strict=True)),
                "goodput": goodput_of({b: total[b] / 1e9 for b in BUCKETS}),
                "wall_s": round(e["wall_s"], 6),
            }
        )
    group_rows.sort(key=lambda r: (r["worker_group"] != "driver", r["worker_group"]))
    ranks.sort(key=lambda r: (r["worker_group"] != "driver", r["worker_group"], r["rank"], r["attempt"], r["pid"]))
    return group_rows, ranks


def selected_window(view: list[ProcessPart], rows: list[dict[str, Any]], steps: tuple[int, int]) -> dict[str, Any]:
    """The selected complete steps (``steps``: a frozenset) and their walls merged (``walls``: ``[(start, end)]``
    ns, the view's umbrellas'): what the GPU section is joined over under ``--steps``."""
    complete = frozenset(row["step"] for row in rows if not row["incomplete"] and type(row["step"]) is int)
    windows = step_windows(view, steps)
    return {"steps": complete, "walls": merge_intervals(w for step in complete for w in windows.get(step, ()))}


def cut_gpu(columns: Any, complete: Collection[int]) -> Any:
    """A GPU process's span columns (:mod:`lens_rl.offline.read.gpu_spans`) cut to the spans of the ``complete``
    steps (None: none there)."""
    uuids, starts, ends, keys, index, steps = columns
    chosen = np.isin(np.frombuffer(steps, np.int64) if len(steps) else np.zeros(0, np.int64), list(complete))
    if not chosen.any():
        return None
    at = np.flatnonzero(chosen)

    def take(values: array) -> array:
        out = array(values.typecode)
        out.frombytes(np.frombuffer(values, {"q": np.int64, "i": np.int32}[values.typecode])[at].tobytes())
        return out

    return (uuids, take(starts), take(ends), keys, take(index), take(steps))


def cut_gpu_steps(report: Any, steps: tuple[int, int] | None) -> Any:
    """``report``'s GPU section's step rows, those of ``steps`` only (None: all); the rest of it is job-wide."""
    gpu = report.get("gpu")
    if steps is not None and gpu:
        gpu["steps"] = [row for row in gpu["steps"] if in_range(row["step"], steps)]
    return report
