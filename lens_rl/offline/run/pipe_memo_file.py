"""The pipeline's memo on disk (``pipeline-memo.msgpack`` in a run's cache folder): each array's coverage of every
step window an earlier look read (:class:`~lens_rl.offline.rollup.pipe_memo.PipeMemo`), with the tokens of the
cache entries it was made from. Records framed as an entry's (:mod:`~lens_rl.offline.run.cache_files`), each typed
data behind the user's seal (:func:`~lens_rl.offline.run.kept.sealed`: one anybody else wrote reads as none): the
first whole (:class:`PipeMemoRec`), each later one what one look changed (:class:`PipeDeltaRec`: its windows from
the first it did not take as kept), chained to the tokens it was made from; written whole after
:data:`~lens_rl.offline.run.cache_files.MAX_RECORDS` records, or once its appended records outgrow half its first.
Arrays are raw little-endian buffers, read in place (numpy views of the bytes read) where the file is one record.
A first record of another schema or version, claiming more than its bytes hold or whose arrays do not add up is
said once and the coverage computed afresh; at a later record cut short or not adding up, the state before it
stands.

Example::

    memo, why = load_pipe_memo(folder, stats.cache_reads)
    ...  # the rollup, with memo
    save_pipe_memo(folder, stats.cache_reads, memo)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np

from lens_rl.offline.rollup.pipe_memo import PipeMemo
from lens_rl.offline.run.cache_files import LENGTH, MAX_RECORDS, records_in
from lens_rl.offline.run.disk import append_to, cache_key, read_bytes, write_atomic
from lens_rl.offline.run.kept import unsealed
from lens_rl.offline.run.memo_file import made_from, sealed_record
from lens_rl.offline.run.record_codec import Raw, Scalar, decode
from lens_rl.store import CacheRead

__all__ = ["PIPE_MEMO", "PipeDeltaRec", "PipeMemoRec", "load_pipe_memo", "save_pipe_memo"]

_log = logging.getLogger("lens_rl")
PIPE_MEMO = "pipeline-memo.msgpack"
#: the records' schema version (one of another is refused by its tag: the coverage is computed afresh)
_VERSION = 1
_INT64 = np.dtype("<i8")


class PipeMemoRec(msgspec.Struct, gc=False, tag=f"pipe-memo/{_VERSION}"):
    """The pipeline's memo whole: the cache key it was made under, the tokens of the entries it was made from, the
    arrays' keys, the windows (starts, ends: int64) and each array's coverage of every window (int64 ns, one
    buffer per key, in the keys' order)."""

    key: str
    tokens: dict[str, str | None]
    keys: list[list[Scalar]]
    los: Raw
    his: Raw
    covered: list[Raw]


class PipeDeltaRec(msgspec.Struct, gc=False, tag=f"pipe-memo-delta/{_VERSION}"):
    """What one look changed in the memo made from the tokens ``parent``: the windows from ``start`` on (those
    before are the state's) and the arrays' coverage of them, and its tokens."""

    parent: dict[str, str | None]
    tokens: dict[str, str | None]
    start: int
    los: Raw
    his: Raw
    covered: list[Raw]


class _Piece(NamedTuple):
    """Windows and each array's coverage of them (numpy int64 views of the bytes read)."""

    los: Any
    his: Any
    covered: list[Any]


class _Source(NamedTuple):
    """Where a memo read from its file stands: the tokens of the entries its last applied record was made
    from, and (records, bytes of the first, bytes after it), as an entry's ``disk``."""

    tokens: dict[str, Any]
    disk: tuple[int, int, int]


def _int64(buffer: memoryview) -> Any:
    """The int64s ``buffer`` holds, little-endian, as a numpy view of it (ValueError: cut mid-item)."""
    if len(buffer) % _INT64.itemsize:
        raise ValueError("an array cut mid-item")
    return np.frombuffer(buffer, _INT64)


def _piece(rec: PipeMemoRec | PipeDeltaRec, keys: int) -> _Piece:
    """``rec``'s windows and coverage, for ``keys`` arrays (ValueError: arrays that do not add up)."""
    los, his = _int64(rec.los), _int64(rec.his)
    covered = [_int64(buffer) for buffer in rec.covered]
    if len(his) != len(los) or len(covered) != keys or any(len(c) != len(los) for c in covered):
        raise ValueError("arrays that do not add up")
    return _Piece(los, his, covered)


def _cut(pieces: list[_Piece], at: int) -> list[_Piece]:
    """The first ``at`` windows of ``pieces``."""
    out, total = [], 0
    for piece in pieces:
        if total >= at:
            break
        keep = min(len(piece.los), at - total)
        out.append(_Piece(piece.los[:keep], piece.his[:keep], [c[:keep] for c in piece.covered]))
        total += keep
    return out


def _record(data: bytes, start: int, stop: int) -> PipeMemoRec | PipeDeltaRec:
    """One record of the memo's file (ValueError: not sealed by this user's lens_rl; msgspec.DecodeError: not a
    record of this schema)."""
    body = unsealed(memoryview(data)[start:stop])  # (a view: no copy of its megabytes)
    if body is None:
        raise ValueError("not sealed by this user's lens_rl")
    return decode(body, PipeMemoRec | PipeDeltaRec)  # type: ignore[no-any-return]


def load_pipe_memo(folder: str, reads: Sequence[CacheRead]) -> tuple[PipeMemo, str | None]:
    """The pipeline's coverage earlier looks kept, if every file it was made from is as the last look left it
    (``reads``: this look's :attr:`~lens_rl.store.ReadStats.cache_reads`); else an empty one. Also why a memo
    there was not used, where that is worth a line (None: used, none, another's, or out of date)."""
    try:
        data = read_bytes(Path(folder) / PIPE_MEMO)
    except OSError:
        return PipeMemo(), None
    records = records_in(data, 0)
    try:
        start, stop = next(records)
    except (StopIteration, ValueError):
        return PipeMemo(), None  # cut short: computed afresh
    body = unsealed(memoryview(data)[start:stop])  # (a view: no copy of its megabytes)
    if body is None:
        return PipeMemo(), None  # not sealed by this user's lens_rl (or no key): computed afresh
    try:
        base = decode(body, PipeMemoRec | PipeDeltaRec)
    except Exception as exc:  # sealed by this user, yet not as this lens_rl writes it
        return PipeMemo(), f"corrupt ({type(exc).__name__})"
    if not isinstance(base, PipeMemoRec):
        return PipeMemo(), "corrupt (not a memo)"
    if base.key != cache_key():
        return PipeMemo(), "of another lens_rl version"
    try:
        pieces = [_piece(base, len(base.keys))]
    except ValueError as exc:
        return PipeMemo(), f"corrupt ({exc})"
    tokens, pieces, disk = _with_deltas(base, pieces, data, records)
    if not made_from(tokens, reads):
        return PipeMemo(), None  # a file gone, rewritten, or read by another look since
    fresh = [begin for *_, begin in reads if begin is not None]
    los, his, covered = _joined(pieces, len(base.keys))
    return PipeMemo(
        base.keys,
        los,
        his,
        dict(zip(map(tuple, base.keys), covered, strict=True)),
        min(fresh, default=None),
        _Source(tokens, disk),
    ), None


def _with_deltas(
    base: PipeMemoRec, pieces: list[_Piece], data: bytes, records: Iterator[tuple[int, int]]
) -> tuple[dict[str, Any], list[_Piece], tuple[int, int, int]]:
    """The tokens and windows ``base`` and each later record made from the state before it come to, and where
    the file stands (of two looks that appended at once, the second's is skipped; at a record cut short, not
    sealed by this user or not adding up, the state before it stands, and the file is written whole next)."""
    tokens, count, appended = base.tokens, 1, 0
    try:
        for start, stop in records:
            delta = _record(data, start, stop)
            count, appended = count + 1, appended + LENGTH + stop - start
            windows = sum(len(piece.los) for piece in pieces)
            if isinstance(delta, PipeDeltaRec) and delta.parent == tokens and 0 <= delta.start <= windows:
                pieces = [*_cut(pieces, delta.start), _piece(delta, len(base.keys))]
                tokens = delta.tokens
    except Exception as exc:  # (the state before it stands; written whole next)
        _log.debug("lens-rl: the pipeline's memo: read up to a record cut short or not ours (%s)", exc)
        count = MAX_RECORDS
    return tokens, pieces, (count, len(data) - appended, appended)


def _joined(pieces: list[_Piece], keys: int) -> tuple[Any, Any, list[Any]]:
    """The windows and each array's coverage of them, one array each (views into the bytes read where there is
    one piece)."""
    if len(pieces) == 1:
        return pieces[0]
    return (
        np.concatenate([p.los for p in pieces]),
        np.concatenate([p.his for p in pieces]),
        [np.concatenate([p.covered[k] for p in pieces]) for k in range(keys)],
    )


def _raw(values: Any) -> memoryview:
    """int64s (a numpy array) as their raw little-endian bytes, to encode."""
    return np.ascontiguousarray(values, _INT64).data.cast("B")


def save_pipe_memo(folder: str, reads: Sequence[CacheRead], memo: PipeMemo) -> None:
    """Keep this look's coverage (``memo.made``; none: nothing kept) with the tokens of the cache entries it was
    made from, sealed (not kept without the user's key): the windows from the first it did not take as kept
    appended to the file the memo was read from while that takes one more record, else written whole."""
    if memo.made is None:
        return
    keys, los, his, covered = memo.made
    tokens: dict[str, str | None] = {name: after for name, _before, after, _fresh in reads if after is not None}
    path, source, n = Path(folder) / PIPE_MEMO, memo.source, memo.reused
    if isinstance(source, _Source) and source.disk[0] < MAX_RECORDS and n:  # (n: the same arrays and windows)
        columns = [_raw(covered[key][n:]) for key in keys]
        record = sealed_record(PipeDeltaRec(source.tokens, tokens, n, _raw(los[n:]), _raw(his[n:]), columns))
        if record is None:
            return
        _count, first, appended = source.disk
        if appended + len(record) <= max(first // 2, 1 << 16) and append_to(path, record):
            return
    columns = [_raw(covered[key]) for key in keys]
    record = sealed_record(PipeMemoRec(cache_key(), tokens, [list(key) for key in keys], _raw(los), _raw(his), columns))
    if record is not None:
        write_atomic(path, record)
