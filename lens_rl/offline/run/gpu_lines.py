"""The GPU join's windows in the refresh cache: ``gpu-lines.kept``, each device's timeline before a window of
its latest samples (:mod:`lens_rl.offline.read.gpu_window`), and the state of ``gpu-steps.kept`` (each
process's settled steps and productive intervals, :mod:`lens_rl.offline.run.gpu_steps`) it goes with, for the
next look to read only the samples new since.

One MessagePack record (msgspec, typed: :class:`LinesKept`, :data:`VERSION`; no pickle, nothing in it runs
code), written whole by every look (the steps, the bulk of what is kept, are appended to their own file). A
look through it reads of each sample file only the bytes new since (its kept entry's record layout, none of
its arrays: :func:`read_window`) and builds each device's window only; the kept steps only where their file's
state is the one this record names. A record of another version,
cut short, planted, over :data:`MAX_BYTES` or not a regular file (a FIFO is never opened) is one line on
stderr and a cold join; a file rewritten, a device new or gone, samples out of order, a query the window
cannot answer: a cold join.

Example::

    window = read_window(found, cache, stats)        # devices, or None: read them whole
    save_lines(cache, found, devices, keeping)         # (keeping: filled by the join, keeping_for)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from lens_rl.offline.read.gpu_join import MEASURES, timeline
from lens_rl.offline.read.gpu_samples import Block, read_samples
from lens_rl.offline.read.gpu_window import WINDOW_NS, Before, ColdError, WindowLine, before_at
from lens_rl.offline.rollup.gpu_hosts import device_keys
from lens_rl.offline.rollup.gpu_memo import Keeping, ProcessMemo, raw
from lens_rl.offline.run.cache_files import MAX_RECORDS
from lens_rl.offline.run.disk import append_to, cache_key, write_atomic
from lens_rl.offline.run.gpu_device import Device
from lens_rl.offline.run.gpu_entry import entry_record, layout
from lens_rl.offline.run.gpu_kept import entries_of, read_kept
from lens_rl.offline.run.gpu_steps import StepsState, load_steps, save_steps
from lens_rl.offline.run.index import complete_end, file_identity, grown_only, tail_hash
from lens_rl.store import ReadStats, open_file
from lens_rl.store.gpu import GPU_COUNTERS

__all__ = [
    "MAX_BYTES",
    "VERSION",
    "LineState",
    "LinesKept",
    "Windows",
    "keeping_for",
    "load_lines",
    "read_window",
    "save_lines",
]

#: a kept windows record larger than this is neither written nor read (a device's window is ~110 KB: 7 MB at
#: 64 device-days)
MAX_BYTES = 64 << 20
#: the record's layout version (another is read as none; 2: the steps in a file of their own)
VERSION = 2
_NAME = "gpu-lines.kept"
_READ = (GPU_COUNTERS.index("util"), GPU_COUNTERS.index("sm_active"), GPU_COUNTERS.index("tensor_active"))
#: the measure each of them is known by (its time with a reading)
_KNOWN = (MEASURES.index("known"), MEASURES.index("sm_known"), MEASURES.index("tensor_known"))
_log = logging.getLogger("lens_rl")


class LineState(msgspec.Struct, frozen=True):
    """A device's timeline before its window (:class:`~lens_rl.offline.read.gpu_window.Before`'s fields as
    little-endian arrays) and the window's samples (from ``k0 - 1``: times, periods, values ``(w, 8)``); the
    arrays decoded as views into the record read, no copy."""

    uuid: str
    n: int
    k0: int
    cum: memoryview
    measured: list[bool]
    seen: list[int]
    mem: float
    idle: memoryview
    increasing: bool
    xs: memoryview
    at: memoryview
    peaks: memoryview
    t: memoryview
    h: memoryview
    v: memoryview


class LinesKept(msgspec.Struct, frozen=True):
    """What a look kept of its devices' timelines, and the token of the kept steps' state it goes with."""

    key: str
    version: int
    entries: list[tuple[str, int]]
    lines: list[LineState]
    steps: str


_decode = msgspec.msgpack.Decoder(LinesKept).decode
_encode = msgspec.msgpack.Encoder().encode


def _this_version(kept: LinesKept) -> None:
    """Raises ``ValueError`` for a record this lens_rl wrote but of another layout."""
    if kept.key == cache_key() and kept.version != VERSION:  # (this lens_rl writes only its own)
        raise ValueError(f"layout version {kept.version}, not {VERSION}")


def load_lines(cache: str, found: Sequence[Path]) -> LinesKept | None:
    """The kept windows, where they are this lens_rl's of these very sample files' entries (None: none)."""
    kept = read_kept(Path(cache) / _NAME, _decode, MAX_BYTES, "kept windows record", _this_version)
    if kept is None or kept.key != cache_key():
        return None
    now = dict(entries_of(cache, found))
    if len(now) != len(kept.entries) or any(now.get(n) != i or i < 0 for n, i in kept.entries):
        return None
    return kept


def _before(state: LineState) -> Before:
    xs = np.frombuffer(state.xs, "<i8")
    at = np.frombuffer(state.at, "<f8")
    peaks = np.frombuffer(state.peaks, "<f8")
    cum = np.frombuffer(state.cum, "<f8")
    idle = np.frombuffer(state.idle, "<i8")
    if at.size != xs.size * len(MEASURES) or peaks.size != xs.size or cum.size != len(MEASURES):
        raise ValueError("kept windows that do not add up")
    if len(state.measured) != len(MEASURES) or idle.size % 2 or not set(state.seen) <= set(_READ):
        raise ValueError("kept windows that do not add up")
    if state.k0 < 1 or (xs.size > 1 and not (xs[1:] > xs[:-1]).all()):  # (anchors looked up by bisection)
        raise ValueError("kept windows that do not add up")
    measured = np.array(state.measured, bool)
    at = at.reshape(xs.size, len(MEASURES))
    seen = tuple(state.seen)
    return Before(state.k0, cum, measured, seen, state.mem, idle.reshape(-1, 2), state.increasing, xs, at, peaks)


def _new_blocks(path: Path, cache: str, stats: ReadStats) -> tuple[list[Any], list[Block]] | None:
    """A sample file's kept blocks (header, rows) and the blocks of its bytes new since, the entry grown by
    them (as :func:`~lens_rl.offline.run.gpu.read_file_blocks` grows it); None where it cannot be read so."""
    entry = Path(cache) / f"gpu-{path.name}.samples"
    try:
        stat, ident = file_identity(path)
        end = complete_end(path, stat.st_size)
        with open_file(entry, buffering=0) as handle:
            meta, kept = layout(handle, os.fstat(handle.fileno()).st_size)
        if meta is None or meta.get("identity") != list(ident) or not 0 <= int(meta["end"]) <= stat.st_size:
            return None
        stop = int(meta["end"])
        if not kept or not grown_only(path, stat, meta["state"], stop, bytes.fromhex(meta["tail"])):
            return None
        if meta["records"] >= MAX_RECORDS:  # (the whole read writes it whole: compacted)
            return None
        fresh = ReadStats()
        new: list[Block] = []
        if end > stop:
            new, stop, _head = read_samples(path, fresh, start=stop, head=kept[-1][0], stop=end)
        state = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
        if state != meta["state"]:
            lines, skipped = int(meta["lines"]) + fresh.lines, int(meta["skipped"]) + fresh.skipped
            record = {"identity": list(ident), "state": state, "end": stop, "tail": tail_hash(path, stop).hex()}
            if not append_to(entry, entry_record({**record, "lines": lines, "skipped": skipped}, new)):
                return None
        else:
            lines, skipped = int(meta["lines"]), int(meta["skipped"])
        stats.files += 1
        stats.lines += lines
        stats.skipped += skipped  # (a resumed read's notes, as read_file_blocks's: none kept)
        return [(head, n) for head, n, _at in kept], new
    except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
        return None


class Windows(dict[str, Device]):
    """Each device's window by UUID (:func:`read_window`), its timeline (``lines``: built as the window is
    read, on the thread reading ahead: a window's is small), and the processes' kept intervals (``memos``:
    the kept steps' state ``steps``, where it is the one the windows go with; else none)."""

    lines: dict[str, WindowLine]
    memos: dict[str, ProcessMemo]
    steps: StepsState | None


def window_line(device: Device) -> WindowLine:
    """A device's timeline from its window's samples on from what came before them (``device.before``)."""
    line = timeline(device.t, device.v, device.period, device.unavailable, keep=device.before.seen)
    return WindowLine(line.window(device.before.cum), device.before)


def read_window(found: Sequence[Path], cache: str, stats: ReadStats) -> Windows | None:
    """Each device's window (:class:`~lens_rl.offline.run.gpu.Device` with ``before``): the kept samples
    from its window's start and the files' new ones, where the kept windows hold for every device (None:
    read the files whole)."""
    kept = load_lines(cache, found)
    if kept is None:
        return None
    read = ReadStats()
    new = _NewSamples()
    for path in found:
        got = _new_blocks(path, cache, read)
        if got is None:
            return None
        new.add(path.name, *got)
    keys = device_keys(new.heads)  # (each device's key, as a whole read names it: lens_rl.offline.rollup.gpu_hosts)
    states = {s.uuid: s for s in kept.lines}
    if set(states) != set(keys.values()):
        return None
    devices = Windows()
    steps = load_steps(cache)
    devices.steps = steps if steps is not None and steps.token == kept.steps else None
    devices.memos = devices.steps.memos if devices.steps is not None else {}
    try:
        for pair in sorted(new.heads, key=keys.__getitem__):
            device = _window_device(states[keys[pair]], pair, new)
            if device is None:
                return None
            devices[keys[pair]] = device
        devices.lines = {u: window_line(d) for u, d in devices.items() if d.t.size}
    except (ValueError, TypeError) as exc:  # (a record of this shape whose figures do not hold together)
        _log.warning("lens-rl: the GPU join's kept windows in %s were not used (%s): joining cold", cache, exc)
        return None
    stats.add(read)
    return devices


class _NewSamples:
    """What the files hold past the kept windows, by (host, UUID) (a device is one of its host's): the samples
    counted, the blocks read with each device's place in them, the device and header last seen, the files."""

    def __init__(self) -> None:
        self.counts: dict[tuple[Any, str], int] = {}
        self.pieces: dict[tuple[Any, str], list[tuple[Any, Any, Any, int]]] = {}
        self.heads: dict[tuple[Any, str], tuple[Any, Any]] = {}
        self.files: dict[tuple[Any, str], dict[str, None]] = {}

    def add(self, name: str, counted: Any, blocks: Any) -> None:
        """One file's new samples (:func:`_new_blocks`): ``counted`` (header, samples) pairs, ``blocks`` read."""
        for head, n in counted:
            for device in head.devices:
                pair = (head.host, device.uuid)
                self.counts[pair] = self.counts.get(pair, 0) + n
                self.heads[pair] = (device, head)
                self.files.setdefault(pair, {})[name] = None
        for block in blocks:
            for at, device in enumerate(block.head.devices):
                pair = (block.head.host, device.uuid)
                self.pieces.setdefault(pair, []).append((device, block.head, block, at))
                self.heads[pair] = (device, block.head)
                self.files.setdefault(pair, {})[name] = None


def _window_device(state: LineState, pair: tuple[Any, str], new: _NewSamples) -> Device | None:
    """One device's window: its kept samples from ``state`` and the new ones after them (None: they do not
    hold together; ValueError or TypeError: a record whose figures do not)."""
    t0, h0 = np.frombuffer(state.t, "<i8"), np.frombuffer(state.h, "<i8")
    v0 = np.frombuffer(state.v, "<f4").reshape(-1, len(GPU_COUNTERS))
    if state.n != new.counts.get(pair, -1) or not 0 < t0.size == h0.size == v0.shape[0] <= state.n:
        return None
    ts, vs, hs = [t0], [v0], [h0]
    for dev, head, block, at in new.pieces.get(pair, []):
        v = block.v[:, at, :].copy()
        v[:, [i for i, c in enumerate(GPU_COUNTERS) if c not in dev.has]] = np.nan
        ts.append(block.t)
        vs.append(v)
        hs.append(np.full(block.t.size, int(1e9 / head.hz), np.int64))
    t = np.concatenate(ts)
    if not (t[1:] > t[:-1]).all():
        return None
    dev, head = new.heads[pair]
    before = _before(state)
    skipped = state.n - t0.size
    if before.k0 - 1 != skipped:
        return None
    v_all, h_all = np.concatenate(vs), np.concatenate(hs)
    return Device(
        dev.uuid, head.host, dev.name, dev.i, dev.mem_total, dev.has, t, v_all, h_all, False,
        tuple(new.files[pair]), skipped, before,
    )  # fmt: skip


def _state(uuid: str, device: Any, line: Any, opens: list[Any]) -> LineState | None:
    """A device's state kept at its window's start, about :data:`WINDOW_NS` before its last sample (None:
    samples out of order, too few, or a device flagged unavailable or whose utilisation never read above 0
    before it: a cold join next)."""
    t, v, period = device.t, device.v, np.broadcast_to(device.period, device.t.shape)
    if device.unavailable or t.size < 3 or not (t[1:] > t[:-1]).all():
        return None
    inner = line.line if isinstance(line, WindowLine) else line
    before = line.before if isinstance(line, WindowLine) else None
    if not inner._increasing:  # (segments out of order: the memory peaks' two searches differ)
        return None
    j = int(np.searchsorted(inner.a, inner.a[-1] - WINDOW_NS, side="right"))
    j = min(max(j, 0 if before is not None else 1), inner.a.size - 1)
    first = j if before is not None else j - 1  # (the window's samples from the one before its first segment)
    if first < 0:
        return None
    # (the counters a cold timeline keeps are those some sample read: the line's own, and those before it)
    read = [c for m, c in zip(_KNOWN, _READ, strict=True) if m in inner.present]
    if before is None and not (v[:first, GPU_COUNTERS.index("util")] > 0).any():  # (nan compares False)
        return None
    try:
        got = before_at(inner, before, j, np.concatenate(opens) if opens else np.zeros(0, np.int64), read)
    except ColdError:
        return None

    return LineState(
        uuid, device.skipped + int(t.size), got.k0, raw(got.cum, "<f8"), [bool(x) for x in got.measured],
        list(got.seen), float(got.mem), raw(got.idle, "<i8"), got.increasing, raw(got.xs, "<i8"),
        raw(got.at, "<f8"), raw(got.peaks, "<f8"), raw(t[first:], "<i8"), raw(period[first:], "<i8"),
        raw(v[first:], "<f4"),
    )  # fmt: skip


def keeping_for(devices: Mapping[str, Any], memos: Mapping[str, ProcessMemo]) -> Keeping:
    """A look's :class:`~lens_rl.offline.rollup.gpu_memo.Keeping`: ``memos`` in, each device's window state
    made as its timeline is built."""
    keeping = Keeping(dict(memos))

    def on_line(uuid: str, line: Any) -> None:
        try:
            keeping.states[uuid] = _state(uuid, devices[uuid], line, keeping.opens.get(uuid, []))
        except (ValueError, TypeError, IndexError, OverflowError):  # (nothing kept: the next look joins cold)
            keeping.states[uuid] = None

    keeping.on_line = on_line
    return keeping


def save_lines(cache: str, found: Sequence[Path], devices: Mapping[str, Any], keeping: Keeping) -> None:
    """This look's windows and settled intervals kept for the next (a device with none, or a failed write: the
    next look joins cold): the steps first (:func:`~lens_rl.offline.run.gpu_steps.save_steps`: what is new
    appended to the state they were read in), then the windows naming their state."""
    states = [keeping.states.get(u) for u, d in devices.items() if d.t.size]
    record = None
    if all(s is not None for s in states):
        token = save_steps(cache, devices.steps if isinstance(devices, Windows) else None, keeping.out)
        kept = LinesKept(cache_key(), VERSION, entries_of(cache, found), states, token or "")  # type: ignore[arg-type]
        record = _encode(kept)
    try:
        if record is None or len(record) > MAX_BYTES:  # (none to keep: none left for the next look either)
            os.unlink(Path(cache) / _NAME)
        else:
            write_atomic(Path(cache) / _NAME, record)
    except OSError:
        pass
