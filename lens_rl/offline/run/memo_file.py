"""The critical path's memo on disk (``critical-memo.msgpack`` in a run's cache folder): the per-step results
of earlier looks (:class:`~lens_rl.offline.rollup.memo.Memo`) with the tokens of the cache entries they were
made from. Records framed as an entry's (:mod:`~lens_rl.offline.run.cache_files`), each typed data
(:class:`~lens_rl.offline.run.records.MemoRec`, :class:`~lens_rl.offline.run.records.MemoDeltaRec`) behind
the user's seal (:func:`~lens_rl.offline.run.kept.sealed`: one anybody else wrote reads as none): the first
whole, each later one what one look walked, chained to
the tokens it was made from; written whole after :data:`~lens_rl.offline.run.cache_files.MAX_RECORDS`
records, or once its appended records outgrow half its first.

Example::

    memo, why = load_memo(folder, stats.cache_reads)
    ...  # the rollup, with memo
    save_memo(folder, stats.cache_reads, memo)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from lens_rl.offline.rollup.memo import Memo, from_disk, memo_key
from lens_rl.offline.run.cache_files import LENGTH, MAX_RECORDS, after_length, records_in
from lens_rl.offline.run.disk import append_to, cache_key, read_bytes, write_atomic
from lens_rl.offline.run.kept import sealed, unsealed
from lens_rl.offline.run.records import UNENCODABLE, MemoDeltaRec, MemoRec, decode, encode
from lens_rl.store import CacheRead

__all__ = ["load_memo", "made_from", "save_memo", "sealed_record"]

_log = logging.getLogger("lens_rl")
_MEMO = "critical-memo.msgpack"


class _MemoFile(NamedTuple):
    """Where a memo read from its file stands: the tokens of the entries its last applied record was made
    from, and (records, bytes of the first, bytes after it), as an entry's ``disk``."""

    tokens: dict[str, Any]
    disk: tuple[int, int, int]


class _State(NamedTuple):
    """A memo file's records applied: the tokens, stretch keys, records (by :func:`memo_key`) and sums of
    the last state, and where the file stands."""

    tokens: dict[str, Any]
    keys: list[Any]
    rows: dict[tuple[str, Any], Any]
    sums: Any
    disk: tuple[int, int, int]


def load_memo(folder: str, reads: Sequence[CacheRead]) -> tuple[Memo, str | None]:
    """The critical path's per-step results earlier looks kept, if every file they were made from is as the
    last look left it (``reads``: this look's :attr:`~lens_rl.store.ReadStats.cache_reads`); else an empty
    one. Also why a memo there was not used, where that is worth a line (None: used, none, another's, or out
    of date)."""
    try:
        data = read_bytes(Path(folder) / _MEMO)
    except OSError:
        return Memo(), None
    state = _read_state(data)
    if not isinstance(state, _State):
        return Memo(), state
    if not made_from(state.tokens, reads):
        return Memo(), None  # a file gone, rewritten, or read by another look since
    fresh = [start for *_, start in reads if start is not None]
    source = _MemoFile(state.tokens, state.disk)
    return Memo(state.rows, state.keys, min(fresh) if fresh else None, source, state.sums), None


def _read_state(data: bytes) -> _State | str | None:
    """The state a memo file's records come to; else why not (None: none worth a line)."""
    records = records_in(data, 0)
    try:
        start, stop = next(records)
    except (StopIteration, ValueError):
        return None  # cut short: walked afresh
    body = unsealed(memoryview(data)[start:stop])  # (a view: no copy of the memo's megabytes)
    if body is None:
        return None  # not sealed by this user's lens_rl (or no key): walked afresh
    try:
        base = decode(body, MemoRec | MemoDeltaRec)
    except Exception as exc:  # sealed by this user, yet not as this lens_rl writes it
        return f"corrupt ({type(exc).__name__})"
    try:
        if not isinstance(base, MemoRec):
            return "corrupt (not a memo)"
        if base.key != cache_key():
            return "of another lens_rl version"
        rows = {memo_key(r): r for r in _whole(base.records)}
        state = _State(base.tokens, base.keys, rows, base.sums, (1, len(data), 0))
    except Exception as exc:
        return f"corrupt ({type(exc).__name__})"
    return _with_deltas(state, data, records)


def _with_deltas(state: _State, data: bytes, records: Iterator[tuple[int, int]]) -> _State:
    """``state`` with each later record made from the state before it applied (of two looks that appended at
    once, the second's is skipped; at a record cut short or not sealed by this user, the state before it
    stands, and the file is written whole next)."""
    tokens, keys, rows, sums, _disk = state
    count, appended = 1, 0
    try:
        for start, stop in records:
            delta = _record(data, start, stop)
            count, appended = count + 1, appended + LENGTH + stop - start
            if isinstance(delta, MemoDeltaRec) and delta.parent == tokens and delta.keys_from == len(keys):
                tokens, sums = delta.tokens, delta.sums
                keys += delta.keys
                for key in delta.dropped:  # (first: a step walked again drops its earlier record)
                    rows.pop(from_disk(key), None)
                rows.update((memo_key(r), r) for r in _whole(delta.records))
    except Exception as exc:  # (the state before it stands; written whole next)
        _log.debug("lens-rl: the critical path's memo: read up to a record cut short or not ours (%s)", exc)
        count = MAX_RECORDS
    return _State(tokens, keys, rows, sums, (count, len(data) - appended, appended))


def _whole(records: list[list[Any]]) -> list[list[Any]]:
    """``records`` where each one's stretches are whole (a list, or packed pairs of int64s: :func:`flat_numbers`
    reads them when it is asked); ValueError where one's do not add up."""
    if not all(type(r[4]) is list or len(r[4]) % 16 == 0 for r in records):
        raise ValueError("a record's stretches that do not add up")
    return records


def _record(data: bytes, start: int, stop: int) -> MemoRec | MemoDeltaRec:
    """One record of the memo's file (ValueError: not sealed by this user's lens_rl; msgspec.DecodeError: not
    a memo record of this schema)."""
    body = unsealed(memoryview(data)[start:stop])  # (a view: no copy of the memo's megabytes)
    if body is None:
        raise ValueError("not sealed by this user's lens_rl")
    return decode(body, MemoRec | MemoDeltaRec)  # type: ignore[no-any-return]


def made_from(tokens: Mapping[str, Any], reads: Sequence[CacheRead]) -> bool:
    """Whether the entries a memo was made from (``tokens``) are those this look read from (``reads``)."""
    before = {name: token for name, token, _after, _fresh in reads}
    return all(before.get(name) == token for name, token in tokens.items()) and all(
        token is None or name in tokens for name, token in before.items()
    )


def save_memo(folder: str, reads: Sequence[CacheRead], memo: Memo) -> None:
    """Keep this look's per-step results with the tokens of the cache entries they were made from (sealed;
    not kept without the user's key): what this look walked appended to the file the memo was read from
    while that takes one more record, else every record it holds, written whole."""
    tokens = {name: after for name, _before, after, _fresh in reads if after is not None}
    path, source = Path(folder) / _MEMO, memo.source
    if isinstance(source, _MemoFile) and source.disk[0] < MAX_RECORDS:
        record = sealed_record(_delta(memo, source, tokens))
        if record is None:
            return
        _count, first, appended = source.disk
        if appended + len(record) <= max(first // 2, 1 << 16) and append_to(path, record):
            return
    whole = MemoRec(cache_key(), tokens, [list(key) for key in memo.keys], memo.made, memo.state_sums())  # type: ignore[arg-type]
    record = sealed_record(whole)
    if record is not None:
        write_atomic(path, record)


def _delta(memo: Memo, source: _MemoFile, tokens: dict[str, Any]) -> MemoDeltaRec:
    """What this look adds to the state it read (``source``): the steps it walked, the records it no longer
    holds true, the stretch keys it added and its tokens and sums."""
    return MemoDeltaRec(
        source.tokens,
        tokens,
        memo.earlier_keys,
        [list(key) for key in memo.keys[memo.earlier_keys :]],
        memo.walked,  # type: ignore[arg-type]
        memo.dropped(),
        memo.state_sums(),
    )


def sealed_record(value: Any) -> bytes | None:
    """``value`` encoded behind the user's seal, after its length (None: no key, or a value the schema cannot
    hold: nothing kept)."""
    try:
        data = sealed(encode(value))
    except UNENCODABLE:  # (an int past 64 bits, say)
        return None
    return None if data is None else after_length(data)
