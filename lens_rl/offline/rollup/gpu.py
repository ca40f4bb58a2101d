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
  measured time), ``gpu_idle_gap`` (stretches of 2 s or more where every device of a group read idle while
  the group ran, by the phases on either side), ``gpu_unavailable`` (a device flagged unavailable, or with
  no utilisation counter: its figures are null, never 0 %): :mod:`lens_rl.offline.rollup.gpu_warnings`.

Example::

    gpu, warnings = gpu_rollup(parts, devices, lines)
    gpu_goodput(gpu, wall_s)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from lens_rl.offline.read.parts import NO_STEP, merged_gpu
from lens_rl.offline.rollup.gpu_memo import Keeping, reused
from lens_rl.offline.rollup.gpu_prefix import Digest, SpanPrefix, base_of, phase_sums, settle
from lens_rl.offline.rollup.gpu_warnings import idle_gaps, idle_in_productive, unavailable

__all__ = ["gpu_goodput", "gpu_rollup"]

#: the measures a device's timeline integrates (:mod:`lens_rl.offline.read.gpu_join`), in its column order
MEASURES = ("known", "busy", "idle", "sm_known", "sm", "tensor_known", "tensor")
_K, _BUSY, _IDLE, _SMK, _SM, _TK, _T = range(len(MEASURES))
#: the productive union's place among a process's interval sets (spans, hull, steps, productive)
_PRODUCTIVE = 3
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


class _Queries:
    """One process's intervals to join (its spans, its first to last span, each step's first to last span, its
    productive spans' union), and what its devices answered: each measure summed over them (the devices'
    mean once :meth:`mean` ran) and the memory peak. A device answers every process using it in turn, its
    timeline built once and dropped (a day of 64 devices' timelines at once would not fit)."""

    def __init__(self, intervals: list[tuple[Any, Any]]) -> None:
        self.intervals = intervals
        self.sums = [np.zeros((len(lo), len(MEASURES))) for lo, _hi in intervals]
        self.mem = [np.full(len(lo), np.nan) for lo, _hi in intervals]
        self.counts = np.zeros(len(MEASURES))
        self.devices = 0

    def asked(self, line: Timeline) -> list[Any]:
        """What one device answers (each interval set's integrals and memory peaks, and what it measures)."""
        # (the productive union's memory peaks are never read: its integrals only)
        out = [line.joined(lo, hi, k != _PRODUCTIVE) if len(lo) else None for k, (lo, hi) in enumerate(self.intervals)]
        return [*out, line.measured]

    def answer(self, answered: list[Any]) -> None:
        """One device's answer (:meth:`asked`) added in (devices in the same order every look: the same sums)."""
        for got, sums, mem in zip(answered[:-1], self.sums, self.mem, strict=True):
            if got is not None:
                sums += got[0]
                if got[1] is not None:
                    np.fmax(mem, got[1], out=mem)
        self.counts += answered[-1]
        self.devices += 1

    def mean(self) -> None:
        """Sums over devices as the devices' mean (each measure over the devices that have it)."""
        counts = self.counts.copy()
        counts[[_K, _BUSY, _IDLE]] = counts[_K]
        counts[[_SMK, _SM]] = counts[_SMK]
        counts[[_TK, _T]] = counts[_TK]
        for sums in self.sums:
            sums /= np.maximum(counts, 1)


def _merged_gpu(parts: Iterable[Any]) -> dict[Any, Any]:
    """Each GPU process's span columns (its parts' merged; the parts are left as they are)."""
    out: dict[Any, Any] = {}
    for part in parts:
        if part.gpu is not None:
            out[part.key] = merged_gpu(out.get(part.key), part.gpu)
    return out


def gpu_rollup(
    parts: Iterable[Any],
    devices: Mapping[str, Any],
    lines: Mapping[str, Timeline],
    each: Callable[[Callable[[str], Any], Iterable[str]], Iterator[Any]] = map,
    kept: Mapping[str, SpanPrefix] | None = None,
    keep: dict[str, SpanPrefix] | None = None,
    keeping: Keeping | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``gpu`` section (``devices``, ``phases``, ``steps``, ``ranks``, ``goodput`` before the wall is
    known) and the GPU warnings, from the parts, the sampled devices and their timelines by UUID (``lines``
    may build each when asked: each is asked for once). ``each`` maps the work of one device over the
    devices, in order (``map``, or a thread pool's: a timeline's numpy work lets go of the GIL). ``kept``:
    what an earlier look settled (:mod:`lens_rl.offline.rollup.gpu_prefix`, by ``repr`` of the process's key):
    only the spans after it are joined; ``keep``: filled with what this look settles, for the next;
    ``keeping``: the steps and productive intervals kept (:mod:`lens_rl.offline.rollup.gpu_memo`) in and out."""
    parts = list(parts)
    processes = sorted(_merged_gpu(parts).items())
    users: dict[str, list[Any]] = {}
    queries: dict[Any, _Queries] = {}
    columns: dict[Any, tuple[Any, ...]] = {}
    bases: dict[Any, tuple[SpanPrefix | None, int, list[str]]] = {}
    limits: dict[str, int] = {}
    memos: dict[Any, tuple[Any, ...]] = {}
    hashed: dict[Any, Digest] = {}
    keyed: dict[Any, tuple[Digest, Digest]] = {}
    spans_of: dict[Any, tuple[Any, ...]] = {}
    for key, (uuids, starts_a, ends_a, keys, index_a, steps_a) in processes:
        for uuid in uuids:
            users.setdefault(uuid, []).append(key)
        starts, ends = np.frombuffer(starts_a, np.int64), np.frombuffer(ends_a, np.int64)
        index, span_steps = np.frombuffer(index_a, np.int32), np.frombuffer(steps_a, np.int64)
        values, step_lo, step_hi = _step_hulls(span_steps, starts, ends)
        productive = _productive(keys, index, starts, ends)
        hull = (np.array([starts.min()]), np.array([ends.max()])) if starts.size else (starts, ends)
        mine = set(uuids)
        answering = [u for u in devices if u in mine and u in lines]
        prior = kept.get(repr(key)) if kept else None
        hashed[key] = Digest(starts, ends)
        base = base_of(prior, answering, starts, ends, keys, hashed[key])
        bases[key] = (prior if base else None, base, answering)
        memo = keeping.memos.get(repr(key)) if keeping is not None else None
        s_n, p_n = 0, 0
        keyed[key] = (Digest(values, step_lo, step_hi), Digest(*productive))
        if memo is not None and memo.devices == answering:  # (kept steps and productive intervals not joined)
            s_n, s_sums, s_peaks = reused(memo.steps, keyed[key][0])
            p_n, p_sums, _none = reused(memo.productive, keyed[key][1], peaks=False)
            memos[key] = (s_n, s_sums, s_peaks, p_n, p_sums)
        asked = [(step_lo[s_n:], step_hi[s_n:]), (productive[0][p_n:], productive[1][p_n:])]
        queries[key] = _Queries([(starts[base:], ends[base:]), hull, *asked])
        spans_of[key] = (values, step_lo, step_hi, productive)
        if keeping is not None:
            keeping.note_opens(devices, answering, [starts, ends, hull, (step_lo, step_hi), productive])
        columns[key] = (uuids, starts, ends, keys, index, values)

    def device(uuid: str) -> tuple[Any, ...]:
        """One device's timeline built, asked by each process using it, and dropped."""
        line = lines.get(uuid)
        if line is not None and line.a.size:
            limits[uuid] = int(line.a[-1])  # (a span ending before it: its join is final)
        row = _device_row(uuid, devices[uuid], line, [_who(k) for k in users.get(uuid, [])])
        if keeping is not None and keeping.on_line is not None and line is not None:
            keeping.on_line(uuid, line)
        if line is None or uuid not in users:
            return row, line is not None and bool(line.measured[_K]), None, []
        return row, bool(line.measured[_K]), line.idle_intervals(), [queries[k].asked(line) for k in users[uuid]]

    device_rows, idle, util_read = [], {}, set()
    # (answers added in device order: the sums are the same whichever way ``each`` runs the devices)
    for uuid, (row, read, idle_at, answers) in zip(devices, each(device, devices), strict=True):
        device_rows.append(row)
        if read:
            util_read.add(uuid)
        if idle_at is not None:
            idle[uuid] = idle_at
        for key, answered in zip(users.get(uuid, []), answers, strict=False):
            queries[key].answer(answered)
    phases: dict[tuple[str, str, Any], dict[str, Any]] = {}
    step_parts: list[tuple[Any, Any, Any]] = []
    ranks: list[dict[str, Any]] = []
    productive_busy = 0.0
    groups: dict[str, list[tuple[Any, Any]]] = {}
    for key, (prior, _base, answering) in bases.items():
        done = queries[key]
        if prior is not None and (prior.counts != done.counts.tolist() or done.devices != len(answering)):
            return gpu_rollup(parts, devices, lines, each, None, keep, keeping)  # (what it kept no longer holds)
    for key, (uuids, starts, ends, keys, index, values) in columns.items():
        done = queries[key]
        prior, base, answering = bases[key]
        if key in memos:  # (the kept rows put back among the joined, before the mean as they were kept)
            s_n, s_sums, s_peaks, p_n, p_sums = memos[key]
            if s_n:
                done.sums[2] = np.concatenate([s_sums, done.sums[2]])
                done.mem[2] = np.concatenate([s_peaks, done.mem[2]])
            if p_n:
                done.sums[_PRODUCTIVE] = np.concatenate([p_sums, done.sums[_PRODUCTIVE]])
        if keep is not None:
            limit = min((limits[u] for u in answering), default=np.iinfo(np.int64).max)
            counts = done.counts.tolist()
        if keeping is not None and keep is not None:
            step_lo, step_hi, productive = spans_of[key][1:]
            steps = (keyed[key][0], step_hi, done.sums[2], done.mem[2])
            keeping.keep(repr(key), answering, steps, (keyed[key][1], productive[1], done.sums[_PRODUCTIVE]), limit)
        done.mean()
        if keep is not None:
            got = settle(
                repr(key),
                prior,
                base,
                starts,
                ends,
                keys,
                index,
                done.sums[0],
                done.mem[0],
                answering,
                counts,
                limit,
                hashed[key],
            )
            if got is not None:
                keep[repr(key)] = got
        groups.setdefault(key.group, []).append((key, (uuids, starts, ends, keys, index)))
        if not starts.size:
            continue
        per, peaks = phase_sums(prior, base, keys, index, done.sums[0], done.mem[0])
        _phase_rows(phases, key.group, keys, index, starts, ends, per, peaks)
        step_parts.append((values, done.sums[2], done.mem[2]))
        acc = _acc()
        _add(acc, done.sums[1][0], done.mem[1][0])
        ranks.append({**_who(key), "attempt": key.attempt, "devices": list(uuids), **_sums(acc)})
        # (device-ns: the mean over its devices times their count)
        productive_busy += float(done.sums[_PRODUCTIVE][:, _BUSY].sum()) * done.devices
    phase_rows = [{"worker_group": g, "phase": p, "bucket": b, **row} for (g, p, b), row in sorted(phases.items())]
    for row in phase_rows:
        row.pop("acc", None)
    section = {
        "devices": device_rows,
        "phases": phase_rows,
        "steps": _step_rows(step_parts),
        "ranks": ranks,
        "goodput": {
            "goodput": None,
            "busy_productive_s": round(productive_busy / 1e9, 6),
            "devices": len(util_read & set(users)),
        },
    }
    warnings = idle_in_productive(phase_rows) + idle_gaps(groups, idle) + unavailable(devices, users, util_read)
    return section, warnings


def _step_rows(step_parts: list[tuple[Any, Any, Any]]) -> list[dict[str, Any]]:
    """The step rows from each process's steps, their sums and memory peaks: each step's sums added in process
    order (as :func:`_add` would, one at a time), its peak the largest of those read."""
    if not step_parts:
        return []
    values = np.concatenate([p[0] for p in step_parts])
    sums = np.concatenate([p[1] for p in step_parts])
    mem = np.concatenate([p[2] for p in step_parts])
    steps, at = np.unique(values, return_inverse=True)
    totals = np.column_stack([np.bincount(at, sums[:, m], minlength=steps.size) for m in range(len(MEASURES))])
    peaks = np.full(steps.size, -np.inf)
    np.maximum.at(peaks, at, np.nan_to_num(mem, nan=-np.inf))
    rows = []
    # (as Python floats: the same values and arithmetic, without a numpy scalar per figure of ~10^4 steps)
    for step, measures, peak in zip(steps.tolist(), totals.tolist(), peaks.tolist(), strict=True):
        acc = {"m": measures, "mem": peak if math.isfinite(peak) else None}
        rows.append({"step": step, **_sums(acc)})
    return rows


def _who(key: Any) -> dict[str, Any]:
    return {"worker_group": key.group, "rank": key.rank, "pid": key.pid}


def _step_hulls(span_steps: Any, starts: Any, ends: Any) -> tuple[Any, Any, Any]:
    """A process's steps (ints) and each one's first start and last end."""
    stepped = span_steps != NO_STEP
    mine = span_steps[stepped]
    if mine.size and (mine[1:] >= mine[:-1]).all():  # (spans in step order, as most files are: no sorting)
        first = np.flatnonzero(np.concatenate(([True], mine[1:] != mine[:-1])))
        return mine[first], np.minimum.reduceat(starts[stepped], first), np.maximum.reduceat(ends[stepped], first)
    values, at = np.unique(mine, return_inverse=True)
    lo = np.full(values.size, np.iinfo(np.int64).max)
    hi = np.full(values.size, np.iinfo(np.int64).min)
    np.minimum.at(lo, at, starts[stepped])
    np.maximum.at(hi, at, ends[stepped])
    return values, lo, hi


def _productive(keys: list[Any], index: Any, starts: Any, ends: Any) -> tuple[Any, Any]:
    """The union of a process's productive spans, as (starts, ends)."""
    mine = [i for i, (_name, bucket) in enumerate(keys) if bucket == "productive"]
    chosen = np.isin(index, mine)
    # (merge_intervals' union, vectorised: sorted by (start, end), a new interval where a start passes every
    # end before it, each one's end the largest of its members')
    order = np.lexsort((ends[chosen], starts[chosen]))
    lo, hi = starts[chosen][order], ends[chosen][order]
    if not lo.size:
        return lo, hi
    first = np.ones(lo.size, bool)
    first[1:] = lo[1:] > np.maximum.accumulate(hi)[:-1]
    at = np.flatnonzero(first)
    return lo[at], np.maximum.reduceat(hi, at)


def gpu_goodput(section: dict[str, Any], wall_s: float | None) -> None:
    """The job's GPU goodput in ``section``: busy productive GPU-seconds over the wall's GPU-seconds."""
    good = section["goodput"]
    gpu_s = (wall_s or 0) * good["devices"]
    good["gpu_s"] = round(gpu_s, 6)
    good["goodput"] = round(good["busy_productive_s"] / gpu_s, 4) if gpu_s > 0 else None


def _phase_rows(
    phases: dict[Any, Any], group: str, keys: list[Any], index: Any, starts: Any, ends: Any, per: Any, peaks: Any
) -> None:
    """One process's spans summed into the (group, phase, bucket) rows (``per`` / ``peaks``: each (phase,
    bucket)'s summed measures and memory peak, :func:`~lens_rl.offline.rollup.gpu_prefix.phase_sums`)."""
    n = len(keys)
    count = np.bincount(index, minlength=n)
    total = np.bincount(index, (ends - starts).astype(np.float64), minlength=n)
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


def _device_row(uuid: str, device: Any, line: Timeline | None, users: list[Any]) -> dict[str, Any]:
    acc = _acc()
    if line is not None:
        _add(acc, line.whole(), line.mem_max())
    return {
        "uuid": uuid,
        "host": device.host,
        "index": device.number,
        "name": device.name,
        "mem_total_bytes": device.mem_total,
        "has": list(device.has),
        "samples": int(device.t.size) + device.skipped,
        "unavailable": bool(device.unavailable),
        "processes": users,
        "files": list(device.files),
        **_sums(acc),
    }
