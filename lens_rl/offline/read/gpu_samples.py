"""A GPU sample file's lines read in bulk into arrays (:class:`Block`: times and values per device and counter).

Sample lines are many (a day at 2 Hz is 172,800 per host) and all alike, so they are not decoded one by one: a
chunk of whole lines is checked against the shape its header implies (the line with every number, ``null`` and
blank taken out must read ``{"t":,"d":[[,,,,,,,],...]}``) and its numbers parsed by numpy in one call (as
integers where all are: 3.5x faster than as floats). A chunk that is not all alike (a device entry ``null`` at
a sample, a garbage line, a header again) is read line by line: the lines of the common shape in bulk, the
others decoded, a bad one skipped and counted. Bad lines: not JSON, longer than
:data:`~lens_rl.store.LINE_MAX`, another shape than the header's devices, a time outside 2000-2200, a
percentage outside 0-100, a value negative or of 10^18 or more. A line reads the same whatever its neighbours
(a run that numpy cannot read at once is read line by line, each in bulk where it can be).

Values are float32 (``nan``: ``null``, a counter the device lacks or a device not read at that sample;
exact for percentages, power and clocks, memory to 1 part in 10^7: a day of 8 devices is 350 MB, not 700);
times int64 ns, exact.

**The C scanner** (``_gpuscan.c``, built where a compiler was at hand; :data:`SCANNER`) reads the lines of
the documented shape straight into the arrays (no Python object per number: ~10x numpy's text parser) and
stops at any line it does not fully validate (a header, another shape, a sign, a number of more than 15
digits, garbage), which is then read on the path above, in its place: its results are the same.

Example::

    blocks, end = read_samples(path, stats)
    for block in blocks:
        print(block.head.host, block.t.size, block.v.shape)   # (n,), (n, devices, 8)
"""

from __future__ import annotations

import math
import os
import re
import warnings
from typing import IO, Any, NamedTuple

import numpy as np

from lens_rl.offline.read.gpu_grammar import json_shaped
from lens_rl.store import LINE_MAX, TIME_MAX_NS, TIME_MIN_NS, ReadStats, UnreadableError, loads, open_file
from lens_rl.store.files import rest_of_line, why_not
from lens_rl.store.gpu import GPU_COUNTERS, GpuHead, gpu_head

try:  # the strict scanner, built from _gpuscan.c where a compiler was at hand at install time (optional)
    from lens_rl.offline.read import _gpuscan  # type: ignore[attr-defined]
except ImportError:
    _gpuscan = None

__all__ = ["COUNTERS", "SCANNER", "Block", "device_major", "read_samples"]

#: whether sample lines are read by the C scanner (else by numpy's text parser and the checked decode)
SCANNER = _gpuscan is not None

COUNTERS = len(GPU_COUNTERS)
_PERCENT = [GPU_COUNTERS.index(c) for c in ("util", "mem_util", "sm_active", "sm_occupancy", "tensor_active")]
_HUGE = 10**18
_PERCENT_MASK = sum(1 << i for i in _PERCENT)
_CHUNK = 4 << 20
#: the most rows of the scanner's arrays allocated at once past a chunk's (a region of more: arrays in turn)
_ROWS_AT_ONCE = 1 << 20
_SKELETON_DROP = b"0123456789.-+eEnul \t\r"


#: a line's structure to blanks, keeping the commas, a line's end a comma: exactly one number between commas
_BLANKS = bytes.maketrans(b'{}[]":td\n', b"        ,")
_NOT_INT = (b".", b"-", b"+", b"e", b"E")
_TIME = re.compile(rb'^[ \t\r]*\{[ \t\r]*"t"[ \t\r]*:[ \t\r]*([^, \t\r]*)', re.M)


class Block(NamedTuple):
    """The samples under one header: ``t`` (n,) int64 ns, ``v`` (n, devices, counters) float32."""

    head: GpuHead
    t: Any
    v: Any


def _skeleton(devices: int) -> bytes:
    return b'{"t":,"d":[' + b",".join([b"[" + b"," * (COUNTERS - 1) + b"]"] * devices) + b"]}\n"


def _checked(t: Any, v: Any) -> Any:
    """Which rows are plausible (a time in range, percentages 0-100, no value negative nor 10^18 or more)."""
    ok = (t >= TIME_MIN_NS) & (t < TIME_MAX_NS)
    with np.errstate(invalid="ignore"):
        pct = v[:, :, _PERCENT]
        ok &= ~((pct < 0) | (pct > 100)).any(axis=(1, 2))
        ok &= ~((v < 0) | (v >= _HUGE)).any(axis=(1, 2))
    return ok


def _numbers(text: bytes, dtype: Any) -> Any:
    """Every number of ``text`` (one between each two commas) as ``dtype`` (None where a slot holds no
    number, or two: a line with one number short and one with one more never read as two good lines)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=dtype, sep=",")  # type: ignore[call-overload]
        except (ValueError, DeprecationWarning):
            return None


def _bulk_ints(data: bytes, lines: int, devices: int) -> tuple[Any, Any] | None:
    """``lines`` whole lines of the common shape whose numbers are all integers (no ``.``, sign or exponent:
    devices without GPM activity) parsed at once as integers, 3.5x faster than as floats (measured: 0.025 s
    against 0.088 s a 4 MB chunk); None where they are not all such."""
    if any(c in data for c in _NOT_INT):
        return None
    ints = _numbers(data.replace(b"null", b"-1").translate(_BLANKS), np.int64)  # (-1: null; no sign read)
    width = 1 + devices * COUNTERS
    if ints is None or ints.size != lines * width:
        return None
    ints = ints.reshape(lines, width)
    values = ints[:, 1:].astype(np.float64).astype(np.float32)  # (rounded as text read as a float64 is)
    values[ints[:, 1:] < 0] = np.nan
    return ints[:, 0].copy(), values.reshape(lines, devices, COUNTERS)


def _bulk(data: bytes, lines: int, devices: int) -> tuple[Any, Any] | None:
    """``lines`` whole lines of the common shape parsed at once (None where they are not all JSON or numpy
    cannot read them all: then each is read alone)."""
    if not json_shaped(data):
        return None
    parsed = _bulk_ints(data, lines, devices)
    if parsed is not None:
        return parsed
    values = _numbers(data.replace(b"null", b"nan ").translate(_BLANKS), np.float64)
    width = 1 + devices * COUNTERS
    if values is None or values.size != lines * width:
        return None
    values = values.reshape(lines, width)
    with np.errstate(invalid="ignore"):
        t = np.where(np.isfinite(values[:, 0]), values[:, 0], 0).astype(np.int64)
    if not _exact_times(data, t):
        return None
    with np.errstate(over="ignore"):  # (a value past float32 reads inf: its line is a bad one, _checked says)
        return t, values[:, 1:].reshape(lines, devices, COUNTERS).astype(np.float32)


def _exact_times(data: bytes, t: Any) -> bool:
    """``t`` (the lines' times read as float64: to 256 ns) with each time, an integer, read exactly; False
    where a time is not found or not a non-negative int64 (then each line is read alone, on the checked path:
    a time is an integer, as the decode requires)."""
    found = _TIME.findall(data)
    if len(found) != t.size:
        return False
    for i, raw in enumerate(found):
        if not (raw.isdigit() and len(raw) <= 19 and int(raw) < 2**63):
            return False
        t[i] = int(raw)
    return True


def _one(raw: bytes, devices: int) -> tuple[int, list[float]] | None:
    """One line of another shape decoded (a device entry ``null``): (time, values), None where it is bad."""
    try:
        line = loads(raw)
    except (ValueError, RecursionError):
        return None
    if type(line) is not dict or type(line.get("t")) is not int or type(line.get("d")) is not list:
        return None
    if not -(2**63) <= line["t"] < 2**63:  # (past int64: no time, and no crash of the reader)
        return None
    entries = line["d"]
    if len(entries) != devices:
        return None
    out: list[float] = []
    for entry in entries:
        if entry is None:
            out.extend([float("nan")] * COUNTERS)
            continue
        if type(entry) is not list or len(entry) != COUNTERS:
            return None
        for value in entry:
            kind = type(value)
            if value is None:
                out.append(float("nan"))
            elif (kind is int and -_HUGE < value < _HUGE) or (kind is float and math.isfinite(value)):
                out.append(float(value))  # (a value of 10^18 or more: a bad line, as any is, by _checked)
            else:
                return None
    return line["t"], out


def device_major(values: list[Any]) -> Any:
    """Pieces of a block's values (each ``(n, devices, counters)``) put together as an ``(n, devices, counters)``
    view of a ``(devices, n, counters)`` array: each device's rows contiguous (its timeline's columns read from
    32-byte rows, not every device's: 0.06 ms a column of a device-day against 1.4 ms)."""
    n = sum(v.shape[0] for v in values)
    out = np.empty((values[0].shape[1], n, COUNTERS), np.float32)
    at = 0
    for v in values:
        out[:, at : at + v.shape[0]] = v.transpose(1, 0, 2)
        at += v.shape[0]
    return out.transpose(1, 0, 2)


class _Reader:
    """The blocks of one read, the current one's pieces gathered as arrays."""

    def __init__(self, head: GpuHead | None, stats: ReadStats, into: tuple[Any, Any, int] | None = None) -> None:
        self.blocks: list[Block] = []
        self.head = head
        self.pieces: list[tuple[Any, Any, bool]] = []  # (times, values, checked)
        self.stats = stats
        #: the scanner's arrays for the current block (times, values device by device, the first row not in a
        #: piece, the first free row): filled chunk after chunk, a block read whole one piece (no copy)
        self.scan: list[Any] | None = None
        if into is not None and head is not None:  # (rows read before, under ``head``: the block goes on)
            t, v, rows = into
            if _gpuscan is not None and v.shape[0] == len(head.devices):
                self.scan = [t, v, 0, rows]
            else:
                self.pieces.append((t[:rows], v[:, :rows].transpose(1, 0, 2), True))
        #: bytes of the region still to read after the current chunk (the arrays' room is guessed from it)
        self.expect = 0

    def seal(self) -> None:
        """The scanner's rows since its last piece made a piece (before a line read otherwise: file order)."""
        if self.scan is not None and self.scan[3] > self.scan[2]:
            t, v, start, fill = self.scan
            self.pieces.append((t[start:fill], v[:, start:fill].transpose(1, 0, 2), True))
            self.scan[2] = fill

    def close_block(self) -> None:
        self.seal()
        self.scan = None
        if self.head is not None and self.pieces:
            times, values = [], []
            for t, v, checked in self.pieces:
                if not checked:  # (the scanner's pieces are: it takes plausible lines only)
                    ok = _checked(t, v)
                    bad = int(ok.size - np.count_nonzero(ok))
                    if bad:
                        self.stats.skipped += bad
                        t, v = t[ok], v[ok]
                times.append(t)
                values.append(v)
            t = np.concatenate(times) if len(times) > 1 else times[0]
            if t.size:
                self.blocks.append(Block(self.head, t, values[0] if len(values) == 1 else device_major(values)))
        self.pieces = []

    def chunk(self, data: bytes) -> None:
        """Whole lines (``data`` ends with a newline)."""
        if _gpuscan is not None:
            self.scanned(data)
            return
        lines = data.count(b"\n")
        self.stats.lines += lines
        if self.head is not None:
            devices = len(self.head.devices)
            skeleton = _skeleton(devices)
            if data.translate(None, _SKELETON_DROP) == skeleton * lines:
                parsed = _bulk(data, lines, devices)
                if parsed is not None:
                    self.pieces.append((*parsed, False))
                    return
        self.by_line(data.split(b"\n")[:-1])

    def scanned(self, data: bytes) -> None:
        """Whole lines read by the C scanner into arrays; each line it does not take (another shape, a header,
        a sign, a long number, garbage) read on the checked path, in its place, then the scan goes on (lines
        counted as they are read: no pass over the chunk to count them)."""
        pos, size = 0, len(data)
        while pos < size:
            if self.head is None:
                rest = data[pos:].split(b"\n")[:-1]
                self.stats.lines += len(rest)
                self.by_line(rest)
                return
            devices = len(self.head.devices)
            if self.scan is None or self.scan[1].shape[0] != devices or self.scan[3] == self.scan[0].size:
                self.seal()
                # (room for this chunk's lines left and as many a byte in the rest of the region: rows never
                # written are never touched, so cost no memory)
                left = data.count(b"\n", pos)
                room = left + int(left * 1.05 * self.expect / (size - pos))
                room = min(room, (size - pos + self.expect) // (13 + 5 * devices) + 1, max(left, _ROWS_AT_ONCE))
                self.scan = [np.empty(room, np.int64), np.empty((devices, room, COUNTERS), np.float32), 0, 0]
            t, v, _start, fill = self.scan
            got, pos = _gpuscan.scan(data, pos, devices, t, v, fill, TIME_MIN_NS, TIME_MAX_NS, _PERCENT_MASK, t.size)
            self.scan[3] = got
            self.stats.lines += got - fill
            if pos < size and got < t.size:  # (a line it did not take, not a full array)
                self.seal()
                self.stats.lines += 1
                cut = data.index(b"\n", pos)
                self.by_line([data[pos:cut]])
                pos = cut + 1

    def by_line(self, lines: list[bytes]) -> None:
        """Lines read one by one: runs of the common shape in bulk, the others decoded or skipped."""
        run: list[bytes] = []
        skeleton = _skeleton(len(self.head.devices)) if self.head is not None else b""
        for raw in lines:
            if self.head is not None and (raw + b"\n").translate(None, _SKELETON_DROP) == skeleton:
                run.append(raw)
                continue
            self._flush(run)
            run = []
            self.odd(raw)
        self._flush(run)

    def _flush(self, run: list[bytes]) -> None:
        if not run or self.head is None:
            return
        devices = len(self.head.devices)
        parsed = _bulk(b"\n".join(run) + b"\n", len(run), devices)
        if parsed is not None:
            self.pieces.append((*parsed, False))
            return
        for raw in run:  # (each line read alone: a line reads the same whatever its neighbours)
            parsed = _bulk(raw + b"\n", 1, devices) if len(run) > 1 else None
            if parsed is not None:
                self.pieces.append((*parsed, False))
            else:
                self.odd(raw)

    def odd(self, raw: bytes) -> None:
        """A line of another shape: a header again (a new block), a sample decoded, or a bad line."""
        if raw[:40].find(b'"header"') != -1 or raw.startswith(b'{"v"'):
            head = gpu_head(raw)
            if head is not None:
                self.close_block()
                self.head = head
                return
        one = _one(raw, len(self.head.devices)) if self.head is not None else None
        if one is None:
            self.stats.skipped += 1
            return
        devices = len(self.head.devices)  # type: ignore[union-attr]
        with np.errstate(over="ignore"):  # (as in _bulk: inf, then a bad line)
            values = np.array(one[1], np.float32).reshape(1, devices, COUNTERS)
        self.pieces.append((np.array([one[0]], np.int64), values, False))


def read_samples(
    path: str | os.PathLike[str],
    stats: ReadStats,
    *,
    start: int = 0,
    head: GpuHead | None = None,
    stop: int | None = None,
    into: tuple[Any, Any, int] | None = None,
) -> tuple[list[Block], int, GpuHead | None]:
    """The samples of a file from its start (its first line must be a header), or from byte ``start`` under
    ``head`` (a read resumed where an earlier one stopped), up to byte ``stop`` (a line's end; None: the
    last whole line): the blocks, where the read stopped (a line's end) and the header in force there. A
    file that cannot be read or starts with no header yields nothing (noted in ``stats``). ``into``: a
    resumed read's earlier rows under ``head`` (times, values device by device with room after them, their
    count): the first block is theirs, read on into the same arrays (no copy while there is room)."""
    name = os.path.basename(os.fspath(path))
    try:
        handle = open_file(path)
    except OSError as exc:
        stats.notes.append(f"{name}: {exc if isinstance(exc, UnreadableError) else why_not(path, exc)}; skipped")
        return [], start, head
    with handle:
        at = start
        if head is None:
            stats.files += 1
            first = handle.readline(LINE_MAX)
            head = gpu_head(first) if first.endswith(b"\n") else None
            if head is None:
                if first:
                    stats.notes.append(f"{name}: not a lens_rl GPU sample file (its first line is no header); skipped")
                return [], start, None
            stats.lines += 1
            at = len(first)
        else:
            handle.seek(start)
        reader = _Reader(head, stats, into if start else None)
        at = _read_region(handle, at, stop, reader)
        reader.close_block()
        return reader.blocks, at, reader.head


def _read_region(handle: IO[bytes], at: int, stop: int | None, reader: _Reader) -> int:
    """Whole lines from ``at`` up to ``stop`` (None: the end) fed to ``reader`` in chunks; where it stopped."""
    try:
        end = os.fstat(handle.fileno()).st_size if stop is None else stop
    except (OSError, AttributeError, ValueError):
        end = at
    while stop is None or at < stop:
        data = handle.read(_CHUNK if stop is None else min(_CHUNK, stop - at))
        if not data:
            break
        cut = data.rfind(b"\n") + 1
        reader.expect = max(0, end - at - cut)
        if cut == 0:  # one line longer than a chunk: read on to its end, within the cap
            rest = handle.readline(LINE_MAX)
            if len(data) + len(rest) > LINE_MAX or not rest.endswith(b"\n"):
                if not rest.endswith(b"\n") and len(data) + len(rest) < LINE_MAX:
                    break  # (a last line still being written)
                skipped = rest_of_line(handle) if not rest.endswith(b"\n") else 0
                reader.stats.lines += 1
                reader.stats.skipped += 1
                at += len(data) + len(rest) + skipped
                continue
            reader.by_line([data + rest[:-1]])
            reader.stats.lines += 1
            at += len(data) + len(rest)
            continue
        reader.chunk(data[:cut])
        at += cut
        if cut < len(data):
            handle.seek(at)
    return at
