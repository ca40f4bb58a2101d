"""A GPU sample file's lines read in bulk into arrays (:class:`Block`: times and values per device and counter).

Sample lines are many (a day at 2 Hz is 172,800 per host) and all alike, so they are not decoded one by one: a
chunk of whole lines is read at once, on the checked path of :mod:`~lens_rl.offline.read.gpu_decode` (numpy's
text parser, the lines of another shape decoded one by one, a bad one skipped and counted) or by the C scanner.
A line reads the same whatever its neighbours (a run that numpy cannot read at once is read line by line, each in
bulk where it can be).
Values are float32 (``nan``: ``null``, a counter the device lacks or a device not read at that sample;
exact for percentages, power and clocks, memory to 1 part in 10^7: a day of 8 devices is 350 MB, not 700);
times int64 ns, exact.

**The C scanner** (``_gpuscan.c``, built where a compiler was at hand; :data:`SCANNER`) reads the lines of
the documented shape straight into the arrays (no Python object per number: ~10x numpy's text parser) and
stops at any line it does not fully validate (a header, another shape, a sign, a number of more than 15
digits, garbage), which is then read on the checked path, in its place: its results are the same.

Example::

    blocks, end = read_samples(path, stats)
    for block in blocks:
        print(block.head.host, block.t.size, block.v.shape)   # (n,), (n, devices, 8)
"""

from __future__ import annotations

import os
from typing import IO, Any, NamedTuple

import numpy as np

from lens_rl.offline.read.gpu_decode import COUNTERS, PERCENT, SKELETON_DROP, bulk, one_line, plausible_rows, skeleton
from lens_rl.store import LINE_MAX, TIME_MAX_NS, TIME_MIN_NS, ReadStats, UnreadableError, open_file
from lens_rl.store.files import rest_of_line, why_not
from lens_rl.store.gpu import GpuHead, gpu_head

try:  # the strict scanner, built from _gpuscan.c where a compiler was at hand at install time (optional)
    from lens_rl.offline.read import _gpuscan  # type: ignore[attr-defined]
except ImportError:
    _gpuscan = None

__all__ = ["SCANNER", "Block", "device_major", "read_samples"]

#: whether sample lines are read by the C scanner (else by numpy's text parser and the checked decode)
SCANNER = _gpuscan is not None

_PERCENT_MASK = sum(1 << i for i in PERCENT)
_CHUNK = 4 << 20
#: the most rows of the scanner's arrays allocated at once past a chunk's (a region of more: arrays in turn)
_ROWS_AT_ONCE = 1 << 20


class Block(NamedTuple):
    """The samples under one header: ``t`` (n,) int64 ns, ``v`` (n, devices, counters) float32."""

    head: GpuHead
    t: Any
    v: Any


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
                    ok = plausible_rows(t, v)
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
            shape = skeleton(devices)
            if data.translate(None, SKELETON_DROP) == shape * lines:
                parsed = bulk(data, lines, devices)
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
        shape = skeleton(len(self.head.devices)) if self.head is not None else b""
        for raw in lines:
            if self.head is not None and (raw + b"\n").translate(None, SKELETON_DROP) == shape:
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
        parsed = bulk(b"\n".join(run) + b"\n", len(run), devices)
        if parsed is not None:
            self.pieces.append((*parsed, False))
            return
        for raw in run:  # (each line read alone: a line reads the same whatever its neighbours)
            parsed = bulk(raw + b"\n", 1, devices) if len(run) > 1 else None
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
        one = one_line(raw, len(self.head.devices)) if self.head is not None else None
        if one is None:
            self.stats.skipped += 1
            return
        devices = len(self.head.devices)  # type: ignore[union-attr]
        with np.errstate(over="ignore"):  # (as in bulk: inf, then a bad line)
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
