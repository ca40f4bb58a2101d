"""What a look keeps of a process's steps and productive intervals: the leading settled ones with their sums,
given back to the next look only where its own leading keys are the same."""

from __future__ import annotations

import numpy as np

from lens_rl.offline.rollup.gpu_memo import kept_rows, reused
from lens_rl.offline.rollup.gpu_prefix import Digest


def _keys(n: int) -> list[np.ndarray]:
    values = np.arange(n, dtype=np.int64)
    return [values, values * 10, values * 10 + 9]


def test_the_leading_settled_rows_come_back_with_their_sums_bit_for_bit() -> None:
    """Rows ending before the limit, up to the first that does not, are kept; the next look with more rows
    after them gets exactly their sums and peaks back (measures kept only where some row read them)."""
    keys = _keys(10)
    sums = np.zeros((10, 7))
    sums[:, 1] = np.arange(10) / 3
    sums[:, 0] = 1e9 / 7
    peaks = np.arange(10, dtype=np.float64)
    peaks[2] = np.nan
    kept = kept_rows(Digest(*keys), keys[2], 60, sums, peaks)
    assert kept.n == 6 and kept.columns == [0, 1]
    n, got, high = reused(kept, Digest(*_keys(14)))
    assert n == 6 and got.tobytes() == sums[:6].tobytes()
    assert np.array_equal(high, peaks[:6], equal_nan=True)
    # (as arrays of every row, for the joined ones to be added after them: 0 and nan there)
    n, whole, high = reused(kept, Digest(*_keys(14)), whole=True)
    assert n == 6 and whole.shape == (14, 7) and whole[:6].tobytes() == sums[:6].tobytes() and not whole[6:].any()
    assert np.array_equal(high, np.append(peaks[:6], [np.nan] * 8), equal_nan=True)
    assert reused(kept, Digest(*_keys(14)), peaks=False, whole=True)[2] is None


def test_rows_that_changed_or_are_gone_are_joined_again() -> None:
    """A leading row with another key (a step whose last span moved), or fewer rows than were kept: nothing
    comes back."""
    keys = _keys(10)
    kept = kept_rows(Digest(*keys), keys[2], 60, np.ones((10, 7)), np.zeros(10))
    moved = _keys(10)
    moved[2] = moved[2].copy()
    moved[2][3] += 1
    assert reused(kept, Digest(*moved))[0] == 0
    assert reused(kept, Digest(*_keys(4)))[0] == 0
    assert reused(None, Digest(*keys))[0] == 0


def test_a_digest_goes_on_from_where_it_was_asked() -> None:
    """A prefix's digest asked after a shorter one's is the digest of the whole prefix, as asked afresh."""
    a, b = np.arange(100, dtype=np.int64), np.arange(100, 200, dtype=np.int64)
    going = Digest(a, b)
    going.upto(30)
    assert going.upto(70) == Digest(a, b).upto(70) and going.upto(20) == Digest(a, b).upto(20)
    assert Digest(a, b).upto(70) != Digest(a, b + 1).upto(70)


def test_rows_kept_on_from_an_earlier_memo_hold_only_the_new_ones() -> None:
    """Given what an earlier look kept of the same rows, a look keeps only the rows after them (``first``),
    the same digest and measures as keeping them all; where a new row reads a measure the earlier ones did
    not, every row is kept again."""
    keys = _keys(10)
    sums = np.zeros((10, 7))
    sums[:, 1] = np.arange(10) / 3
    peaks = np.arange(10, dtype=np.float64)
    before = kept_rows(Digest(*keys), keys[2], 40, sums, peaks)
    after = kept_rows(Digest(*keys), keys[2], 80, sums, peaks, since=before)
    whole = kept_rows(Digest(*keys), keys[2], 80, sums, peaks)
    assert (before.n, after.first, after.n) == (4, 4, 8) and after.digest == whole.digest
    assert bytes(after.sums) == sums[4:8, [1]].tobytes() and bytes(after.peaks) == peaks[4:8].tobytes()
    sums[5, 2] = 1.0  # (a measure no earlier row read)
    assert kept_rows(Digest(*keys), keys[2], 80, sums, peaks, since=before).first == 0


def test_rows_held_as_one_measure_come_back_as_that_column_only() -> None:
    """Rows whose sums hold one measure (a productive union's busy) are kept as that measure and given back as
    a one-column array, bit for bit; kept rows of a measure the caller does not hold give nothing back."""
    keys = _keys(10)
    busy = (np.arange(10) / 7).reshape(10, 1)
    kept = kept_rows(Digest(*keys), keys[2], 60, busy, None, held=[1])
    assert kept.columns == [1] and not len(kept.peaks)
    n, got, _ = reused(kept, Digest(*_keys(12)), peaks=False, whole=True, held=[1])
    assert n == 6 and got.shape == (12, 1) and got[:6].tobytes() == busy[:6].tobytes() and not got[6:].any()
    assert reused(kept, Digest(*_keys(12)), peaks=False, held=[0])[0] == 0
