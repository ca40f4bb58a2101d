"""Every GPU sample file of a run read into per-device samples, through the refresh cache where one is kept.

A sample file sits beside the span files (``gpu-<host>-<pid>.jsonl``, :mod:`lens_rl.store.gpu`). Through the
cache, each file's samples so far are kept in ``gpu-<file>.samples`` in the cache's folder: a JSON line
(lens_rl's cache key, the file's identity, size, mtime and ctime, where the read stopped and a hash of the
bytes before it, the blocks' headers and sample counts, the read's line counts) then the arrays (each block's
times, then its values device by device) as raw little-endian bytes, their lengths checked against the file's
before any is read (nothing read from it can allocate more than its own size, nothing runs code). A file that
grew is read from where the last read stopped; one that shrank, was rewritten or replaced is read cold (the
checks of :mod:`lens_rl.offline.run.index`). Results are identical to a cold read.

Example::

    devices, stats = read_devices(gpu_files([run_dir]), cache_folder(run_dir))
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from lens_rl.offline.read.gpu_join import flagged_unavailable, timeline
from lens_rl.offline.read.gpu_samples import SCANNER, Block, read_samples
from lens_rl.offline.read.gpu_window import ColdError
from lens_rl.offline.rollup.gpu import gpu_goodput, gpu_rollup
from lens_rl.offline.rollup.gpu_hosts import device_keys
from lens_rl.offline.run.cache_files import MAX_RECORDS
from lens_rl.offline.run.disk import append_to, write_atomic
from lens_rl.offline.run.gpu_device import Device
from lens_rl.offline.run.gpu_entry import entry_record, load_entry
from lens_rl.offline.run.gpu_kept import load_kept, save_kept
from lens_rl.offline.run.gpu_lines import Windows, keeping_for, read_window, save_lines, window_line
from lens_rl.offline.run.index import complete_end, file_identity, grown_only, tail_hash
from lens_rl.offline.run.parallel import default_jobs, map_files
from lens_rl.store import ReadStats
from lens_rl.store.gpu import GPU_COUNTERS, GpuDevice, GpuHead, gpu_files

__all__ = [
    "LANE_BINS",
    "Device",
    "GpuLook",
    "gpu_join",
    "gpu_lanes",
    "gpu_look",
    "gpu_read",
    "read_devices",
    "read_file_blocks",
    "read_run",
    "sample_files",
    "with_gpu",
]

#: the columns of the report's GPU lanes (each the devices' mean busy over its stretch of the window)
LANE_BINS = 240

_log = logging.getLogger("lens_rl")


def _entry_path(cache: str, path: Path) -> Path:
    return Path(cache) / f"gpu-{path.name}.samples"


def _load(
    cache: str, path: Path, identity: list[Any], stat: os.stat_result, end: int
) -> tuple[Any, list[Block], Any] | None:
    """The kept read of ``path`` (its last record's meta, every block, the last one's arrays with room for
    the samples up to ``end``: :func:`~lens_rl.offline.run.gpu_entry.load_entry`), where it is this
    lens_rl's, of this very file, and the file only grew since; None otherwise."""
    try:
        meta, blocks, carry = load_entry(_entry_path(cache, path), end)
        if meta.get("identity") != identity or not 0 <= int(meta["end"]) <= stat.st_size:
            return None  # (another file's, or a planted end: a read resumed there would seek outside the file)
        if not grown_only(path, stat, meta["state"], int(meta["end"]), bytes.fromhex(meta["tail"])):
            return None
        return meta, blocks, carry
    except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
        return None


def read_file_blocks(path: Path, stats: ReadStats, cache: str | None = None) -> list[Block]:
    """One sample file's blocks: cold, or through the cache (only the bytes new since the last read, kept as
    a record appended to the file's entry)."""
    if cache is None:
        return read_samples(path, stats)[0]
    try:
        stat, ident = file_identity(path)
        end = complete_end(path, stat.st_size)
    except OSError:
        return read_samples(path, stats)[0]
    identity = list(ident)
    kept = _load(cache, path, identity, stat, end)
    if kept is not None and not kept[1] and end > int(kept[0]["end"]):
        kept = None  # (a file kept with no sample, its header only (the sampler had just opened it): read anew)
    fresh = ReadStats()
    new: list[Block] = []
    if kept is None:
        blocks, stop, _head = read_samples(path, fresh, stop=end)
        new = blocks
        lines, skipped = fresh.lines, fresh.skipped
        stats.notes.extend(fresh.notes)
        stats.files += fresh.files
        if not fresh.files:  # (no sample file after all: nothing kept)
            return blocks
    else:
        meta, blocks, carry = kept
        lines, skipped, stop = int(meta["lines"]), int(meta["skipped"]), int(meta["end"])
        if end > stop and blocks:
            # (the new samples read on into the last kept block's arrays: its rows then theirs, no copy)
            read, stop, _head = read_samples(path, fresh, start=stop, head=blocks[-1].head, stop=end, into=carry)
            lines, skipped = lines + fresh.lines, skipped + fresh.skipped
            if read and carry is not None:  # (the first block: the last kept one, continued)
                kept_rows, first = blocks[-1].t.size, read[0]
                new = [Block(first.head, first.t[kept_rows:], first.v[kept_rows:])] if first.t.size > kept_rows else []
                new += read[1:]
                blocks = blocks[:-1] + read
            else:
                new, blocks = read, blocks + read
        stats.files += 1
    stats.lines += lines
    stats.skipped += skipped
    state = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    if kept is None or state != kept[0]["state"]:
        meta = {"identity": identity, "state": state, "end": stop, "tail": tail_hash(path, stop).hex()}
        record = entry_record({**meta, "lines": lines, "skipped": skipped}, new)
        entry = _entry_path(cache, path)
        try:
            if kept is None or kept[0]["records"] >= MAX_RECORDS or not append_to(entry, record):
                write_atomic(entry, entry_record({**meta, "lines": lines, "skipped": skipped}, blocks))
        except OSError:
            pass
    return blocks


def _file_blocks(path: Path, cache: str | None) -> tuple[list[Block], ReadStats]:
    """One sample file's blocks and what its read found (a worker process's task)."""
    stats = ReadStats()
    return read_file_blocks(Path(path), stats, cache), stats


def read_devices(
    paths: Sequence[Path], cache: str | None = None, *, jobs: int | None = None
) -> tuple[dict[str, Device], ReadStats]:
    """Every device sampled in these files (by (host, UUID), keyed as :func:`~lens_rl.offline.rollup.gpu_hosts.
    device_keys` says: a device sampled by several files of its host, one after another as samplers took over,
    gets them all; another host's file of the same UUID is another device), and what the reads found. Files read cold are read ``jobs`` at a
    time (None: :func:`~lens_rl.offline.run.parallel.default_jobs`): on threads with the C scanner (a day
    of samples of a node, 70 MB, is ~0.15 s of one core), else on local processes (~0.65 s); files the cache
    already holds are read here (only their new bytes)."""
    stats = ReadStats()
    found: dict[tuple[Any, str], list[tuple[GpuDevice, GpuHead, Any, Any, str]]] = {}
    paths = [Path(p) for p in paths]
    if cache is not None and all(_entry_path(cache, p).is_file() for p in paths):
        jobs = 1  # (a refresh: little new to read, worker processes would cost more than they save)
    if SCANNER and jobs != 1 and len(paths) > 1:
        # (the C scanner lets go of the GIL: threads read side by side with no arrays sent between processes,
        # measured on 8 node-days: 1.8-2.1 s wall, 2.3-2.6 s CPU against 2.3-2.5 s, 3.5-3.8 s on processes)
        with ThreadPoolExecutor(max(1, min(jobs or default_jobs(), len(paths)))) as pool:  # (as map_files: 1+)
            reads: Iterable[Any] = list(pool.map(_file_blocks, paths, [cache] * len(paths)))
    else:
        reads = map_files(_file_blocks, paths, cache, jobs=jobs, desc="GPU samples")
    for path, (file_blocks, read) in zip(paths, reads, strict=True):
        stats.add(read)
        for block in file_blocks:
            for at, device in enumerate(block.head.devices):
                pieces = found.setdefault((block.head.host, device.uuid), [])
                pieces.append((device, block.head, block.t, block.v[:, at, :], path.name))
    keys = device_keys(found)
    devices: dict[str, Device] = {}
    for pair, pieces in sorted(found.items(), key=lambda kv: keys[kv[0]]):
        device, head = pieces[-1][0], pieces[-1][1]
        if len(pieces) > 1:  # (the device's own rows put together once: its timeline reads them in place)
            v_all = np.concatenate([v for *_x, v, _n in pieces])
            at = 0
            for dev, _head, t, _v, _name in pieces:
                lacks = [i for i, c in enumerate(GPU_COUNTERS) if c not in dev.has]
                if lacks:  # (a sampler writes null for them)
                    v_all[at : at + t.size, lacks] = np.nan
                at += t.size
        else:
            dev, v_all = pieces[0][0], pieces[0][3]
            lacks = [i for i, c in enumerate(GPU_COUNTERS) if c not in dev.has]
            if lacks and not np.isnan(v_all[:, lacks]).all():  # (a sampler writes null for them: most often no copy)
                v_all = v_all.copy()
                v_all[:, lacks] = np.nan
        period = np.concatenate([np.full(t.size, int(1e9 / h.hz), np.int64) for _d, h, t, _v, _n in pieces])
        devices[keys[pair]] = Device(
            device.uuid,
            head.host,
            device.name,
            device.i,
            device.mem_total,
            device.has,
            np.concatenate([t for _d, _h, t, _v, _n in pieces]) if len(pieces) > 1 else pieces[0][2],
            v_all,
            period,
            flagged_unavailable(v_all),
            tuple(dict.fromkeys(n for *_x, n in pieces)),
        )
    return devices, stats


class Timelines(Mapping[str, Any]):
    """Each device's :func:`timeline`, built when asked for and not kept (a day of 64 devices' timelines at
    once would not fit in memory); a window's, as :func:`read_window` built it."""

    def __init__(self, devices: Mapping[str, Device]) -> None:
        self.devices = {u: d for u, d in devices.items() if d.t.size}
        self.built: Mapping[str, Any] = devices.lines if isinstance(devices, Windows) else {}

    def __getitem__(self, uuid: str) -> Any:
        d = self.devices[uuid]
        if uuid in self.built:
            return self.built[uuid]
        if d.before is not None:
            return window_line(d)
        return timeline(d.t, d.v, d.period, d.unavailable)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self.devices

    def __iter__(self) -> Any:
        return iter(self.devices)

    def __len__(self) -> int:
        return len(self.devices)


class GpuLook(NamedTuple):
    """What a look found of the run's GPUs: its sample files, devices, section and warnings (None: no file)."""

    paths: list[Path]
    devices: dict[str, Device]
    section: dict[str, Any] | None
    warnings: list[dict[str, Any]]
    lines: Mapping[str, Any] = {}


def sample_files(span_paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """The sample files beside these span files (their folders'), and notes on the entries not read."""
    notes: list[str] = []
    return gpu_files({Path(p).parent for p in span_paths}, notes), notes


def read_run(paths: Sequence[Path], cache: str | None, jobs: int | None, window: bool = False) -> tuple[Any, ...]:
    """The sample files beside these span files read: (files, notes on entries not read, devices, stats);
    ``window``: through the cache, each device's window only where the kept windows hold
    (:mod:`lens_rl.offline.run.gpu_lines`: the look joins them, not a report's lanes)."""
    found, notes = sample_files(paths)
    if found and cache is not None and window:
        read = ReadStats()
        got = read_window(found, cache, read)
        if got is not None:
            return found, notes, got, read
    devices, read = read_devices(found, cache, jobs=jobs) if found else ({}, ReadStats())
    return found, notes, devices, read


def gpu_read(
    paths: Sequence[Path], stats: ReadStats, cache: str | None, jobs: int | None = None, ahead: Any = None
) -> tuple[list[Path], dict[str, Device]]:
    """The run's sample files and devices, their reads counted in ``stats`` (files, lines, bad lines, notes:
    said once on stderr each); ``jobs``: as :func:`read_devices`; ``ahead``: a reading of the same files
    started earlier (:func:`lens_rl.offline.run.gpu_ahead.read_ahead`), or None to read them now."""
    found, notes, devices, read = ahead.result() if ahead is not None else read_run(paths, cache, jobs)
    for note in notes:
        _log.warning("lens-rl: %s", note)
    stats.notes.extend(notes)
    if found:
        for note in read.notes:
            _log.warning("lens-rl: %s", note)
        stats.add(read)
    return found, devices


def gpu_join(
    found: list[Path], devices: dict[str, Device], parts: Sequence[Any], cache: str | None = None, walls: Any = None
) -> GpuLook:
    """The devices' samples joined to the parts (each with ``key`` and ``gpu``; before the rollup merges them);
    through the cache (``cache``: its folder), only the spans an earlier look had not settled
    (:mod:`lens_rl.offline.run.gpu_kept`); ``walls``: what the device rows cover (``--steps``: the selected
    steps' walls; None: the whole timeline)."""
    if not found or not devices:
        return GpuLook(found, devices, None, [])
    windows = isinstance(devices, Windows)
    lines = Timelines(devices)
    kept = load_kept(cache, found, devices) if cache is not None else None
    keep: dict[str, Any] | None = {} if cache is not None else None
    keeping = keeping_for(devices, devices.memos if isinstance(devices, Windows) else {}) if cache else None
    try:
        # (two devices' timelines built and asked at once: their numpy work lets go of the GIL; measured on the
        # 1 M-span benchmark, 1.7 s wall against 2.7 s, the same sums: answers are added in device order)
        with ThreadPoolExecutor(min(2, os.cpu_count() or 1)) as pool:
            section, warnings = gpu_rollup(parts, devices, lines, pool.map, kept, keep, keeping, walls)
    except ColdError:  # (a query before a device's window that no anchor answers: every sample read, joined cold)
        devices = read_devices(found, cache)[0]
        return gpu_join(found, devices, parts, cache, walls)
    if cache is not None and keep is not None and keeping is not None:
        save_kept(cache, found, devices, keep)
        save_lines(cache, found, devices, keeping)
    return GpuLook(found, devices, section, warnings, {} if windows else lines)


def gpu_look(
    paths: Sequence[Path],
    parts: Sequence[Any],
    stats: ReadStats,
    cache: str | None,
    jobs: int | None = None,
    ahead: Any = None,
) -> GpuLook:
    """The run's GPU samples joined to the parts (before the rollup merges them): :func:`gpu_read` then
    :func:`gpu_join`."""
    return gpu_join(*gpu_read(paths, stats, cache, jobs, ahead), parts, cache)


def with_gpu(report: Any, look: GpuLook) -> Any:
    """``report`` with the look's ``gpu`` section (its GPU goodput over the job's wall, or with ``--steps`` the
    selected steps') and warnings; a look
    with no samples leaves it as it is."""
    if look.section is not None:
        picked = report.get("selection")  # (--steps A-B: over the selected steps' wall)
        gpu_goodput(look.section, report["job"]["wall_s"] if picked is None else picked["wall_s"])
        report["gpu"] = look.section
        report["warnings"] = list(report["warnings"]) + look.warnings
    return report


def gpu_lanes(look: GpuLook, timeline: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The report's GPU lane per rank shown in ``timeline`` (its spans): the rank's devices' mean busy % in
    each of :data:`LANE_BINS` stretches of the timeline's window (None: no reading), and the stretches' start
    in ms from the window's start (the timeline's axis)."""
    if look.section is None or not timeline:
        return []
    origin = min(s["start"] for s in timeline)
    end = max(s["end"] for s in timeline)
    if end <= origin:
        return []
    edges = np.linspace(origin, end, LANE_BINS + 1).astype(np.int64)
    shown = {s["process"] for s in timeline}
    lanes = []
    for rank in look.section["ranks"]:
        label = f"{rank['worker_group']} rank {rank['rank']} (pid {rank['pid']})"
        lines = [look.lines[u] for u in rank["devices"] if u in look.lines]
        if label not in shown or not lines:
            continue
        known = busy = np.zeros(LANE_BINS)
        for line in lines:
            sums = line.integrals(edges[:-1], edges[1:])
            known, busy = known + sums[:, 0], busy + sums[:, 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            value = np.where(known > 0, 100 * busy / known, np.nan)
        lanes.append(
            {
                "process": label,
                "devices": list(rank["devices"]),
                "ms": ((edges[:-1] - origin) / 1e6).tolist(),
                "busy": [None if np.isnan(v) else round(float(v), 1) for v in value],
            }
        )
    return lanes
