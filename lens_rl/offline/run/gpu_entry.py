"""A sample file's kept entry (``gpu-<file>.samples``, :mod:`lens_rl.offline.run.gpu`) read straight into its
blocks' arrays: each device's rows of every record read in place into one array per run of records under the
same header, with room left for the rows the file grew by (the read of its new bytes fills it on).

Reading the entry whole, then putting each device's records together, touched every kept byte three times
(the file's bytes, then two copies): a +1 % refresh of 8 node-days spent 1.2 s putting 350 MB together and
0.6 s reading 460 MB. Here each byte is read once into where it stays. The checks are the same: each record's
meta is lens_rl's of this layout, every array lies inside the entry, a short read is a broken entry.

Example::

    meta, blocks, carry = load_entry(entry, end)     # carry: the last block's arrays, room to read on
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from lens_rl.offline.read.gpu_decode import COUNTERS
from lens_rl.offline.read.gpu_samples import Block
from lens_rl.offline.run.disk import cache_key, json_bytes
from lens_rl.store import LINE_MAX, loads, open_file
from lens_rl.store.gpu import GpuDevice, GpuHead

__all__ = ["LAYOUT", "entry_record", "head_of", "layout", "load_entry"]

#: how an entry lays out a block's values: device by device (``(devices, n, counters)``)
LAYOUT = "device"


def head_of(plain: Any) -> GpuHead:
    """A block's header as kept (its fields as JSON) read back."""
    devices = tuple(
        GpuDevice(int(i), str(u), str(n), None if m is None else int(m), tuple(str(c) for c in has))
        for i, u, n, m, has in plain["devices"]
    )
    since = plain["since"]
    return GpuHead(
        str(plain["host"]),
        str(plain["run_id"]),
        int(plain["attempt"]),
        int(plain["pid"]),
        None if since is None else int(since),
        float(plain["hz"]),
        devices,
    )


def _read_into(handle: Any, offset: int, array: Any) -> None:
    """``array``'s bytes read from ``offset`` (a short read: the entry is broken)."""
    view = memoryview(array).cast("B")
    handle.seek(offset)
    done = 0
    while done < len(view):
        got = handle.readinto(view[done:])
        if not got:
            raise ValueError("shorter than it says")
        done += got


def layout(handle: Any, size: int) -> tuple[Any, list[tuple[GpuHead, int, int]]]:
    """The last record's meta and every kept block: (header, rows, where its arrays start). The meta also
    says how many records the entry holds (``records``: past
    :data:`~lens_rl.offline.run.cache_files.MAX_RECORDS`, the next look writes it whole, so a long ``watch``
    does not read more records every look)."""
    meta: Any = None
    blocks: list[tuple[GpuHead, int, int]] = []
    at = records = 0
    while at < size:
        handle.seek(at)
        line = handle.readline(LINE_MAX)
        if not line.endswith(b"\n"):
            raise ValueError("a record cut short")
        meta = loads(line)
        if type(meta) is not dict or meta.get("key") != cache_key() or meta.get("layout") != LAYOUT:
            raise ValueError("not this lens_rl's")
        records += 1
        meta["records"] = records
        at += len(line)
        for plain, n in meta["blocks"]:
            head, n = head_of(plain), int(n)
            width = len(head.devices) * COUNTERS
            if n < 0 or not width or at + n * (8 + 4 * width) > size:
                raise ValueError("shorter than it says")
            blocks.append((head, n, at))
            at += n * (8 + 4 * width)
    return meta, blocks


def _room(meta: Any, devices: int, grown_by: int) -> int:
    """Rows to leave for the samples in ``grown_by`` more bytes (from the kept bytes a line; at most as many
    as the shortest lines would make)."""
    if grown_by <= 0:
        return 0
    per_line = max(int(meta["end"]) / max(int(meta["lines"]), 1), 1.0)
    return min(int(grown_by / per_line * 1.25) + 16, grown_by // (13 + 5 * devices) + 1)


def load_entry(entry: Path, end: int = 0) -> tuple[Any, list[Block], tuple[Any, Any, int] | None]:
    """An entry's last meta, its blocks (consecutive ones under the same header as one) and the last block's
    arrays (times; values device by device, with room for the samples of the file's bytes from where the
    kept read stopped to ``end``; rows in them) for the read of the new bytes to fill on
    (:func:`~lens_rl.offline.read.gpu_samples.read_samples`'s ``into``). Raises ``OSError`` or ``ValueError``
    where the entry is not whole, not this lens_rl's, or planted (not a regular file)."""
    with open_file(entry, buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        meta, kept = layout(handle, size)
        if meta is None:
            raise ValueError("empty")
        kept_end = int(meta["end"])
        grown_by = end - kept_end if 0 <= kept_end <= end else 0  # (room never past the file's own bytes)
        runs: list[list[tuple[GpuHead, int, int]]] = []
        for block in kept:
            if runs and runs[-1][0][0] == block[0]:
                runs[-1].append(block)
            else:
                runs.append([block])
        blocks: list[Block] = []
        carry = None
        for k, run in enumerate(runs):
            head, devices = run[0][0], len(run[0][0].devices)
            rows = sum(n for _head, n, _at in run)
            room = rows + (_room(meta, devices, grown_by) if k == len(runs) - 1 else 0)
            t = np.empty(room, "<i8")
            v = np.empty((devices, room, COUNTERS), "<f4")
            filled = 0
            for _head, n, at in run:
                _read_into(handle, at, t[filled : filled + n])
                for d in range(devices):
                    _read_into(handle, at + 8 * n + 4 * COUNTERS * n * d, v[d, filled : filled + n])
                filled += n
            blocks.append(Block(head, t[:rows], v[:, :rows].transpose(1, 0, 2)))
            carry = (t, v, rows)
        return meta, blocks, carry


def _plain_head(head: GpuHead) -> dict[str, Any]:
    return {**head._asdict(), "devices": [list(d) for d in head.devices]}


def entry_record(meta: dict[str, Any], blocks: list[Block]) -> bytes:
    meta = {**meta, "key": cache_key(), "layout": LAYOUT}
    meta["blocks"] = [[_plain_head(b.head), int(b.t.size)] for b in blocks]
    out = [json_bytes(meta) + b"\n"]
    for block in blocks:
        out.append(np.ascontiguousarray(block.t, "<i8").tobytes())
        out.append(np.ascontiguousarray(block.v.transpose(1, 0, 2), "<f4").tobytes())
    return b"".join(out)
