"""The GPU join's part of the refresh cache: ``gpu-join.kept`` in the cache's folder, what a look settled of
each process's spans (:mod:`lens_rl.offline.rollup.gpu_prefix`) for the next look to join only what is new.

One MessagePack record (msgspec, typed: :class:`JoinKept`; no pickle, nothing in it runs code): lens_rl's
cache key, the sample files' kept entries (name and inode: an entry rewritten, because its file was read
cold, is a new inode), each device's samples as the look saw them (:class:`DeviceMark`), and the processes'
settled prefixes. A record of another version, cut short, planted, over :data:`MAX_BYTES` or not a regular
file (a FIFO is never opened) is one line on stderr and a cold join; a device whose samples changed other than
by appending drops the prefixes it answered.

Example::

    kept = load_kept(cache, found, devices)       # {repr(process key): SpanPrefix}, or None
    ...gpu_rollup(..., kept=kept, keep=fresh)
    save_kept(cache, found, devices, fresh)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np

from lens_rl.offline.rollup.gpu_prefix import DeviceMark, SpanPrefix
from lens_rl.offline.run.disk import cache_key, read_bytes, write_atomic

__all__ = ["MAX_BYTES", "JoinKept", "entries_of", "load_kept", "read_kept", "save_kept"]

T = TypeVar("T")

#: a kept join record larger than this is not read (its processes' prefixes are a few KB each)
MAX_BYTES = 64 << 20
_NAME = "gpu-join.kept"
_log = logging.getLogger("lens_rl")


class JoinKept(msgspec.Struct, frozen=True):
    """What a look kept of its GPU join."""

    key: str
    entries: list[tuple[str, int]]
    devices: list[DeviceMark]
    processes: list[SpanPrefix]


_decode = msgspec.msgpack.Decoder(JoinKept).decode
_encode = msgspec.msgpack.Encoder().encode


def entries_of(cache: str, found: Sequence[Path]) -> list[tuple[str, int]]:
    """The sample files' kept entries (:mod:`lens_rl.offline.run.gpu`) by name, with their inodes."""
    out = []
    for path in found:
        try:
            out.append((path.name, os.stat(Path(cache) / f"gpu-{path.name}.samples").st_ino))
        except OSError:
            out.append((path.name, -1))
    return out


def _mark(uuid: str, device: Any) -> DeviceMark:
    n = int(device.t.size)
    last = np.ascontiguousarray(device.v[n - 1], "<f4").tobytes() if n else b""
    return DeviceMark(uuid, n + device.skipped, int(device.t[n - 1]) if n else 0, last, bool(device.unavailable))


def _grown(mark: DeviceMark, device: Any) -> bool:
    """Whether ``device``'s samples are ``mark``'s with only later samples after them."""
    n, t = mark.n - device.skipped, device.t  # (a window's samples: from its first held)
    if n <= 0 or t.size < n or bool(device.unavailable) != mark.unavailable or int(t[n - 1]) != mark.t_last:
        return False
    if np.ascontiguousarray(device.v[n - 1], "<f4").tobytes() != mark.last:
        return False
    return bool(t.size == n or t[n:].min() > t[:n].max())


def read_kept(
    path: Path, decode: Callable[[bytes], T], max_bytes: int, what: str, check: Callable[[T], None] | None = None
) -> T | None:
    """One of the GPU join's kept records at ``path``, decoded (None: there is none). One too large, not a
    regular file (a FIFO in its place is never opened), of another shape, or that ``check`` raises
    ``ValueError`` on, is one line on stderr naming ``what`` and None: the look joins cold."""
    try:
        if path.stat().st_size > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        kept = decode(read_bytes(path))
        if check is not None:
            check(kept)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, msgspec.DecodeError) as exc:
        _log.warning("lens-rl: the GPU join's %s %s was not used (%s): joining cold", what, path, exc)
        return None
    return kept


def load_kept(cache: str, found: Sequence[Path], devices: Mapping[str, Any]) -> dict[str, SpanPrefix] | None:
    """The prefixes an earlier look kept that still hold for these sample files and devices (None: none)."""
    kept = read_kept(Path(cache) / _NAME, _decode, MAX_BYTES, "kept record")
    if kept is None or kept.key != cache_key():
        return None
    now = dict(entries_of(cache, found))
    if any(now.get(name) != inode or inode < 0 for name, inode in kept.entries):  # (-1: no entry, unknown)
        return None
    bad = {m.uuid for m in kept.devices if m.uuid not in devices or not _grown(m, devices[m.uuid])}
    marked = {m.uuid for m in kept.devices}
    return {p.key: p for p in kept.processes if set(p.devices) <= marked and not (set(p.devices) & bad)}


def save_kept(
    cache: str, found: Sequence[Path], devices: Mapping[str, Any], processes: Mapping[str, SpanPrefix]
) -> None:
    """This look's settled prefixes kept for the next (a failed write: the next look joins cold)."""
    record = JoinKept(
        cache_key(),
        entries_of(cache, found),
        [_mark(u, d) for u, d in devices.items() if d.t.size],
        list(processes.values()),
    )
    try:
        write_atomic(Path(cache) / _NAME, _encode(record))
    except OSError:
        pass
