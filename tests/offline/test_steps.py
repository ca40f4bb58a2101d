"""A part's per-step tables: a Series of steps summed step by step (end to end when one follows the other), a
step's share merged, and a run's steps through their columns and back, exactly."""

from __future__ import annotations

from array import array

from lens_rl.offline.read.steps import Series, StepPart
from lens_rl.offline.run.records import PartRec, decode, encode, part_from, part_record
from lens_rl.store import Process


def test_series_merged_sums_step_by_step() -> None:
    """Following steps end to end; interleaved and shared steps summed; a dict where a step is no int."""
    a = Series(array("q", [1, 2]), array("q", [10, 20]))
    later = Series(array("q", [3, 4]), array("q", [30, 40]))
    assert dict(Series.merged(a, later).items()) == {1: 10, 2: 20, 3: 30, 4: 40}
    mixed = Series(array("q", [2, 5]), array("q", [1, 1]))
    merged = Series.merged(a, mixed)
    assert isinstance(merged, Series) and dict(merged.items()) == {1: 10, 2: 21, 5: 1}
    assert Series.merged({}, later) == later and Series.merged({"warmup": 3}, later) == {"warmup": 3, **later}
    assert dict(a.items()) == {1: 10, 2: 20}  # the inputs are left as they were


def test_step_parts_merge_and_come_back_from_their_columns() -> None:
    """Two shares of a step merged (ns summed, umbrellas joined, bounds widened, bucketed intervals merged,
    incomplete if either is); steps of every shape (no umbrella, open bounds, odd keys) equal after their
    columns."""
    first, second = StepPart(10, 20), StepPart(5, None)
    first.ns, second.ns = [1, 2, 3, 4], [10, 0, 0, 1]
    first.umbrellas, second.umbrellas = array("q", [10, 20]), array("q", [5, 8])
    first.bucketed, second.bucketed = array("q", [10, 15]), array("q", [14, 18])
    second.incomplete = True
    first.merge(second)
    assert first.ns == [11, 2, 3, 5] and list(first.umbrellas) == [10, 20, 5, 8]
    assert (first.lo, first.hi, list(first.bucketed), first.incomplete) == (5, 20, [10, 18], True)
    steps = {3: first, 4: StepPart(), "warmup": StepPart(None, 7)}
    part = part_record(_part_with(steps))
    assert part_from(decode(encode(part), PartRec)).steps == steps


def _part_with(steps: dict) -> object:
    from lens_rl.offline.read.parts import ProcessPart

    return ProcessPart(Process("driver", 0, 1, 0, True), steps=steps)
