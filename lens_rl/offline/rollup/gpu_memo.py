"""What a look keeps of a process's step and productive joins for the next: the leading intervals (steps in
order, productive intervals in order) that can no longer change (each ending before every one of its devices'
last segment starts), with their devices' summed measures (before the mean; of productive intervals, the busy
and known ones only: all the job's GPU goodput reads) and the steps' memory peaks. The next look joins only the intervals
after them, when its own first ones are the same (a digest of their keys): the same sums, bit for bit, as each
interval's sums depend only on it and its devices' final segments.

Example::

    n, sums, peaks = reused(memo.steps, [values, lo, hi])   # the first n rows kept, the rest to join
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import numpy as np

from lens_rl.offline.rollup.gpu_prefix import Digest

__all__ = ["PRODUCTIVE_COLUMNS", "Keeping", "Kept", "ProcessMemo", "kept_rows", "raw", "reused"]

_MEASURES = 7
#: the measures of productive intervals the rollup reads (the GPU goodput: busy, over the time with a reading)
PRODUCTIVE_COLUMNS = [0, 1]
_NEVER = np.iinfo(np.int64).min


class Kept(msgspec.Struct, frozen=True):
    """The leading ``n`` intervals of a kind: a digest of their keys, the measures kept (``columns``: every
    other one summed to 0), their sums ``(n - first, columns)`` and peaks ``(n - first,)`` (little-endian
    float64; empty: none kept; decoded as views into the record read, no copy: 17 MB a 1 M-span look) of the
    rows from ``first`` on: 0, all of them; more, the rows after those an earlier look kept (``since`` of
    :func:`kept_rows`: only what is new is written)."""

    n: int
    digest: str
    columns: list[int]
    sums: memoryview
    peaks: memoryview
    first: int = 0


class ProcessMemo(msgspec.Struct, frozen=True):
    """A process's kept steps and productive intervals, and the devices that answered them."""

    key: str
    devices: list[str]
    steps: Kept
    productive: Kept


def raw(values: Any, code: str) -> memoryview:
    """``values`` as the raw bytes of an array of ``code`` (little-endian) to encode, no copy where it is one
    already (the array is not written to while the record is made)."""
    return np.ascontiguousarray(values, code).reshape(-1).data.cast("B")


def reused(
    kept: Kept | None, keys: Digest, peaks: bool = True, whole: bool = False, held: list[int] | None = None
) -> tuple[int, Any, Any]:
    """How many leading rows of ``keys`` (their key columns' digests) ``kept`` holds, their sums ``(n, 7)`` and
    peaks (0, None, None: none); ``whole``: as arrays of every row of ``keys``, the rows after the kept ones
    0 (sums) and nan (peaks), for the joined ones to be added into (no copy of the kept ones again); ``held``:
    the sums' columns only these measures (``(n, len(held))``; a kept measure not among them: none)."""
    rows = keys.columns[0].size
    held = list(range(_MEASURES)) if held is None else held
    if kept is None or kept.first or not 0 < kept.n <= rows or not set(kept.columns) <= set(held):
        return 0, None, None
    sums = np.frombuffer(kept.sums, "<f8")
    high = np.frombuffer(kept.peaks, "<f8")
    if sums.size != kept.n * len(kept.columns) or (peaks and high.size != kept.n):
        return 0, None, None
    if keys.upto(kept.n) != kept.digest:
        return 0, None, None
    out = np.zeros((rows if whole else kept.n, len(held)))
    out[: kept.n, [held.index(c) for c in kept.columns]] = sums.reshape(kept.n, len(kept.columns))
    if not peaks:
        return kept.n, out, None
    if whole:
        high = np.concatenate([high, np.full(rows - kept.n, np.nan)])
    return kept.n, out, high


def kept_rows(
    keys: Digest, hi: Any, limit: int, sums: Any, peaks: Any, held: list[int] | None = None, since: Kept | None = None
) -> Kept:
    """The leading rows ending before ``limit`` kept (``sums`` before the mean, of every measure, those summed to
    anything but 0 kept; ``held``: its columns only these measures, all kept). ``since``: what an earlier look
    kept of these rows, the first ``since.n`` of ``sums`` being its own (:func:`reused` gave them back whole):
    only the rows after them are held (``first``), where the measures kept are the same."""
    late = hi >= limit
    n = int(np.argmax(late)) if late.any() else int(hi.size)
    first = 0
    if since is not None and not since.first and since.n <= n and (peaks is None) == (not len(since.peaks)):
        first = since.n  # (its rows read no measure but its columns: only the new rows looked at)
    if held is None:
        columns = sorted(set(since.columns if first and since is not None else ()) | set(_read(sums[first:n])))
    else:
        columns = list(held)
    if first and since is not None and columns != since.columns:
        first = 0
    return Kept(
        n,
        keys.upto(n),
        columns,
        raw(sums[first:n] if held is not None else sums[first:n][:, columns], "<f8"),
        raw(np.zeros(0) if peaks is None else peaks[first:n], "<f8"),
        first,
    )


def _read(sums: Any) -> list[int]:
    """The measures some row of ``sums`` reads anything of."""
    return [int(c) for c in np.flatnonzero((sums != 0).any(axis=0))]


class Keeping:
    """A look's memos in (``memos``: by process key, what the last look kept; empty: join every interval)
    and out (``out``: this look's, for the next), and the starts each device will be asked again
    (``opens``: by UUID, the window's anchors: :mod:`lens_rl.offline.read.gpu_window`)."""

    def __init__(self, memos: dict[str, ProcessMemo] | None = None) -> None:
        self.memos = memos or {}
        self.out: dict[str, ProcessMemo] = {}
        self.opens: dict[str, list[Any]] = {}
        #: called with each device's UUID and timeline as it is built (its window kept), or None
        self.on_line: Callable[[str, Any], None] | None = None
        #: what ``on_line`` made of each device (by UUID)
        self.states: dict[str, Any] = {}
        #: by process key, how many of its steps and productive intervals its memo gave back (:func:`reused`)
        self.reused: dict[str, tuple[int, int]] = {}

    def keep(
        self, key: str, devices: list[str], steps: tuple[Any, ...], productive: tuple[Any, ...], limit: int
    ) -> None:
        """A process's leading steps and productive intervals ending before ``limit`` kept for the next look:
        ``steps`` (keys' :class:`~lens_rl.offline.rollup.gpu_prefix.Digest`, ends, sums before the mean, peaks),
        ``productive`` (digest, ends, sums: their :data:`PRODUCTIVE_COLUMNS` kept)."""
        (s_keys, s_hi, s_sums, s_peaks), (p_keys, p_hi, p_sums) = steps, productive
        memo, (s_n, p_n) = self.memos.get(key), self.reused.get(key, (0, 0))
        mine = memo is not None and memo.devices == list(devices)
        # (the rows its memo gave back whole are the memo's: only the rows after them are written again)
        s_since = memo.steps if mine and memo is not None and s_n == memo.steps.n else None
        p_since = memo.productive if mine and memo is not None and p_n == memo.productive.n else None
        kept_steps = kept_rows(s_keys, s_hi, limit, s_sums, s_peaks, since=s_since)
        self.out[key] = ProcessMemo(
            key, list(devices), kept_steps, kept_rows(p_keys, p_hi, limit, p_sums, None, PRODUCTIVE_COLUMNS, p_since)
        )

    def note_opens(self, devices: Mapping[str, Any], answering: list[str], asked: list[Any]) -> None:
        """The starts a process's devices may be asked again next look (their anchors): of its spans from the
        first that may not settle, its hull, its steps and productive intervals that may not settle (may: ending
        at or after a bound below any of its devices' last segment start, the sample before their last)."""
        starts, ends, hull, (step_lo, step_hi), (prod_lo, prod_hi) = asked
        bound = min((int(devices[u].t[-2]) if devices[u].t.size > 1 else _NEVER for u in answering), default=_NEVER)
        late = np.maximum(starts, ends) >= bound
        first = int(np.argmax(late)) if late.any() else starts.size
        opens = [starts[first:], hull[0], step_lo[step_hi >= bound], prod_lo[prod_hi >= bound]]
        for uuid in answering:
            self.opens.setdefault(uuid, []).extend(opens)
