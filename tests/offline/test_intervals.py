"""Interval arithmetic over packed arrays: unions end to end or merged, coverage inside windows."""

from __future__ import annotations

import random
from array import array

import pytest

from lens_rl.offline.read.intervals import covered, merge_intervals, merge_packed, merged_packed, pack, union_packed


def test_merge_packed_is_the_union_whether_the_arrays_follow_each_other_or_overlap() -> None:
    """End to end where the second starts after the first ends; touching and overlapping ones merged; the
    same as the union of all the intervals, on random inputs too; never the caller's array itself."""
    a, b = pack([(0, 5), (10, 20)]), pack([(30, 40)])
    assert list(merge_packed(a, b)) == [0, 5, 10, 20, 30, 40]
    assert list(merge_packed(a, pack([(20, 25)]))) == [0, 5, 10, 25]  # touching: one interval
    assert list(merge_packed(a, pack([(3, 12), (50, 60)]))) == [0, 20, 50, 60]
    empty = array("q")
    assert merge_packed(empty, a) == a and merge_packed(empty, a) is not a
    rng = random.Random(7)
    for _ in range(200):
        xs = [(s, s + rng.randint(0, 9)) for s in (rng.randint(0, 100) for _ in range(rng.randint(0, 8)))]
        ys = [(s, s + rng.randint(0, 9)) for s in (rng.randint(0, 100) for _ in range(rng.randint(0, 8)))]
        union = pack(merge_intervals(xs + ys))
        assert merge_packed(pack(merge_intervals(xs)), pack(merge_intervals(ys))) == union


def test_covered_counts_the_union_inside_the_windows_once() -> None:
    """Two packed arrays overlapping each other, inside two windows: each covered nanosecond once."""
    one, two = pack([(0, 10), (20, 30)]), pack([(5, 25)])
    assert covered([one, two], [(0, 30)]) == 30
    assert covered([one, two], [(8, 12), (28, 40)]) == 4 + 2
    assert covered([], [(0, 10)]) == 0


def test_covered_cuts_each_array_to_each_window_as_a_plain_union_would() -> None:
    """The covered length inside windows equals the union of the clipped intervals, for intervals inside,
    across, touching and outside each window's edges, one array or several."""
    import random

    from lens_rl.buckets import union_length
    from lens_rl.offline.read.intervals import covered, merge_intervals, pack

    rng = random.Random(7)
    for n in range(300):
        count = 12 if n % 10 else 600  # (a run-sized array, past which its length is summed by numpy)
        arrays = [
            pack(merge_intervals(sorted((a, a + rng.randrange(0, 20)) for a in rng.sample(range(20 * count), count))))
            for _ in range(rng.randrange(1, 4))
        ]
        windows = merge_intervals(
            sorted((a, a + rng.randrange(1, 5 * count)) for a in rng.sample(range(20 * count), 3))
        )
        expected = union_length(
            sorted(
                (max(a, lo), min(b, hi))
                for p in arrays
                for a, b in zip(p[0::2], p[1::2], strict=True)
                for lo, hi in windows
                if min(b, hi) > max(a, lo)
            )
        )
        assert covered(arrays, windows) == expected
        assert covered(arrays[:1], windows) == union_length(
            sorted(
                (max(a, lo), min(b, hi))
                for a, b in zip(arrays[0][0::2], arrays[0][1::2], strict=True)
                for lo, hi in windows
                if min(b, hi) > max(a, lo)
            )
        )


def test_union_packed_is_the_plain_union_with_touching_empty_and_nested_intervals() -> None:
    """The union of several processes' busy arrays is the plain rule's (sorted, touching ones merged), whatever
    the intervals: nested, touching, of no length, repeated across arrays."""
    rng = random.Random(9)
    for _ in range(300):
        arrays = []
        for _k in range(rng.randrange(1, 6)):
            raw = [(a, a + rng.choice([0, 0, 1, rng.randrange(1, 30)])) for a in (rng.randrange(100) for _ in range(8))]
            arrays.append(pack(merge_intervals(raw)))
        expected = pack(merge_intervals(pair for a in arrays for pair in zip(a[0::2], a[1::2], strict=True)))
        assert union_packed(arrays) == expected


def test_union_packed_of_many_ranks_is_the_plain_union_however_they_overlap() -> None:
    """The union of many ranks' busy arrays (united two by two while that shrinks them, the rest at once) is
    the plain rule's: ranks busy at the same times, at other times, some alike, some empty, nested, touching."""
    rng = random.Random(13)
    for _ in range(200):
        shared = [(a, a + rng.randrange(0, 40)) for a in (rng.randrange(0, 2000, 10) for _ in range(30))]
        arrays = []
        for _k in range(rng.randrange(3, 60)):
            own = rng.sample(shared, rng.randrange(len(shared) + 1)) if rng.random() < 0.7 else []
            own += [(a, a + rng.choice([0, 1, rng.randrange(1, 50)])) for a in (rng.randrange(2000) for _ in range(5))]
            arrays.append(pack(merge_intervals(own if rng.random() < 0.95 else [])))
        expected = pack(merge_intervals(pair for a in arrays for pair in zip(a[0::2], a[1::2], strict=True)))
        assert union_packed(arrays) == expected


def test_merged_packed_is_the_plain_merge_of_any_intervals() -> None:
    """A run's step windows or weight syncs merged in numpy read as the plain rule's, packed: touching, nested,
    of no length, repeated, unsorted, one that ends before it starts; a time past int64 an error either way."""
    rng = random.Random(11)
    for _ in range(300):
        raw = [(a, a + rng.choice([0, 0, 1, rng.randrange(1, 30)])) for a in (rng.randrange(100) for _ in range(9))]
        raw = rng.sample(raw, rng.randrange(len(raw) + 1))
        if rng.random() < 0.2:
            raw.append((50, 40))  # (an end before its start)
        got = merged_packed([a for a, _ in raw], [b for _, b in raw])
        assert got == pack(merge_intervals(raw)), raw
    assert merged_packed([], []) == array("q")
    for plain in (
        lambda: pack(merge_intervals([(1, 5), (2**70, 2**70 + 1)])),
        lambda: merged_packed([1, 2**70], [5, 2**70 + 1]),
    ):
        with pytest.raises(OverflowError):  # (a time past int64: no packed array holds it, either way)
            plain()


def test_overcounted_stretches_make_the_sets_lengths_added_the_union() -> None:
    """For random merged interval sets, the sets' lengths added, less each overcounted stretch's length times
    its extra covers, is the length of their union, and every stretch lies where two or more sets cover."""
    import numpy as np

    from lens_rl.offline.read.intervals import overcounted

    rng = np.random.default_rng(7)
    for _case in range(200):
        sets = []
        for _k in range(int(rng.integers(0, 5))):
            edges = np.sort(rng.choice(100, size=2 * int(rng.integers(0, 6)), replace=False)).astype(np.int64)
            sets.append((edges[0::2], edges[1::2]))
        cover = np.zeros(100, np.int64)
        for lo, hi in sets:
            for a, b in zip(lo, hi, strict=True):
                cover[a:b] += 1
        lo, hi, extra = overcounted(sets)
        added = sum(int((h - lo_).sum()) for lo_, h in sets)
        assert added - int(((hi - lo) * extra).sum()) == int((cover > 0).sum())
        for a, b, e in zip(lo, hi, extra, strict=True):
            assert (cover[a:b] == e + 1).all()
