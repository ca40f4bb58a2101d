"""The pipeline's per-step coverage kept between looks (``rollup/pipe_memo.py``): an array cut to what reaches a
time covers the windows from it as the whole array does, and a window is taken as kept only where the earlier
look read it, for the same arrays, and it ended before what is new."""

from __future__ import annotations

from array import array

import numpy as np

from lens_rl.offline.read.intervals import coverage, pack
from lens_rl.offline.rollup.pipe_memo import PipeMemo, tail


def test_an_array_cut_to_a_time_covers_the_windows_from_it_as_the_whole_array() -> None:
    """The intervals of a busy time that end after a time, kept whole, cover every window starting at or after
    it exactly as the whole busy time does; none cut away where the first already reaches it."""
    busy = pack([(0, 5), (7, 12), (14, 40), (45, 46), (50, 90)])
    for since in (0, 6, 12, 13, 30, 46, 60, 100):
        cut = tail(busy, since)
        los = np.array([since, since + 3, since + 20], np.int64)
        assert list(coverage(cut, los, los + 7)) == list(coverage(busy, los, los + 7)), since
    assert tail(busy, 3) is busy and list(tail(busy, 12)) == [14, 40, 45, 46, 50, 90]
    assert list(tail(array("q"), 5)) == []


def test_kept_windows_are_the_earlier_looks_that_ended_before_what_is_new() -> None:
    """A look takes the earlier look's windows from the first while they are the same windows, for the same
    arrays in the same order, and ended before the earliest new span; none where the arrays differ."""
    keys = [("busy", "trainer", "w", 0, 1, 0, False), ("rollout",)]
    los, his = np.array([0, 10, 20, 30], np.int64), np.array([9, 19, 29, 39], np.int64)
    covered = {key: np.arange(4, dtype=np.int64) for key in keys}
    assert PipeMemo(keys, los, his, covered, fresh_from=None).settled(keys, los, his) == 4
    assert PipeMemo(keys, los, his, covered, fresh_from=25).settled(keys, los, his) == 2  # (the third ends after)
    grown_lo, grown_hi = np.append(los, 40), np.append(his, 49)
    assert PipeMemo(keys, los, his, covered, fresh_from=40).settled(keys, grown_lo, grown_hi) == 4
    moved = his.copy()
    moved[1] = 18  # (a step's window that changed: kept up to it)
    assert PipeMemo(keys, los, his, covered, fresh_from=None).settled(keys, los, moved) == 1
    assert PipeMemo(keys, los, his, covered).settled(keys[::-1], los, his) == 0  # (other arrays)
    assert PipeMemo(keys[:1], los, his, {keys[0]: covered[keys[0]]}).settled(keys, los, his) == 0
    assert PipeMemo().settled(keys, los, his) == 0
    assert list(PipeMemo(keys, los, his, covered).kept(keys[1], 2)) == [0, 1]
