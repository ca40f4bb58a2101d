"""The pipeline's per-step coverage kept between looks at a growing run (:class:`PipeMemo`): how much of each
complete step's window every array of the pipeline covers (each rank's busy time, the pools' unions, the weight
syncs). A window that ended before every span read since the earlier look (``fresh_from``) is covered as it was
then: new spans start at or after ``fresh_from``, so no array changes before it. A look reads the kept windows'
coverage and computes only the rest's, from the arrays cut to the intervals that reach them (:func:`tail`),
whose unions are a few intervals, not a run's. The refresh cache keeps it on disk
(:mod:`lens_rl.offline.run.pipe_memo_file`).

Example::

    memo = PipeMemo(keys, los, his, covered, fresh_from=earliest_new_start)
    pipeline_row(processes, view, rows, memo=memo)
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence, Sized
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import coverage

__all__ = ["UNIONS", "PipeMemo", "Windows", "tail"]

#: the pipeline's arrays after each rank's busy time: the pools' unions and the weight syncs'
UNIONS = ("rollout", "trainer", "any", "both", "syncs", "syncs_rollout")


def tail(packed: array, since: int) -> array:
    """The intervals of the merged, packed ``packed`` that end after ``since`` (whole): what covers any window
    starting at or after it (those before it cover none of them)."""
    if not packed or packed[1] > since:
        return packed
    ends = np.frombuffer(packed, np.int64)[1::2]
    first = int(np.searchsorted(ends, since, side="right"))
    return packed[2 * first :]


class PipeMemo:
    """Each array's coverage of every window an earlier look read, and this look's.

    ``keys``: the arrays' keys in order (``["busy", role, *process]`` per rank, then the unions' names); ``los``,
    ``his``: the windows (int64, every complete step's, in step order); ``covered``: per key its coverage of
    each window (int64 ns); ``fresh_from``: the earliest start of a span read since (None: none was);
    ``source``: for whoever keeps it (the refresh cache's business). ``made``: this look's (keys, los, his,
    covered), set by the pipeline for whoever keeps it; ``reused``: how many windows this look took as kept."""

    def __init__(
        self,
        keys: Sequence[Sequence[Any]] = (),
        los: Any = None,
        his: Any = None,
        covered: Mapping[tuple[Any, ...], Any] | None = None,
        fresh_from: int | None = None,
        source: Any = None,
    ) -> None:
        self.keys = [tuple(k) for k in keys]
        self.los = np.zeros(0, np.int64) if los is None else los
        self.his = np.zeros(0, np.int64) if his is None else his
        self.covered = dict(covered or {})
        self.fresh_from = fresh_from
        self.source = source
        self.made: tuple[list[tuple[Any, ...]], Any, Any, dict[tuple[Any, ...], Any]] | None = None
        self.reused = 0

    def settled(self, keys: Sequence[tuple[Any, ...]], los: Any, his: Any) -> int:
        """How many of the windows (``los``, ``his``) from the first are the earlier look's and ended before
        ``fresh_from``, for these very arrays (``keys``: the same, in the same order); 0 where they are not."""
        if keys != self.keys or not len(self.los) or not all(key in self.covered for key in keys):
            return 0
        n = min(len(los), len(self.los))
        same = (los[:n] == self.los[:n]) & (his[:n] == self.his[:n])
        if self.fresh_from is not None:
            same &= his[:n] < self.fresh_from
        return n if bool(same.all()) else int(np.argmin(same))

    def kept(self, key: tuple[Any, ...], n: int) -> Any:
        """The earlier look's coverage of its first ``n`` windows by the array ``key``."""
        return self.covered[key][:n]


class Windows:
    """Every complete step's windows (``order``: those steps; ``owners``: each window's step's index), and each
    array's coverage of every window, read once (:meth:`of`); the wall's is their sum where the steady steps'
    windows are the wall itself, disjoint (coverage adds up over windows that only touch), else read apart.
    Where they are, the windows a :class:`PipeMemo` keeps are read from it (:meth:`reuse`), and every window's
    coverage is left in it for the next look (:meth:`keep`)."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        windows: dict[Any, list[tuple[int, int]]],
        steady: list[Any],
        wall: Sized,
    ) -> None:
        self.order = [r["step"] for r in rows if not r["incomplete"] and windows.get(r["step"])]
        owner, los, his = [], [], []
        for n, step in enumerate(self.order):
            for lo, hi in windows[step]:
                owner.append(n)
                los.append(lo)
                his.append(hi)
        self.owners = np.array(owner, np.int64)
        self.los, self.his = np.array(los, np.int64), np.array(his, np.int64)
        self._memo: dict[int, Any] = {}
        self._keys: dict[int, tuple[Any, ...]] = {}  # (each array's key: id -> key, where a memo is read)
        self.keys: list[tuple[Any, ...]] = []
        self.arrays: list[tuple[tuple[Any, ...], array]] = []  # (each array with its key)
        self.kept: PipeMemo | None = None  # (the memo read from, and how many windows from the first it gives)
        self.n = 0
        self.steady: Any = None  # (which windows are the steady steps': None where the wall is not theirs alone)
        at = {step: n for n, step in enumerate(self.order)}
        if steady and all(step in at for step in steady):
            mask = np.zeros(len(self.order), bool)
            mask[[at[step] for step in steady]] = True
            picked = mask[self.owners]
            starts, ends = np.sort(self.los[picked]), np.sort(self.his[picked])
            if len(starts) == len(wall) and bool((starts[1:] >= ends[:-1]).all()):
                self.steady = picked

    def reuse(self, memo: PipeMemo | None, keys: list[tuple[Any, ...]]) -> int | None:
        """Take the windows ``memo`` keeps for these arrays (``keys``) where the wall is the steady windows
        (else the wall is read from the arrays whole); the time from which the rest start (None: every window
        is computed from the arrays whole)."""
        self.kept, self.n, self.keys = memo, 0, keys
        if memo is None or self.steady is None:
            return None
        self.n = memo.reused = memo.settled(keys, self.los, self.his)
        if not self.n:
            return None
        return int(self.los[self.n :].min()) if self.n < len(self.los) else int(self.his.max())

    def keyed(self, arrays: dict[str, Any], roles: Sequence[str]) -> dict[str, Any]:
        """The pipeline's ``arrays`` (each rank's busy time by role, in ``roles``' order, then the :data:`UNIONS`),
        each one's key noted (in the order of the keys :meth:`reuse` was given)."""
        if self.n:  # (an array under two keys, a union of one array say: one each, their kept windows differ)
            seen: set[int] = set()
            for role in roles:
                arrays["busy"][role] = [_apart(own, seen) for own in arrays["busy"][role]]
            for name in UNIONS:
                arrays[name] = _apart(arrays[name], seen)
        packed = [own for role in roles for own in arrays["busy"][role]] + [arrays[name] for name in UNIONS]
        self.arrays = list(zip(self.keys, packed, strict=True))
        for key, each in self.arrays:
            self._keys.setdefault(id(each), key)
        return arrays

    def of(self, packed: array) -> Any:
        """How much of each window ``packed`` covers (ns, int64): the kept windows' as kept, the others'
        computed."""
        got = self._memo.get(id(packed))
        if got is None:
            n, key = self.n, self._keys.get(id(packed))
            if n and key is not None and self.kept is not None:
                got = np.concatenate((self.kept.kept(key, n), coverage(packed, self.los[n:], self.his[n:])))
            else:
                got = coverage(packed, self.los, self.his)
            self._memo[id(packed)] = got
        return got

    def keep(self, memo: PipeMemo) -> None:
        """Every array's coverage of every window into ``memo`` (its ``made``), for the next look."""
        memo.made = (self.keys, self.los, self.his, {key: self.of(each) for key, each in self.arrays})

    def of_wall(self, packed: array, wl: Any, wh: Any) -> int:
        """How much of the wall (``wl``, ``wh``) ``packed`` covers (ns)."""
        if self.steady is None:
            return int(coverage(packed, wl, wh).sum())
        return int(self.of(packed)[self.steady].sum())


def _apart(packed: array, seen: set[int]) -> array:
    """``packed``, or a copy of it where it is one already ``seen`` (noted)."""
    if id(packed) in seen:
        packed = array("q", packed)
    seen.add(id(packed))
    return packed
