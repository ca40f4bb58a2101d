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
  of its devices with a utilisation reading; a device's processes added, less the busy where two or more
  were productive at once: a shared device counts their union; then at most the job's wall) over the GPU-seconds of
  the wall (the job's wall x the devices with a reading): always 0..1. Productive
  time without a reading (the sampler stopped, a GPU lost) counts at the busy of the time read: unknown is
  never idle (the device gets a ``gpu_unavailable`` warning where that is a large part of its processes' time).
* Warnings: ``gpu_idle_in_productive`` (a productive phase whose devices read idle more than 20 % of its
  measured time), ``gpu_idle_gap`` (stretches of 2 s or more where every device of a group read idle while
  the group ran, by the phases on either side), ``gpu_unavailable`` (a device flagged unavailable, or with
  no utilisation counter: its figures are null, never 0 %; or without a reading for over 20 % and 2 s of its
  processes' first to last span): :mod:`lens_rl.offline.rollup.gpu_warnings`.

Example::

    gpu, warnings = gpu_rollup(parts, devices, lines)
    gpu_goodput(gpu, wall_s)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import overcounted
from lens_rl.offline.read.parts import merged_gpu
from lens_rl.offline.rollup.gpu_hosts import on_host
from lens_rl.offline.rollup.gpu_memo import PRODUCTIVE_COLUMNS, Keeping
from lens_rl.offline.rollup.gpu_prefix import SpanPrefix, phase_sums
from lens_rl.offline.rollup.gpu_process import MEASURES, PRODUCTIVE, GpuProcess, Timeline
from lens_rl.offline.rollup.gpu_step_rows import gpu_step_rows
from lens_rl.offline.rollup.gpu_warnings import idle_gaps, idle_in_productive, unavailable

__all__ = ["gpu_goodput", "gpu_rollup"]

_K, _BUSY, _IDLE, _SMK, _SM, _TK, _T = range(len(MEASURES))


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


def _merged_gpu(parts: Iterable[Any], devices: Mapping[str, Any]) -> dict[Any, Any]:
    """Each GPU process's span columns (its parts' merged; the parts are left as they are), its UUIDs those of
    the devices of its own host (:func:`~lens_rl.offline.rollup.gpu_hosts.on_host`)."""
    out: dict[Any, Any] = {}
    for part in parts:
        if part.gpu is not None:
            mine = (on_host(part.gpu[0], part.device.get("host.name"), devices), *part.gpu[1:])
            out[part.key] = merged_gpu(out.get(part.key), mine)
    return out


def gpu_rollup(
    parts: Iterable[Any],
    devices: Mapping[str, Any],
    lines: Mapping[str, Timeline],
    each: Callable[[Callable[[str], Any], Iterable[str]], Iterator[Any]] = map,
    kept: Mapping[str, SpanPrefix] | None = None,
    keep: dict[str, SpanPrefix] | None = None,
    keeping: Keeping | None = None,
    walls: Any = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``gpu`` section (``devices``, ``phases``, ``steps``, ``ranks``, ``goodput`` before the wall is
    known) and the GPU warnings, from the parts, the sampled devices and their timelines by UUID (``lines``
    may build each when asked: each is asked for once). ``each`` maps the work of one device over the
    devices, in order (``map``, or a thread pool's: a timeline's numpy work lets go of the GIL). ``kept``:
    what an earlier look settled (:mod:`lens_rl.offline.rollup.gpu_prefix`, by ``repr`` of the process's key):
    only the spans after it are joined; ``keep``: filled with what this look settles, for the next;
    ``keeping``: the steps and productive intervals kept (:mod:`lens_rl.offline.rollup.gpu_memo`) in and out;
    ``walls``: ``[(start, end)]`` ns the device rows cover (``--steps``: the selected steps' walls; None: each
    device's whole timeline)."""
    parts = list(parts)
    processes = [
        GpuProcess(k, m, devices, lines, kept, keeping) for k, m in sorted(_merged_gpu(parts, devices).items())
    ]
    users: dict[str, list[GpuProcess]] = {}
    for process in processes:
        for uuid in process.uuids:
            users.setdefault(uuid, []).append(process)
    read = _read_devices(devices, lines, users, each, keeping, walls)
    if any(process.stale() for process in processes):
        return gpu_rollup(parts, devices, lines, each, None, keep, keeping, walls)  # (what it kept no longer holds)
    rolled = _Rolled()
    for process in processes:
        process.finish(read.limits, keep, keeping)
        rolled.add(process, read.util_read)
    for uuid in rolled.device_busy:  # (less the busy of the time two of its processes were productive at once)
        rolled.device_busy[uuid] = max(rolled.device_busy[uuid] - read.overcounted.get(uuid, 0.0), 0.0)
    phase_rows = [
        {"worker_group": g, "phase": p, "bucket": b, **row} for (g, p, b), row in sorted(rolled.phases.items())
    ]
    for row in phase_rows:
        row.update(_sums(row.pop("acc")))  # (once, from every process's sums added)
    section = {
        "devices": read.rows,
        "phases": phase_rows,
        "steps": gpu_step_rows(rolled.step_parts),
        "ranks": rolled.ranks,
        "goodput": {
            "goodput": None,
            "busy_productive_s": round(sum(rolled.device_busy.values()) / 1e9, 6),
            "devices": len(read.util_read & set(users)),
            _BY_DEVICE: [rolled.device_busy[u] / 1e9 for u in devices if u in rolled.device_busy],
        },
    }
    warnings = (
        idle_in_productive(phase_rows)
        + idle_gaps(rolled.groups, read.idle)
        + unavailable(devices, users, read.util_read, read.unread)
    )
    return section, warnings


class _DeviceReads:
    """What each device's timeline answered (its row; idle stretches, unread time and busy counted twice where
    it has a utilisation reading), and the last sample of each (a span ending before it: its join is final)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.idle: dict[str, Any] = {}
        self.util_read: set[str] = set()
        self.unread: dict[str, Any] = {}
        self.overcounted: dict[str, float] = {}
        self.limits: dict[str, int] = {}


def _read_devices(
    devices: Mapping[str, Any],
    lines: Mapping[str, Timeline],
    users: Mapping[str, list[GpuProcess]],
    each: Callable[[Callable[[str], Any], Iterable[str]], Iterator[Any]],
    keeping: Keeping | None,
    walls: Any,
) -> _DeviceReads:
    """Each device's timeline built (``each`` maps the devices), asked by each process using it, and dropped;
    the processes' answers handed to them in device order."""
    out = _DeviceReads()

    def device(uuid: str) -> tuple[Any, ...]:
        """One device's timeline built, asked by each process using it, and dropped."""
        line = lines.get(uuid)
        if line is not None and line.a.size:
            out.limits[uuid] = int(line.a[-1])  # (a span ending before it: its join is final)
        row = _device_row(devices[uuid], line, [_who(p.key) for p in users.get(uuid, [])], walls)
        if keeping is not None and keeping.on_line is not None and line is not None:
            keeping.on_line(uuid, line)
        if line is None or uuid not in users:
            return row, line is not None and bool(line.measured[_K]), None, [], None, 0.0
        asked = [p.queries.asked(line) for p in users[uuid]]
        read = bool(line.measured[_K])
        twice = _overcounted_busy_ns(line, users[uuid]) if read else 0.0
        return row, read, line.idle_intervals(), asked, _unread(users[uuid], asked), twice

    # (answers added in device order: the sums are the same whichever way ``each`` runs the devices)
    for uuid, (row, read, idle_at, answers, gap, twice) in zip(devices, each(device, devices), strict=True):
        out.rows.append(row)
        if read:
            out.util_read.add(uuid)
            out.overcounted[uuid] = twice
        if read and gap is not None:
            out.unread[uuid] = gap
        if idle_at is not None:
            out.idle[uuid] = idle_at
        for process, answered in zip(users.get(uuid, []), answers, strict=False):
            process.queries.answer(answered)
    return out


class _Rolled:
    """The processes' figures added up, one process at a time (in process order): per (group, phase, bucket),
    the step parts, the rank rows, each device's productive busy and each group's processes."""

    def __init__(self) -> None:
        self.phases: dict[tuple[str, str, Any], dict[str, Any]] = {}
        self.step_parts: list[tuple[Any, Any, Any]] = []
        self.ranks: list[dict[str, Any]] = []
        self.device_busy: dict[str, float] = {}
        self.groups: dict[str, list[tuple[Any, Any]]] = {}

    def add(self, process: GpuProcess, util_read: set[str]) -> None:
        """A finished process's figures added (``util_read``: the devices with a utilisation reading)."""
        done, key, starts, ends = process.queries, process.key, process.starts, process.ends
        self.groups.setdefault(key.group, []).append((key, (process.uuids, starts, ends, process.keys, process.index)))
        if not starts.size:
            return
        per, peaks = phase_sums(process.prior, process.base, process.keys, process.index, done.sums[0], done.mem[0])
        _phase_rows(self.phases, key.group, process.keys, process.index, starts, ends, per, peaks)
        self.step_parts.append((process.values, done.sums[2], done.mem[2]))
        acc = _acc()
        _add(acc, done.sums[1][0], done.mem[1][0])
        self.ranks.append({**_who(key), "attempt": key.attempt, "devices": list(process.uuids), **_sums(acc)})
        busy_each = _productive_busy_ns(process)
        for uuid in process.uuids:
            if uuid in util_read:  # (each device that reads: its processes' busy added, clamped to its wall later)
                self.device_busy[uuid] = self.device_busy.get(uuid, 0.0) + busy_each


#: a device's time without a reading while its processes ran that is flagged ``gpu_unavailable``: this share
#: of that time, and at least this many seconds (a sampler's first sample comes a moment after a process starts)
UNREAD_SHARE, UNREAD_S = 0.2, 2.0
#: the goodput's private key until the wall is known: each reading device's busy productive seconds, unclamped
#: (:func:`gpu_goodput` takes it out)
_BY_DEVICE = "by_device_s"


def _productive_busy_ns(process: GpuProcess) -> float:
    """A process's busy ns in its productive union on each of its devices that read utilisation (the mean over
    them: a device without a reading adds nothing); its productive time without a reading (a lost GPU's,
    before the sampler's first sample) at the busy of the time read (unknown is not idle)."""
    done = process.queries
    productive = done.sums[PRODUCTIVE]
    known = float(productive[:, PRODUCTIVE_COLUMNS.index(_K)].sum())
    if known <= 0:
        return 0.0
    length = float((process.productive[1] - process.productive[0]).sum())
    return float(productive[:, PRODUCTIVE_COLUMNS.index(_BUSY)].sum()) * max(length / known, 1.0)


def _overcounted_busy_ns(line: Timeline, processes: list[GpuProcess]) -> float:
    """The busy ns of a device counted more than once when its processes' productive busy is added: where two
    or more of them were productive at once (a trainer and an engine on one GPU, both working), the busy there
    times the covers past the first (the time without a reading at the busy of the time read, as each
    process's is). 0 where one process uses it, or its processes took turns (colocated jobs mostly do)."""
    lo, hi, extra = overcounted(p.productive for p in processes)
    if not len(lo):
        return 0.0
    sums = line.joined(lo, hi, False)[0]  # (a window's line too: one before its window joins cold)
    weight = extra.astype(np.float64)
    known = float(sums[:, _K] @ weight)
    if known <= 0:
        return 0.0
    length = float((hi - lo).astype(np.float64) @ weight)
    return float(sums[:, _BUSY] @ weight) * max(length / known, 1.0)


def _unread(processes: list[GpuProcess], asked: list[list[Any]]) -> tuple[float, float] | None:
    """Seconds and share of a process's first to last span (its hull: always joined whole) without a
    utilisation reading of this device (the sampler stopped, the GPU lost), the largest of its processes',
    where past :data:`UNREAD_SHARE` and :data:`UNREAD_S`; else None."""
    worst = None
    for process, answered in zip(processes, asked, strict=True):
        (lo, hi), got = process.queries.intervals[1], answered[1]
        if got is None or not len(lo) or hi[0] <= lo[0]:
            continue
        length = int(hi[0] - lo[0])
        missing = length - float(got[0][0, _K])
        if missing / length > UNREAD_SHARE and missing >= UNREAD_S * 1e9 and (worst is None or missing > worst[0]):
            worst = (missing, missing / length)
    return None if worst is None else (round(worst[0] / 1e9, 3), round(worst[1], 4))


def _who(key: Any) -> dict[str, Any]:
    return {"worker_group": key.group, "rank": key.rank, "pid": key.pid}


def gpu_goodput(section: dict[str, Any], wall_s: float | None) -> None:
    """The job's GPU goodput in ``section``: busy productive GPU-seconds over the wall's GPU-seconds, each
    device's busy seconds (its processes' added) at most the wall (processes sharing a device, or running past
    the job's wall, never count it more than once): always 0..1."""
    good = section["goodput"]
    wall = max(wall_s or 0.0, 0.0)
    good["busy_productive_s"] = round(sum(min(s, wall) for s in good.pop(_BY_DEVICE, [])), 6)
    gpu_s = wall * good["devices"]
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


def _device_row(device: Any, line: Timeline | None, users: list[Any], walls: Any = None) -> dict[str, Any]:
    """A device's row: its figures over its whole timeline, or over ``walls`` (``[(start, end)]`` ns)."""
    acc = _acc()
    if line is not None and walls is None:
        _add(acc, line.whole(), line.mem_max())
    elif line is not None and walls:
        starts = np.array([lo for lo, _ in walls], np.int64)
        ends = np.array([hi for _, hi in walls], np.int64)
        sums, peaks = line.joined(starts, ends)
        _add(acc, sums.sum(axis=0), float(np.nanmax(peaks)) if not np.isnan(peaks).all() else np.nan)
    return {
        "uuid": device.uuid,
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
