"""The goodput report's rows per phase, per worker group and per rank, the unbucketed phases it names and the
job's throughput: what :func:`lens_rl.offline.rollup.goodput.report_from_parts` lays out from the merged parts.

Example::

    rows = phase_rows(processes, job_wall_s=12.5)
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import replace
from typing import Any

from lens_rl.buckets import closest_phase_name, goodput_of
from lens_rl.offline.read.parts import BUCKETS, PhasePart, ProcessPart
from lens_rl.offline.rollup.bulk import quantile_s
from lens_rl.offline.rollup.throughput import job_gpus, phase_rates, step_tokens

__all__ = [
    "UNATTRIBUTED_SHARE",
    "UNBUCKETED_SHARE",
    "group_and_rank_rows",
    "phase_rows",
    "throughput_row",
    "unbucketed_rows",
    "warning_rows",
]

#: An unbucketed leaf phase covering more of the steps' wall than this is named, with a did-you-mean.
UNBUCKETED_SHARE = 0.05
#: Unattributed time over this share of the steps' wall is named, with where it falls.
UNATTRIBUTED_SHARE = 0.20
_NONE = array("q")  # (a phase's durations, left out of a merge: never grown)


def throughput_row(
    processes: list[ProcessPart], step_rows: list[dict[str, Any]], walls_ns: list[int]
) -> dict[str, Any]:
    """The job's GPUs and end-to-end tokens per second per GPU, for the run (complete steps); each step row
    gains ``tokens`` and ``e2e_tokens_per_s_per_gpu`` (:mod:`lens_rl.offline.rollup.throughput`)."""
    gpus = job_gpus(processes)
    tokens = step_tokens(processes)
    total = wall = 0.0
    for row, ns in zip(step_rows, walls_ns, strict=True):
        count = tokens.get(row["step"])
        row["tokens"] = count
        rate = count / (ns / 1e9) / gpus if count and ns > 0 and gpus else None
        row["e2e_tokens_per_s_per_gpu"] = None if rate is None else round(rate, 3)
        if count and not row["incomplete"]:
            total += count
            wall += ns / 1e9
    return {
        "gpus": gpus,
        "tokens": total or None,
        "e2e_tokens_per_s_per_gpu": round(total / wall / gpus, 3) if total and wall > 0 and gpus else None,
    }


def phase_rows(
    processes: list[ProcessPart], job_wall_s: float | None, steps_wall_s: float | None = None
) -> list[dict[str, Any]]:
    """Every process's phases, by worker group: count, total (inclusive) and exclusive seconds, mean, p95,
    tokens/s, and the exclusive seconds' share of the group's time (the driver's: the job's wall; a worker
    group's: its processes' lifetimes), so a parent phase never reads as the time its children took.
    Third-party spans are no phases (never in these rows). ``steps_wall_s``: the processes are cut to
    selected steps (:func:`lens_rl.offline.rollup.selected.cut_phases`): shares are of that wall (a worker
    group's: times its processes)."""
    merged, members, lifetimes, durations = _merged_phases(processes, steps_wall_s)
    cut = steps_wall_s is not None
    rows: list[dict[str, Any]] = []
    for key, ph in merged.items():
        group = key[0]
        of_s = (job_wall_s if not cut else steps_wall_s) if group == "driver" else lifetimes.get(group, 0) / 1e9
        rows.append(_phase_row(key, ph, of_s, cut, members[key], durations[key]))
    rows.sort(
        key=lambda r: (
            r["worker_group"] != "driver",
            r["worker_group"],
            -r["total_s"],
            str(r["phase"]),
            str(r["bucket"]),
        )
    )
    return rows


#: A phase row's key: (worker group, phase name, bucket).
_Key = tuple[str, str, str | None]


def _merged_phases(
    processes: list[ProcessPart], steps_wall_s: float | None
) -> tuple[
    dict[_Key, PhasePart], dict[_Key, list[tuple[ProcessPart, PhasePart]]], dict[str, int], dict[_Key, list[array]]
]:
    """Every process's phases merged per (worker group, name, bucket), their durations kept apart (never merged),
    the processes that counted tokens for each, and each group's time in ns (its processes' lifetimes, or the
    selected steps' wall once per process)."""
    merged: dict[_Key, PhasePart] = {}
    members: dict[_Key, list[tuple[ProcessPart, PhasePart]]] = defaultdict(list)
    lifetimes: dict[str, int] = defaultdict(int)
    durations: dict[_Key, list[array]] = defaultdict(list)  # (kept out of the merge)
    for part in processes:
        group = part.key.group
        lifetimes[group] += part.lifetime_ns if steps_wall_s is None else int(steps_wall_s * 1e9)
        for (name, bucket), phase in part.phases.items():
            merged.setdefault((group, name, bucket), PhasePart()).merge(replace(phase, durations=_NONE), bound=False)
            durations[(group, name, bucket)].append(phase.durations)
            if phase.tokens:
                members[(group, name, bucket)].append((part, phase))
    return merged, members, lifetimes, durations


def _phase_row(
    key: _Key,
    ph: PhasePart,
    of_s: float | None,
    cut: bool,
    members: list[tuple[ProcessPart, PhasePart]],
    durations: list[array],
) -> dict[str, Any]:
    """One phase's row: its times, its share of ``of_s`` (the driver's or its group's time), its rates."""
    group, name, bucket = key
    is_driver = group == "driver"
    total_s = ph.total_ns / 1e9
    per_gpu, mfu = phase_rates(name, members) if ph.tokens else (None, None)
    return {
        "phase": name,
        "worker_group": group,
        "bucket": bucket,
        "count": ph.count,
        "total_s": round(total_s, 6),
        "exclusive_s": round(ph.excl_ns / 1e9, 6),
        "mean_s": round(total_s / ph.count, 6) if ph.count else None,
        "p95_s": _p95(ph, durations, cut),
        "share": round(ph.excl_ns / 1e9 / of_s, 6) if of_s else None,
        "share_of": ("steps wall" if cut else "job wall")
        if is_driver
        else ("group steps wall" if cut else "group lifetime"),
        "tokens_per_s": round(ph.tokens / (ph.token_ns / 1e9), 3) if ph.token_ns > 0 and ph.tokens > 0 else None,
        "tokens_per_s_per_gpu": None if per_gpu is None else round(per_gpu, 3),
        "mfu": None if mfu is None else round(mfu, 6),
    }


def _p95(phase: PhasePart, durations: list[array], cut: bool) -> float | None:
    """A phase's p95 in seconds from its parts' durations (None: no span, or, ``cut`` to steps, a table made
    without its durations)."""
    if not phase.count or (cut and sum(map(len, durations)) == 0):
        return None
    return round(quantile_s(phase, 0.95, durations) or 0.0, 6)


def unbucketed_rows(processes: list[ProcessPart], steps_wall_s: float) -> list[dict[str, Any]]:
    """Leaf phases with no bucket inside the steps covering more than 5 % of the steps' wall (per process of
    their group): time no bucket counts, most likely a name lens_rl does not know."""
    if steps_wall_s <= 0:
        return []
    leaf: dict[tuple[str, str], int] = defaultdict(int)
    members: dict[str, int] = defaultdict(int)
    for part in processes:
        members[part.key.group] += 1
        for (name, bucket), phase in part.phases.items():
            if bucket is None and phase.leaf_ns > 0:
                leaf[(part.key.group, name)] += phase.leaf_ns
    rows = []
    for (group, name), ns in leaf.items():
        share = ns / 1e9 / (steps_wall_s * members[group])
        if share > UNBUCKETED_SHARE:
            rows.append(
                {
                    "phase": name,
                    "worker_group": group,
                    "total_s": round(ns / 1e9, 6),
                    "share": round(share, 6),
                    "did_you_mean": closest_phase_name(str(name)),
                }
            )
    return sorted(rows, key=lambda r: (-r["share"], r["worker_group"], str(r["phase"])))


def group_and_rank_rows(processes: list[ProcessPart]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """Resource-seconds per worker group and per rank (a worker's uncovered lifetime is idle), and whether any
    process's bucket seconds sum past its lifetime (concurrent phases)."""
    groups: dict[str, dict[str, Any]] = {}
    ranks = []
    concurrent = False
    for part in processes:
        if part.borrowed:
            continue  # third-party spans alone (a vLLM engine's process): its time is its caller's
        group, rank, pid = part.key.group, part.key.rank, part.key.pid
        seconds = part.seconds()
        wall_s = part.lifetime_ns / 1e9
        concurrent = concurrent or (wall_s > 0 and sum(seconds.values()) > wall_s * 1.001)
        entry = groups.setdefault(
            group, {"worker_group": group, "processes": 0, "seconds": dict.fromkeys(BUCKETS, 0.0), "wall_s": 0.0}
        )
        entry["processes"] += 1
        entry["wall_s"] += wall_s
        for b in BUCKETS:
            entry["seconds"][b] += seconds[b]
        ranks.append(
            {
                "worker_group": group,
                "rank": rank,
                "pid": pid,
                "attempt": part.key.attempt,
                "seconds": {b: round(s, 6) for b, s in seconds.items()},
                "goodput": goodput_of(seconds),
                "wall_s": round(wall_s, 6),
            }
        )
    group_rows = [
        {
            **e,
            "seconds": {b: round(s, 6) for b, s in e["seconds"].items()},
            "goodput": goodput_of(e["seconds"]),
            "wall_s": round(e["wall_s"], 6),
        }
        for e in groups.values()
    ]
    group_rows.sort(key=lambda r: (r["worker_group"] != "driver", r["worker_group"]))
    ranks.sort(key=lambda r: (r["worker_group"] != "driver", r["worker_group"], r["rank"], r["attempt"], r["pid"]))
    return group_rows, ranks, concurrent


def warning_rows(
    view: list[ProcessPart], step_rows: list[dict[str, Any]], selected: bool = False
) -> list[dict[str, Any]]:
    """What looks like a mistake in the job's instrumentation, said (``--json`` ``warnings``, each with a
    ``kind`` and a ``message``): a bucketed phase that encloses whole steps (``step_inside_phase``: its
    bucket does not apply to the steps); unattributed time over :data:`UNATTRIBUTED_SHARE` of the complete
    steps' wall (``unattributed``), with the stretch of the steps where most of it falls (between which
    phases, on which process; ``selected``: the step rows are ``--steps A-B``'s, and where it falls is said to
    be the whole job's: the gaps are kept per process, not per step)."""
    out: list[dict[str, Any]] = []
    enclosing: dict[tuple[str, Any, Any], int] = defaultdict(int)
    for part in view:
        for (name, bucket), count in part.enclosing.items():
            enclosing[(part.key.group, name, bucket)] += count
    for (group, name, bucket), count in sorted(enclosing.items(), key=lambda kv: str(kv[0])):
        out.append(
            {
                "kind": "step_inside_phase",
                "phase": name,
                "bucket": bucket,
                "worker_group": group,
                "steps": count,
                "message": f"{count} step umbrella(s) lie inside the {bucket} phase {name!r} ({group}): its "
                "bucket does not apply to the steps (their time no phase of theirs covers is unattributed "
                "there, yet counts as "
                f"{bucket} in the job's figure); open the phase inside the step, or give it no bucket",
            }
        )
    unattributed = _unattributed_warning(view, step_rows, selected)
    if unattributed is not None:
        out.append(unattributed)
    return out


def _where(gaps: list[tuple[int, tuple[str, str], ProcessPart]], row: dict[str, Any], selected: bool = False) -> str:
    """The largest gap of the steps' umbrellas (ns, (phase before, phase after), process) written into the
    unattributed warning's ``row``, and said for its message."""
    ns, (before, after), part = max(gaps, key=lambda g: (g[0], g[1]))
    of = sum(g[0] for g in gaps)
    row.update(
        {
            "between": [before, after],
            "worker_group": part.key.group,
            "rank": part.key.rank,
            "pid": part.key.pid,
            "gap_s": round(ns / 1e9, 6),
            "gap_share": round(ns / of, 6) if of else None,
        }
    )
    if not of:
        return ""
    return (
        f"; {'over the whole job, ' if selected else ''}most of it ({ns / of * 100:.0f}%) between {before!r} and "
        f"{after!r} on "
        f"{part.key.group} rank {part.key.rank} (pid {part.key.pid})"
    )


def _unattributed_warning(
    view: list[ProcessPart], step_rows: list[dict[str, Any]], selected: bool = False
) -> dict[str, Any] | None:
    """The ``unattributed`` warning when over :data:`UNATTRIBUTED_SHARE` of the complete steps' wall is
    unattributed (with where most of it falls), else None."""
    complete = [r for r in step_rows if not r["incomplete"]]
    wall = sum(r["wall_s"] for r in complete)
    unattributed = sum(r["unattributed_s"] for r in complete)
    if wall > 0 and unattributed / wall > UNATTRIBUTED_SHARE:
        gaps = [(ns, key, part) for part in view for key, ns in part.gaps.items()]
        row: dict[str, Any] = {
            "kind": "unattributed",
            "share": round(unattributed / wall, 6),
            "unattributed_s": round(unattributed, 6),
        }
        where = _where(gaps, row, selected) if gaps else ""
        row["message"] = (
            f"{unattributed / wall * 100:.0f}% of the steps' wall is unattributed (no bucketed phase covers it)"
            f"{where}: a phase is likely missing there"
        )
        return row
    return None
