"""GPU truth: each span of a GPU process joined to its devices' samples, rolled up per (group, phase), step,
rank and device, the job's GPU goodput, and the GPU warnings (``--json`` ``gpu``, typed in
:mod:`lens_rl.offline.rollup.schema`).

* A process's devices are those its resource names (``rl.gpu.uuids``); a process naming none has no GPU
  figures. A span's figures are its devices' mean: ``gpu_busy`` (time-weighted utilisation, a fraction,
  over the time with a reading), ``gpu_idle_s`` (seconds reading 0 %), the memory peak (the largest of its
  devices), SM / tensor activity where the devices have them. What a sample stands for:
  :mod:`lens_rl.offline.read.gpu_join`. A row of many spans sums their seconds, as ``total_s`` does.
* A step's figures cover each GPU process's first to last span of the step; a rank's, its first to last span.
* **GPU goodput**: busy GPU-seconds inside productive spans (each process's productive spans' union, on each
  of its devices) over the GPU-seconds of the wall (the job's wall x the devices with a reading).
* Warnings: ``gpu_idle_in_productive`` (a productive phase whose devices read idle more than 20 % of its
  measured time), ``gpu_idle_gap`` (stretches of :data:`GAP_S` or more where every device of a group read
  idle while the group ran, by the phases on either side), ``gpu_unavailable`` (a device flagged
  unavailable, or with no utilisation counter: its figures are null, never 0 %).

Example::

    gpu, warnings = gpu_rollup(parts, devices, lines)
    gpu_goodput(gpu, wall_s)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import merge_intervals
from lens_rl.offline.read.parts import NO_STEP, merged_gpu

__all__ = ["GAP_S", "IDLE_SHARE", "gpu_goodput", "gpu_rollup"]

#: a productive phase whose devices read idle past this share of its measured time is named
IDLE_SHARE = 0.2
#: a stretch at least this long (s) where every device of a group read idle is named
GAP_S = 2.0
_MOST_GAPS = 20
#: the measures a device's timeline integrates (:mod:`lens_rl.offline.read.gpu_join`), in its column order
MEASURES = ("known", "busy", "idle", "sm_known", "sm", "tensor_known", "tensor")
_K, _BUSY, _IDLE, _SMK, _SM, _TK, _T = range(len(MEASURES))
#: a device's samples as a step function (:class:`lens_rl.offline.read.gpu_join.Timeline`)
Timeline = Any


def _ratio(num: float, den: float) -> float | None:
    return round(float(num / den), 4) if den > 0 else None


def _sums(rows: Any) -> dict[str, Any]:
    """An accumulator's figures as a row's GPU fields."""
    known, busy, idle, smk, sm, tk, t = rows["m"]
    peak = rows["mem"]
    return {
        "gpu_busy": _ratio(busy, known),
        "gpu_idle_s": round(float(idle) / 1e9, 6) if known > 0 else None,
        "gpu_measured_s": round(float(known) / 1e9, 6),
        "gpu_idle_share": _ratio(idle, known),
        "mem_peak_bytes": None if peak is None else int(peak),
        "sm_active": _ratio(sm, smk),
        "tensor_active": _ratio(t, tk),
    }


def _acc() -> dict[str, Any]:
    return {"m": np.zeros(len(MEASURES)), "mem": None}


def _add(acc: dict[str, Any], measures: Any, mem: float) -> None:
    acc["m"] += measures
    if not np.isnan(mem):
        acc["mem"] = mem if acc["mem"] is None else max(acc["mem"], mem)


class _Joined:
    """One process's devices joined to intervals: the devices' mean per interval (``(n, MEASURES)`` ns) and
    memory peak (nan: none)."""

    def __init__(self, lines: list[Timeline]) -> None:
        self.lines = lines

    def over(self, starts: Any, ends: Any) -> tuple[Any, Any]:
        total = np.zeros((len(starts), len(MEASURES)))
        mem = np.full(len(starts), np.nan)
        counts = np.zeros(len(MEASURES))
        for line in self.lines:
            total += line.integrals(starts, ends)
            counts += line.rates.any(axis=0) if line.rates.size else 0
            with np.errstate(invalid="ignore"):
                mem = np.fmax(mem, line.mem_peak(starts, ends))
        counts[[_K, _BUSY, _IDLE]] = counts[_K]
        counts[[_SMK, _SM]] = counts[_SMK]
        counts[[_TK, _T]] = counts[_TK]
        return total / np.maximum(counts, 1), mem


def _merged_gpu(parts: Iterable[Any]) -> dict[Any, Any]:
    """Each GPU process's span columns (its parts' merged; the parts are left as they are)."""
    out: dict[Any, Any] = {}
    for part in parts:
        if part.gpu is not None:
            out[part.key] = merged_gpu(out.get(part.key), part.gpu)
    return out


def gpu_rollup(
    parts: Iterable[Any], devices: Mapping[str, Any], lines: Mapping[str, Timeline]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``gpu`` section (``devices``, ``phases``, ``steps``, ``ranks``, ``goodput`` before the wall is
    known) and the GPU warnings, from the parts, the sampled devices and their timelines (by UUID)."""
    processes = _merged_gpu(parts)
    phases: dict[tuple[str, str, Any], dict[str, Any]] = {}
    steps: dict[int, dict[str, Any]] = {}
    ranks: list[dict[str, Any]] = []
    users: dict[str, list[dict[str, Any]]] = {}
    productive = np.zeros(len(MEASURES))
    groups: dict[str, list[tuple[Any, Any]]] = {}
    for key, (uuids, starts_a, ends_a, keys, index_a, steps_a) in sorted(processes.items()):
        who = {"worker_group": key.group, "rank": key.rank, "pid": key.pid}
        for uuid in uuids:
            users.setdefault(uuid, []).append(who)
        joined = _Joined([lines[u] for u in uuids if u in lines])
        starts, ends = np.frombuffer(starts_a, np.int64), np.frombuffer(ends_a, np.int64)
        index, span_steps = np.frombuffer(index_a, np.int32), np.frombuffer(steps_a, np.int64)
        groups.setdefault(key.group, []).append((key, (uuids, starts, ends, keys, index)))
        if not starts.size:
            continue
        sums, mem = joined.over(starts, ends)
        _phase_rows(phases, key.group, keys, index, starts, ends, sums, mem)
        _step_rows(steps, joined, span_steps, starts, ends)
        lo, hi = np.array([starts.min()]), np.array([ends.max()])
        whole, peak = joined.over(lo, hi)
        acc = _acc()
        _add(acc, whole[0], peak[0])
        ranks.append({**who, "attempt": key.attempt, "devices": list(uuids), **_sums(acc)})
        mine = [i for i, (_name, bucket) in enumerate(keys) if bucket == "productive"]
        if mine:
            chosen = np.isin(index, mine)
            union = np.array(merge_intervals(zip(starts[chosen].tolist(), ends[chosen].tolist(), strict=True)))
            if union.size:
                # (device-ns: the mean over its devices times their count)
                productive += joined.over(union[:, 0], union[:, 1])[0].sum(axis=0) * len(joined.lines)
    used = sorted({u for u in users if u in lines and lines[u].rates[:, _K].any()})
    phase_rows = [{"worker_group": g, "phase": p, "bucket": b, **row} for (g, p, b), row in sorted(phases.items())]
    for row in phase_rows:
        row.pop("acc", None)
    section = {
        "devices": _device_rows(devices, lines, users),
        "phases": phase_rows,
        "steps": [{"step": s, **_sums(acc)} for s, acc in sorted(steps.items())],
        "ranks": ranks,
        "goodput": {
            "goodput": None,
            "busy_productive_s": round(float(productive[_BUSY]) / 1e9, 6),
            "devices": len(used),
        },
    }
    warnings = _idle_in_productive(phase_rows) + _gaps(groups, lines) + _unavailable(devices, users, lines)
    return section, warnings


def gpu_goodput(section: dict[str, Any], wall_s: float | None) -> None:
    """The job's GPU goodput in ``section``: busy productive GPU-seconds over the wall's GPU-seconds."""
    good = section["goodput"]
    gpu_s = (wall_s or 0) * good["devices"]
    good["gpu_s"] = round(gpu_s, 6)
    good["goodput"] = round(good["busy_productive_s"] / gpu_s, 4) if gpu_s > 0 else None


def _phase_rows(
    phases: dict[Any, Any], group: str, keys: list[Any], index: Any, starts: Any, ends: Any, sums: Any, mem: Any
) -> None:
    """One process's spans summed into the (group, phase, bucket) rows."""
    n = len(keys)
    per = np.column_stack([np.bincount(index, sums[:, m], minlength=n) for m in range(len(MEASURES))])
    count = np.bincount(index, minlength=n)
    total = np.bincount(index, (ends - starts).astype(np.float64), minlength=n)
    peaks = np.full(n, -np.inf)
    np.maximum.at(peaks, index, np.nan_to_num(mem, nan=-np.inf))
    for i, (name, bucket) in enumerate(keys):
        if not count[i]:
            continue
        row = phases.get((group, str(name), bucket))
        if row is None:
            row = phases[(group, str(name), bucket)] = {"count": 0, "total_s": 0.0, "acc": _acc()}
        row["count"] += int(count[i])
        row["total_s"] = round(row["total_s"] + float(total[i]) / 1e9, 6)
        _add(row["acc"], per[i], peaks[i] if np.isfinite(peaks[i]) else np.nan)
        row.update(_sums(row["acc"]))


def _step_rows(steps: dict[int, Any], joined: _Joined, span_steps: Any, starts: Any, ends: Any) -> None:
    """One process's steps (first to last span of each) summed into the step rows."""
    stepped = span_steps != NO_STEP
    if not stepped.any():
        return
    values, at = np.unique(span_steps[stepped], return_inverse=True)
    lo = np.full(values.size, np.iinfo(np.int64).max)
    hi = np.full(values.size, np.iinfo(np.int64).min)
    np.minimum.at(lo, at, starts[stepped])
    np.maximum.at(hi, at, ends[stepped])
    sums, mem = joined.over(lo, hi)
    for i, step in enumerate(values.tolist()):
        acc = steps.get(step)
        if acc is None:
            acc = steps[step] = _acc()
        _add(acc, sums[i], mem[i])


def _device_rows(devices: Mapping[str, Any], lines: Mapping[str, Timeline], users: Mapping[str, Any]) -> list[Any]:
    rows = []
    for uuid, device in devices.items():
        acc = _acc()
        line = lines.get(uuid)
        if line is not None:
            whole = line.integrals(line.a[:1], line.b[-1:])[0]
            _add(acc, whole, float(np.nanmax(line.mem)) if not np.isnan(line.mem).all() else np.nan)
        rows.append(
            {
                "uuid": uuid,
                "host": device.host,
                "index": device.number,
                "name": device.name,
                "mem_total_bytes": device.mem_total,
                "has": list(device.has),
                "samples": int(device.t.size),
                "unavailable": bool(device.unavailable),
                "processes": users.get(uuid, []),
                "files": list(device.files),
                **_sums(acc),
            }
        )
    return rows


def _idle_in_productive(phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in phases:
        share = row["gpu_idle_share"]
        if row["bucket"] == "productive" and share is not None and share > IDLE_SHARE:
            out.append(
                {
                    "kind": "gpu_idle_in_productive",
                    "message": f"{row['phase']} ({row['worker_group']}) is productive by the clock, but its GPUs "
                    f"read idle {share:.0%} of its time ({row['gpu_idle_s']:.1f} s): waiting on something?",
                    "phase": row["phase"],
                    "bucket": row["bucket"],
                    "worker_group": row["worker_group"],
                    "share": share,
                    "gpu_idle_s": row["gpu_idle_s"],
                }
            )
    return out


def _gaps(groups: Mapping[str, list[tuple[Any, Any]]], lines: Mapping[str, Timeline]) -> list[dict[str, Any]]:
    """``gpu_idle_gap`` warnings: per group, the stretches where every one of its devices read idle while the
    group ran, by the phases on either side (the group's span that ended last before the stretch, the one
    that started first after it)."""
    out = []
    for group, members in sorted(groups.items()):
        uuids = sorted({u for _key, cols in members for u in cols[0] if u in lines})
        spans = [cols for _key, cols in members if cols[1].size]
        if not uuids or not spans:
            continue
        starts = np.concatenate([c[1] for c in spans])
        ends = np.concatenate([c[2] for c in spans])
        names = np.concatenate([np.array([str(k[0]) for k in c[3]], dtype=object)[c[4]] for c in spans])
        idle = [(int(starts.min()), int(ends.max()))]
        for uuid in uuids:
            idle = _intersect(idle, lines[uuid].idle_intervals().tolist())
        found: dict[tuple[str, str], list[float]] = {}
        for lo, hi in idle:
            if hi - lo < GAP_S * 1e9:
                continue
            before = ends <= hi
            before &= ~((starts <= lo) & (ends >= hi))
            after = (starts >= lo) & ~((starts <= lo) & (ends >= hi))
            name_before = str(names[before][np.argmax(ends[before])]) if before.any() else "start"
            name_after = str(names[after][np.argmin(starts[after])]) if after.any() else "end"
            got = found.setdefault((name_before, name_after), [0, 0.0, 0.0, lo / 1e9])
            got[0] += 1
            got[1] += float(hi - lo) / 1e9
            got[2] = max(got[2], float(hi - lo) / 1e9)
        for (name_before, name_after), (count, total, longest, first) in sorted(
            found.items(), key=lambda item: -item[1][1]
        )[:_MOST_GAPS]:
            out.append(
                {
                    "kind": "gpu_idle_gap",
                    "message": f"every GPU of {group} read idle between {name_before} and {name_after}: "
                    f"{int(count)} stretch(es) of {GAP_S:g} s or more, {total:.1f} s in all (longest {longest:.1f} s)",
                    "worker_group": group,
                    "between": [name_before, name_after],
                    "gaps": int(count),
                    "gap_s": round(total, 6),
                    "longest_s": round(longest, 6),
                    "first_at_s": round(float(first), 6),
                }
            )
    return out


def _intersect(a: list[Any], b: list[Any]) -> list[tuple[int, int]]:
    """The intersection of two sorted, disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _unavailable(
    devices: Mapping[str, Any], users: Mapping[str, Any], lines: Mapping[str, Timeline]
) -> list[dict[str, Any]]:
    """``gpu_unavailable``: a device flagged unavailable, or with no utilisation reading at all."""
    out = []
    for uuid, device in devices.items():
        line = lines.get(uuid)
        if device.unavailable:
            why = "reads 0 on every counter while its memory is in use"
        elif "util" not in device.has:
            why = "has no utilisation counter"
        elif line is None or not line.rates[:, _K].any():
            why = "gave no utilisation reading"
        else:
            continue
        out.append(
            {
                "kind": "gpu_unavailable",
                "message": f"GPU {uuid} ({device.name or '?'} on {device.host or '?'}) {why}: "
                "its figures read null (unavailable), never 0 %",
                "uuid": uuid,
                "host": device.host,
                "processes": len(users.get(uuid, [])),
            }
        )
    return out
