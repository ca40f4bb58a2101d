"""A part's phases per step (:class:`PhaseSteps`): cut to a range of steps, merged exactly in any order, and
kept in the refresh cache's records as they are."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest

from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.read.phase_steps import PhaseSteps
from lens_rl.offline.run.part_records import part_from, part_record
from lens_rl.offline.run.records import PartRec, decode, encode
from lens_rl.store import Process


def _table(cells: dict[int, tuple[int, int, int]]) -> PhaseSteps:
    keys = sorted(cells)
    return PhaseSteps(array("q", keys), *(array("q", (cells[k][i] for k in keys)) for i in range(3)))


def test_within_sums_the_steps_of_the_range_only() -> None:
    """(count, total, exclusive) over steps A..B inclusive: steps outside, and a range past the table, add nothing."""
    table = _table({1: (1, 10, 5), 2: (2, 20, 7), 3: (1, 30, 9), 5: (4, 50, 11)})
    assert table.within((2, 3)) == (3, 50, 16)
    assert table.within((4, 9)) == (4, 50, 11) and table.within((6, 9)) == (0, 0, 0)


def test_merges_in_any_order_give_the_same_table() -> None:
    """Tables of one phase merged in any order (a file's next lines, another file of the process) sum step by
    step to the same columns."""
    rng = random.Random(5)
    pieces = [{rng.randrange(0, 30): (1, rng.randrange(100), rng.randrange(50)) for _ in range(8)} for _ in range(5)]
    expected: dict[int, list[int]] = {}
    for piece in pieces:
        for step, values in piece.items():
            cell = expected.setdefault(step, [0, 0, 0])
            for i in range(3):
                cell[i] += values[i]
    for _ in range(4):
        rng.shuffle(pieces)
        merged = _table(pieces[0])
        for piece in pieces[1:]:
            merged.merge(_table(piece))
        assert merged == _table({k: (v[0], v[1], v[2]) for k, v in expected.items()})


def test_a_merge_never_changes_the_table_merged_in() -> None:
    """Folding a part into another leaves the folded part's per-step table as it was (parts kept by a
    refresh cache are merged again on the next look)."""
    a, b = ProcessPart(Process("g", 0, 1)), ProcessPart(Process("g", 0, 1))
    a.phase_steps[("x", "productive")] = _table({1: (1, 10, 10)})
    b.phase_steps[("x", "productive")] = _table({2: (1, 20, 20)})
    c = ProcessPart(Process("g", 0, 1))
    c.merge(a)
    c.merge(b)
    assert a.phase_steps[("x", "productive")] == _table({1: (1, 10, 10)})
    assert c.phase_steps[("x", "productive")].within((1, 2)) == (2, 30, 30)


def test_the_cache_record_keeps_the_table() -> None:
    """A part's record, read back, has the same phases per step."""
    part = ProcessPart(Process("g", 0, 1))
    part.phase_steps[("x", None)] = _table({3: (2, 8, 4), 7: (1, 1, 1)})
    assert part_from(decode(encode(part_record(part)), PartRec)).phase_steps == part.phase_steps


def test_a_merge_past_int64_saturates_as_a_cold_read_does() -> None:
    """A cached table with figures near int64's end (a hostile file's) merged with its file's next lines at
    the same steps saturates each sum at int64's end, in either order, as summing all the spans at once does."""
    from lens_rl.offline.read.intervals import INT64_MAX
    from lens_rl.offline.read.phase_steps import _summed
    from lens_rl.offline.read.steps import Series

    big = 5 * 10**18
    cached, grown = _table({1: (big, big, big), 2: (1, 5, 5)}), _table({1: (big, big, 1), 2: (1, big, 3)})
    expected = _table({1: (INT64_MAX, INT64_MAX, big + 1), 2: (2, big + 5, 8)})
    for a, b in ((cached, grown), (grown, cached)):
        merged = _table({})
        merged.merge(a)
        merged.merge(b)
        assert merged == expected
    cold = _summed(
        *(
            np.concatenate([np.frombuffer(x, np.int64) for x in pair])
            for pair in zip(cached.columns(), grown.columns(), strict=True)
        )
    )
    assert PhaseSteps(*cold) == expected
    merged_series = Series.merged(
        Series(array("q", [1]), array("q", [big])), Series(array("q", [1]), array("q", [big]))
    )
    assert dict(merged_series.items()) == {1: INT64_MAX}


def _timed(spans: list[tuple[int, int, float]]) -> PhaseSteps:
    """A table of spans (step, duration ns, tokens), as a file's pass 4 makes one."""
    steps = sorted({s for s, _, _ in spans})
    per = {s: [(d, t) for k, d, t in spans if k == s] for s in steps}
    q = [array("q", (f(per[s]) for s in steps)) for f in (len, lambda c: sum(d for d, _ in c))]
    token_ns = array("q", (sum(d for d, t in per[s] if t) for s in steps))
    tokens = array("d", (sum(t for _, t in per[s]) for s in steps))
    durations = array("q", (d for s in steps for d in sorted(d for d, _ in per[s])))
    return PhaseSteps(array("q", steps), q[0], q[1], q[1], token_ns, None, tokens, None, None, durations)


def test_a_window_keeps_its_durations_and_tokens_through_merges_in_any_order_and_the_cache() -> None:
    """Tables of one phase with durations and tokens, merged in any order, give one table: a window's
    durations are its steps' spans', its tokens theirs; a part's record keeps them, and a record whose
    durations are not one per span counted is refused."""
    rng = random.Random(7)
    pieces = [
        [(rng.randrange(0, 12), rng.randrange(1, 100), float(rng.randrange(3))) for _ in range(6)] for _ in range(4)
    ]
    whole = _timed([s for piece in pieces for s in piece])
    for _ in range(4):
        rng.shuffle(pieces)
        merged = _timed(pieces[0])
        for piece in pieces[1:]:
            merged.merge(_timed(piece))
        assert merged == whole
    spans = [s for piece in pieces for s in piece if 3 <= s[0] <= 6]
    window = whole.window((3, 6))
    assert window.spans == len(spans) and sorted(window.durations or ()) == sorted(d for _, d, _ in spans)
    assert window.tokens == sum(t for _, _, t in spans)
    part = ProcessPart(Process("g", 0, 1))
    part.phase_steps[("x", None)] = whole
    assert part_from(decode(encode(part_record(part)), PartRec)).phase_steps == part.phase_steps
    part.phase_steps[("x", None)] = short = whole.copy()
    short.durations = whole.durations[1:]
    with pytest.raises(ValueError, match="do not add up"):
        part_from(decode(encode(part_record(part)), PartRec))
    untimed = _table({1: (1, 10, 5)})
    untimed.merge(_timed([(2, 7, 0.0)]))
    assert untimed.window((1, 2)).durations is None  # (a table without its durations: no p95)


def test_a_phase_without_tokens_or_leaves_keeps_those_columns_empty() -> None:
    """The token, FLOP and leaf columns of a phase that has none are kept empty (what keeps the cache's
    records small), through a merge, the cache's records and a window (whose sums are then 0)."""
    a, b = _timed([(1, 5, 0.0), (2, 6, 0.0)]), _timed([(2, 7, 0.0), (3, 8, 0.0)])
    a.merge(b)
    part = ProcessPart(Process("g", 0, 1))
    part.phase_steps[("x", "productive")] = a
    (back,) = part_from(decode(encode(part_record(part)), PartRec)).phase_steps.values()
    for table in (a, back):
        assert all(len(getattr(table, k)) == 0 for k in ("token_ns", "leaf", "tokens", "flops", "flops_tokens"))
    window = back.window((2, 3))
    assert (window.spans, window.tokens, window.token_ns, sorted(window.durations or ())) == (3, 0.0, 0, [6, 7, 8])
