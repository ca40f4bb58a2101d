"""The pipeline's memo on disk (``pipeline-memo.msgpack`` in a run's cache folder): each array's coverage of every
step window an earlier look read (:class:`~lens_rl.offline.rollup.pipe_memo.PipeMemo`), with the tokens of the
cache entries it was made from, as one record (:class:`PipeMemoRec`, typed data behind the user's seal,
:func:`~lens_rl.offline.run.kept.sealed`: one anybody else wrote reads as none), written whole by every look that
rolled a pipeline up. Its arrays are raw little-endian buffers read in place (numpy views of the bytes read); a
record of another schema or version, cut short, claiming more than its bytes hold or whose arrays do not add up
is said once and the coverage computed afresh.

Example::

    memo, why = load_pipe_memo(folder, stats.cache_reads)
    ...  # the rollup, with memo
    save_pipe_memo(folder, stats.cache_reads, memo)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from lens_rl.offline.rollup.pipe_memo import PipeMemo
from lens_rl.offline.run.disk import cache_key, read_bytes, write_atomic
from lens_rl.offline.run.kept import sealed, unsealed
from lens_rl.offline.run.memo_file import made_from
from lens_rl.offline.run.record_codec import UNENCODABLE, Raw, Scalar, decode, encode
from lens_rl.store import CacheRead

__all__ = ["PIPE_MEMO", "PipeMemoRec", "load_pipe_memo", "save_pipe_memo"]

PIPE_MEMO = "pipeline-memo.msgpack"
#: the record's schema version (one of another is refused by its tag: the coverage is computed afresh)
_VERSION = 1
_INT64 = np.dtype("<i8")


class PipeMemoRec(msgspec.Struct, gc=False, tag=f"pipe-memo/{_VERSION}"):
    """The pipeline's memo: the cache key it was made under, the tokens of the entries it was made from, the
    arrays' keys, the windows (starts, ends: int64) and each array's coverage of every window (int64 ns, one
    buffer per key, in the keys' order)."""

    key: str
    tokens: dict[str, str | None]
    keys: list[list[Scalar]]
    los: Raw
    his: Raw
    covered: list[Raw]


def _int64(buffer: memoryview) -> Any:
    """The int64s ``buffer`` holds, little-endian, as a numpy view of it (ValueError: cut mid-item)."""
    if len(buffer) % _INT64.itemsize:
        raise ValueError("an array cut mid-item")
    return np.frombuffer(buffer, _INT64)


def _raw(values: Any) -> memoryview:
    """int64s (a numpy array) as their raw little-endian bytes, to encode."""
    return np.ascontiguousarray(values, _INT64).data.cast("B")


def _memo(rec: PipeMemoRec, fresh_from: int | None) -> PipeMemo:
    """The memo ``rec`` holds (ValueError: arrays that do not add up)."""
    los, his = _int64(rec.los), _int64(rec.his)
    columns = [_int64(buffer) for buffer in rec.covered]
    if len(his) != len(los) or len(columns) != len(rec.keys) or any(len(c) != len(los) for c in columns):
        raise ValueError("arrays that do not add up")
    covered = {tuple(key): column for key, column in zip(rec.keys, columns, strict=True)}
    return PipeMemo(rec.keys, los, his, covered, fresh_from)


def load_pipe_memo(folder: str, reads: Sequence[CacheRead]) -> tuple[PipeMemo, str | None]:
    """The pipeline's coverage an earlier look kept, if every file it was made from is as the last look left it
    (``reads``: this look's :attr:`~lens_rl.store.ReadStats.cache_reads`); else an empty one. Also why a memo
    there was not used, where that is worth a line (None: used, none, another's, or out of date)."""
    try:
        data = read_bytes(Path(folder) / PIPE_MEMO)
    except OSError:
        return PipeMemo(), None
    body = unsealed(data)  # (a view: no copy of its megabytes)
    if body is None:
        return PipeMemo(), None  # not sealed by this user's lens_rl (or no key): computed afresh
    try:
        rec = decode(body, PipeMemoRec)
    except Exception as exc:  # sealed by this user, yet not as this lens_rl writes it
        return PipeMemo(), f"corrupt ({type(exc).__name__})"
    if rec.key != cache_key():
        return PipeMemo(), "of another lens_rl version"
    if not made_from(rec.tokens, reads):
        return PipeMemo(), None  # a file gone, rewritten, or read by another look since
    fresh = [start for *_, start in reads if start is not None]
    try:
        return _memo(rec, min(fresh) if fresh else None), None
    except ValueError as exc:
        return PipeMemo(), f"corrupt ({exc})"


def save_pipe_memo(folder: str, reads: Sequence[CacheRead], memo: PipeMemo) -> None:
    """Keep this look's coverage (``memo.made``; none: nothing kept) with the tokens of the cache entries it was
    made from, sealed (not kept without the user's key), written whole."""
    if memo.made is None:
        return
    keys, los, his, covered = memo.made
    tokens: dict[str, str | None] = {name: after for name, _before, after, _fresh in reads if after is not None}
    los, his, *columns = (_raw(a) for a in (los, his, *(covered[key] for key in keys)))
    try:
        data = sealed(encode(PipeMemoRec(cache_key(), tokens, [list(key) for key in keys], los, his, columns)))
    except UNENCODABLE:  # (a key past 64 bits, say)
        return
    if data is not None:
        write_atomic(Path(folder) / PIPE_MEMO, data)
