"""The rollup's bulk arithmetic gives, value for value and bit for bit, what the plain rule gives."""

from __future__ import annotations

import random
import struct
from array import array
from collections.abc import Sequence
from typing import Any

from lens_rl.offline.read.intervals import merge_intervals, pack
from lens_rl.offline.read.parts import EXACT_DURATIONS, PhasePart, StepPart, median, step_key
from lens_rl.offline.rollup.bulk import quantile_s, rounded, seconds_rounded, selected, window_medians
from lens_rl.offline.rollup.steps import _wall, _walls, step_times


def _bits(values: Sequence[float]) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


def test_seconds_rounded_is_pythons_round_of_ns_over_1e9_bit_for_bit() -> None:
    """Halfway counts (those whose float lands either side of the half), negative ones (``-0.0``), counts past
    2**53 and past int64, floats and bools all round exactly as ``round(n / 1e9, 6)`` does."""
    rng = random.Random(11)
    values: list[int] = []
    for scale in (10**3, 10**9, 10**12, 10**15, 2**53, 2**62):
        values += [rng.randrange(-scale // 100, scale) for _ in range(3000)]
    values += [k * 1000 + 500 for k in range(0, 10**6, 97)]  # halfway between two microseconds
    values += [7_812_500 * j for j in range(1, 2000, 2)]  # halfway, and exact in binary: to even
    values += [0, 1, -1, -499, -500, 2**53 - 1, 2**53, 2**53 + 1, 2**63 - 1, -(2**63)]
    assert _bits(seconds_rounded(values)) == _bits([round(n / 1e9, 6) for n in values])
    odd: list[Sequence[Any]] = [[2**64] + [1] * 300, [1.5e9] * 300, [True] * 300, array("q", [1_234_567] * 300)]
    for ns in odd:
        assert _bits(seconds_rounded(ns)) == _bits([round(n / 1e9, 6) for n in ns])


def test_rounded_is_pythons_round_of_each_float_bit_for_bit() -> None:
    """Floats of every size, those on a half and the floats either side of it, negative ones (``-0.0``), zero,
    nan, infinities and ones past 2**52 round exactly as ``round(x, digits)`` does, for 4 and 6 digits."""
    import numpy as np

    rng = np.random.default_rng(5)
    for digits in (4, 6):
        half = (rng.integers(0, 10**8, 4000) + 0.5) / 10**digits
        values = np.concatenate(
            [
                rng.random(3000),
                rng.random(3000) * 10.0 ** rng.integers(-10, 18, 3000),
                rng.integers(0, 10**12, 3000) / 1e9,
                half,
                np.nextafter(half, np.inf),
                np.nextafter(half, -np.inf),
                -rng.random(500) / 10**digits,
                [0.0, -0.0, np.nan, np.inf, -np.inf, 1e300, 2.0**52, 2.0**53 / 10**digits, 0.5, 1.5, 2.5],
            ]
        )
        assert _bits(rounded(values, digits)) == _bits([round(x, digits) for x in values.tolist()])
        assert _bits(rounded(values[:10], digits)) == _bits([round(x, digits) for x in values[:10].tolist()])


def test_selected_is_the_sorted_arrays_value_at_the_rank_with_ties_and_outliers() -> None:
    """A selection gives the sorted array's value at every rank, whatever the durations: all one value, two
    values with a rare second, a few outliers past the sample's bracket, negative and int64-sized ones."""
    import numpy as np

    rng = np.random.default_rng(3)
    n = 20_000
    arrays = [
        np.full(n, 5, np.int64),
        np.where(rng.random(n) < 0.01, 7, 5).astype(np.int64),
        rng.integers(0, 10**9, n),
        rng.integers(0, 3, n),
        np.concatenate([np.full(n - 10, 5), rng.integers(0, 10**9, 10)]).astype(np.int64),
        np.concatenate([np.full(n - 10, 10**9), rng.integers(0, 10**3, 10)]).astype(np.int64),
        rng.integers(-(2**62), 2**62, n),
        rng.integers(0, 100, 50),
    ]
    for values in arrays:
        ordered = np.sort(values)
        for rank in {0, 1, len(values) // 2, int(0.95 * len(values)), len(values) - 2, len(values) - 1}:
            assert selected(values.copy(), rank) == ordered[rank]
    for _ in range(200):
        values = rng.integers(0, int(rng.integers(1, 40)), int(rng.integers(1024, 4000)))
        rank = int(rng.integers(0, len(values)))
        assert selected(values.copy(), rank) == np.sort(values)[rank]


def test_quantile_is_the_phase_parts_own_exact_or_sketched() -> None:
    """A merged phase's nearest-rank quantile: exact durations (small and large), ties, and a sketch, as
    :meth:`PhasePart.quantile_s` gives them."""
    rng = random.Random(5)
    for count in (0, 1, 7, 300, 5000):
        for q in (0.0, 0.5, 0.95, 1.0):
            phase = PhasePart(durations=array("q", (rng.randrange(10**9) // 7 for _ in range(count))))
            expected = PhasePart(durations=array("q", phase.durations)).quantile_s(q)
            assert quantile_s(phase, q) == expected
            split = PhasePart(durations=phase.durations[: count // 3])
            assert (
                quantile_s(split, q, [phase.durations[count // 3 : count // 2], phase.durations[count // 2 :]])
                == expected
            )
    sketched = PhasePart(durations=array("q", range(1, EXACT_DURATIONS + 2)))
    sketched.bound()
    sketched.durations.extend(range(1000))
    twin = PhasePart(durations=array("q", sketched.durations), sketch=dict(sketched.sketch or {}))
    expected = twin.quantile_s(0.95)
    assert quantile_s(sketched, 0.95) == expected
    assert (
        quantile_s(PhasePart(sketch=sketched.sketch), 0.95, [sketched.durations[:10], sketched.durations[10:]])
        == expected
    )


def test_window_medians_are_the_plain_medians_latest_window_first() -> None:
    """Medians of consecutive windows counted back from the latest value, odd and even windows (the mean of
    two middle ints as Python divides them, past 2**53 too), a ragged first window left out, as the plain
    rule gives them."""
    rng = random.Random(9)
    for window in (1, 2, 3, 20, 21):
        for count in (0, 5, 257, 1000, 4099):
            for scale in (10**9, 2**60):
                values = array("q", (rng.randrange(scale) for _ in range(count)))
                plain = [median(values[end - window : end]) for end in range(count, window - 1, -window)]
                got = window_medians(values, window)
                assert got == plain and _bits(got) == _bits(plain)
                assert [type(v) for v in got] == [type(v) for v in plain]  # (an odd window's median: an int)
                assert window_medians(list(values), window) == plain


def test_step_walls_in_bulk_are_each_steps_own() -> None:
    """A run's steps of every shape (one umbrella with its bucketed spans inside or crossing its edge, several
    umbrellas, none, no bucketed spans, no interval at all) get the wall and unattributed time the one-step
    rule gives each."""
    rng = random.Random(13)
    base = 1_700_000_000_000_000_000
    parts = []
    for n in range(500):
        lo = base + n * 10**10
        sp = StepPart(lo, lo + rng.randrange(1, 10**10))
        shape = rng.randrange(6)
        if shape in (0, 1, 2):
            sp.umbrellas = pack([(lo, lo + 9 * 10**9)])
        elif shape == 3:
            sp.umbrellas = pack(merge_intervals([(lo, lo + 10**9), (lo + 2 * 10**9, lo + 4 * 10**9)]))
        elif shape == 4:
            sp.lo = None
        if shape != 2:
            offset = -(10**9) if shape == 1 else 10**8
            starts = sorted(rng.sample(range(lo + offset, lo + 8 * 10**9), rng.randrange(0, 6)))
            sp.bucketed = pack(merge_intervals((s, s + rng.randrange(1, 10**9)) for s in starts))
        parts.append(sp)
    walls, unattributed = _walls(parts)
    assert list(zip(walls, unattributed, strict=True)) == [_wall(sp) for sp in parts]
    assert [type(w) for w in walls] == [int] * len(parts)


def test_slowest_steps_are_the_sorts_first_five_ties_by_step() -> None:
    """The five longest complete steps, ties broken by step (many steps at the same wall, as a steady run
    has), and the step time percentiles, as a full sort gives them."""
    rng = random.Random(17)
    for count in (0, 3, 5, 6, 40, 300):
        for spread in (1, 3, 1000):
            rows = [
                {"step": n, "wall_s": float(rng.randrange(spread)), "incomplete": rng.random() < 0.1}
                for n in range(count)
            ]
            complete = [r for r in rows if not r["incomplete"]]
            plain = sorted(complete, key=lambda r: (-r["wall_s"], step_key(r["step"])))[:5]
            figures = step_times(rows)
            assert figures["slowest_steps"] == [{"step": r["step"], "wall_s": r["wall_s"]} for r in plain]
            walls = sorted(r["wall_s"] for r in complete)
            assert figures["step_time"]["max_s"] == (max(walls) if walls else None)
