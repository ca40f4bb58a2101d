"""The GPU join's kept steps in the refresh cache: ``gpu-steps.kept`` in the cache's folder, each GPU process's
leading settled steps and productive intervals (:class:`~lens_rl.offline.rollup.gpu_memo.ProcessMemo`), kept
beside the devices' windows (``gpu-lines.kept``, :mod:`lens_rl.offline.run.gpu_lines`, whose record names the
state of this file it goes with: the two are used together or not at all).

The file grows by appending, as a span file's cache entry does (:mod:`lens_rl.offline.run.cache_files`: each
record after its length): its first record holds every process's kept rows, each later one what one look
added to the state before it (a process's rows from where that state's stop, ``Kept.first``; from 0, in
place of that state's), chained to it by the state's token (of two looks that appended at once, the second's
record is skipped). A look writes only what is new, in one ``O_APPEND`` write; the file is written whole
(atomically) after :data:`~lens_rl.offline.run.cache_files.MAX_RECORDS` records, once its appended records
outgrow half its first, or where the look used no state of it. Every record is one MessagePack value of a
declared ``Struct`` (msgspec, typed: :class:`StepsRec`; no pickle, nothing in it runs code). A file over
:data:`MAX_BYTES` or not a regular file (a FIFO is never opened), a record of another shape or layout version,
cut short, or whose rows do not follow the state before it: one line on stderr and no kept steps (the look
joins them cold; the next writes the file whole).

Example::

    state = load_steps(cache)                       # StepsState, or None
    token = save_steps(cache, state, keeping.out)   # the state written (named by the windows' record)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import msgspec

from lens_rl.offline.read.gpu_join import MEASURES
from lens_rl.offline.rollup.gpu_memo import Kept, ProcessMemo
from lens_rl.offline.run.cache_files import LENGTH, MAX_RECORDS, after_length, records_in
from lens_rl.offline.run.disk import append_to, cache_key, write_atomic
from lens_rl.offline.run.gpu_kept import read_kept

__all__ = ["MAX_BYTES", "VERSION", "StepsRec", "StepsState", "load_steps", "save_steps"]

#: a kept steps file larger than this is neither written nor read (49 processes' ~10^4 steps: ~17 MB)
MAX_BYTES = 64 << 20
#: the records' layout version (another is read as none, with a line on stderr)
VERSION = 1
_NAME = "gpu-steps.kept"


class StepsRec(msgspec.Struct, frozen=True):
    """One record of the kept steps: whole (``parent`` empty) or what one look added to the state ``parent``."""

    key: str
    version: int
    parent: str
    token: str
    memos: list[ProcessMemo]


class StepsState(NamedTuple):
    """The kept steps as their records come to: the last state's token, each process's memo by key, and where
    the file stands (records, bytes of the first, bytes after it)."""

    token: str
    memos: dict[str, ProcessMemo]
    disk: tuple[int, int, int]


_decode = msgspec.msgpack.Decoder(StepsRec).decode
_encode = msgspec.msgpack.Encoder().encode


def _rows(kept: Kept) -> int:
    """How many rows ``kept`` holds (ValueError: arrays that do not add up, or a measure that is none)."""
    rows = kept.n - kept.first
    if kept.first < 0 or rows < 0 or not set(kept.columns) <= set(range(len(MEASURES))):
        raise ValueError("kept steps that do not add up")
    if len(kept.sums) != 8 * rows * len(kept.columns) or len(kept.peaks) not in (0, 8 * rows):
        raise ValueError("kept steps that do not add up")
    return rows


def _chained(chain: list[Kept], after: Kept) -> list[Kept]:
    """``chain`` (a process's rows of a kind, in order, the first from row 0) with ``after``'s rows: after
    them, or from 0 in their place (ValueError where they do not follow them)."""
    _rows(after)
    if not after.first:
        return [after]
    last = chain[-1] if chain else None
    if last is None or last.n != after.first or last.columns != after.columns:
        raise ValueError("kept steps that do not follow the state before them")
    if bool(len(last.peaks)) != bool(len(after.peaks)):
        raise ValueError("kept steps that do not follow the state before them")
    return [*chain, after]


def _whole(chain: list[Kept]) -> Kept:
    """A chain's rows as one :class:`Kept` (their bytes joined once, whatever the records they came in)."""
    if len(chain) == 1:
        return chain[0]
    last = chain[-1]
    sums = memoryview(b"".join(k.sums for k in chain))
    return Kept(last.n, last.digest, last.columns, sums, memoryview(b"".join(k.peaks for k in chain)))


def applied(memos: Mapping[str, ProcessMemo], *added: list[ProcessMemo]) -> dict[str, ProcessMemo]:
    """``memos`` with each list of ``added`` applied in turn (ValueError: one whose rows do not follow)."""
    chains = {key: (m.devices, [m.steps], [m.productive]) for key, m in memos.items()}
    for memos_added in added:
        for memo in memos_added:
            devices, steps, productive = chains.get(memo.key, (memo.devices, [], []))
            if devices != memo.devices:  # (other devices: only rows of their own follow, from 0)
                steps, productive = [], []
            chains[memo.key] = (memo.devices, _chained(steps, memo.steps), _chained(productive, memo.productive))
    return {key: ProcessMemo(key, d, _whole(s), _whole(p)) for key, (d, s, p) in chains.items()}


def _state(data: bytes) -> StepsState | None:
    """The state a kept steps file's records come to (None: another lens_rl's); ValueError or
    ``msgspec.DecodeError`` for a file that is not one of this lens_rl's, whole."""
    records = records_in(data, 0)
    start, stop = next(records, (0, 0))
    if stop <= start:
        raise ValueError("no record")
    first = _decode(memoryview(data)[start:stop])  # (views into the file read: no copy of its arrays)
    if first.key != cache_key():
        return None
    if first.version != VERSION or first.parent:
        raise ValueError(f"layout version {first.version}, not {VERSION}" if first.version != VERSION else "no base")
    token, added, count, appended = first.token, [first.memos], 1, 0
    for start, stop in records:  # (ValueError at a record cut short)
        rec = _decode(memoryview(data)[start:stop])
        count, appended = count + 1, appended + LENGTH + stop - start
        if rec.key != cache_key() or rec.version != VERSION:
            raise ValueError("a record of another lens_rl or layout")
        if rec.parent == token:  # (else a look's that appended at once with another: skipped)
            token = rec.token
            added.append(rec.memos)
    return StepsState(token, applied({}, *added), (count, len(data) - appended, appended))


def load_steps(cache: str) -> StepsState | None:
    """The kept steps (None: none, another lens_rl's, or not to be used: said on stderr)."""
    return read_kept(Path(cache) / _NAME, _state, MAX_BYTES, "kept steps")


def _new(memo: ProcessMemo, before: ProcessMemo | None) -> bool:
    """Whether ``memo`` holds other rows than ``before`` (more, or others: not the same count and digest)."""
    if before is None or before.devices != memo.devices:
        return True
    pairs = ((memo.steps, before.steps), (memo.productive, before.productive))
    return any((m.n, m.digest, m.columns) != (b.n, b.digest, b.columns) for m, b in pairs)


def save_steps(cache: str, state: StepsState | None, out: Mapping[str, ProcessMemo]) -> str | None:
    """This look's kept steps (``out``: its memos, rows after ``state``'s where they follow them): appended to
    the file ``state`` was read from while that takes one more record, else written whole; the token of the
    state written (None: none, nothing kept)."""
    token, path = os.urandom(8).hex(), Path(cache) / _NAME
    try:
        added = [m for m in out.values() if state is None or _new(m, state.memos.get(m.key))]
        if state is not None and not added:  # (nothing settled since: the state as it is, nothing written)
            return state.token
        if state is not None and state.disk[0] < MAX_RECORDS:
            record = after_length(_encode(StepsRec(cache_key(), VERSION, state.token, token, added)))
            _count, first, appended = state.disk
            fits = first + appended + len(record) <= MAX_BYTES
            if fits and appended + len(record) <= max(first // 2, 1 << 16) and append_to(path, record):
                return token
        memos = applied(state.memos if state is not None else {}, list(out.values()))
        whole = StepsRec(cache_key(), VERSION, "", token, [memos[key] for key in out])
        record = after_length(_encode(whole))
        if len(record) > MAX_BYTES:  # (none kept: none left for the next look either)
            os.unlink(path)
            return None
        write_atomic(path, record)  # (not written: the windows' record names a state the file does not hold)
        return token
    except (OSError, ValueError):
        return None
