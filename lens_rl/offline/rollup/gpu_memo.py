"""What a look keeps of a process's step and productive joins for the next: the leading intervals (steps in
order, productive intervals in order) that can no longer change (each ending before every one of its devices'
last segment starts), with their devices' summed measures (before the mean; of productive intervals, the busy
ones only: all the job's GPU goodput reads) and the steps' memory peaks. The next look joins only the intervals
after them, when its own first ones are the same (a digest of their keys): the same sums, bit for bit, as each
interval's sums depend only on it and its devices' final segments.

Example::

    n, sums, peaks = reused(memo.steps, [values, lo, hi])   # the first n rows kept, the rest to join
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from lens_rl.offline.rollup.gpu_prefix import Digest

__all__ = ["Keeping", "Kept", "ProcessMemo", "kept_rows", "reused"]

_MEASURES = 7


class Kept(msgspec.Struct, frozen=True):
    """The leading ``n`` intervals of a kind: a digest of their keys, the measures kept (``columns``: every
    other one summed to 0), their sums ``(n, columns)`` and peaks ``(n,)`` (little-endian float64; empty:
    none kept)."""

    n: int
    digest: str
    columns: list[int]
    sums: bytes
    peaks: bytes


class ProcessMemo(msgspec.Struct, frozen=True):
    """A process's kept steps and productive intervals, and the devices that answered them."""

    key: str
    devices: list[str]
    steps: Kept
    productive: Kept


def reused(kept: Kept | None, keys: Digest, peaks: bool = True) -> tuple[int, Any, Any]:
    """How many leading rows of ``keys`` (their key columns' digests) ``kept`` holds, their sums ``(n, 7)`` and
    peaks (0, None, None: none)."""
    rows = keys.columns[0].size
    if kept is None or not 0 < kept.n <= rows or not set(kept.columns) <= set(range(_MEASURES)):
        return 0, None, None
    sums = np.frombuffer(kept.sums, "<f8")
    high = np.frombuffer(kept.peaks, "<f8")
    if sums.size != kept.n * len(kept.columns) or (peaks and high.size != kept.n):
        return 0, None, None
    if keys.upto(kept.n) != kept.digest:
        return 0, None, None
    out = np.zeros((kept.n, _MEASURES))
    out[:, kept.columns] = sums.reshape(kept.n, len(kept.columns))
    return kept.n, out, high if peaks else None


def kept_rows(keys: Digest, hi: Any, limit: int, sums: Any, peaks: Any, columns: Any = None) -> Kept:
    """The leading rows ending before ``limit`` kept (``sums`` before the mean; ``columns``: the measures to
    keep, None: those summed to anything but 0)."""
    late = hi >= limit
    n = int(np.argmax(late)) if late.any() else int(hi.size)
    if columns is None:
        columns = np.flatnonzero((sums[:n] != 0).any(axis=0)).tolist()
    return Kept(
        n,
        keys.upto(n),
        list(columns),
        np.ascontiguousarray(sums[:n][:, columns], "<f8").tobytes(),
        b"" if peaks is None else np.ascontiguousarray(peaks[:n], "<f8").tobytes(),
    )


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
