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
    incomplete and failed if either is); steps of every shape (no umbrella, open bounds, odd keys) equal after their
    columns."""
    first, second = StepPart(10, 20), StepPart(5, None)
    first.ns, second.ns = [1, 2, 3, 4], [10, 0, 0, 1]
    first.umbrellas, second.umbrellas = array("q", [10, 20]), array("q", [5, 8])
    first.bucketed, second.bucketed = array("q", [10, 15]), array("q", [14, 18])
    second.incomplete = True
    second.error = {"type": "RuntimeError", "message": "boom"}  # (a failed step's error comes back too)
    first.merge(second)
    assert first.ns == [11, 2, 3, 5] and list(first.umbrellas) == [10, 20, 5, 8]
    assert (first.lo, first.hi, list(first.bucketed), first.incomplete) == (5, 20, [10, 18], True)
    assert first.error == {"type": "RuntimeError", "message": "boom"}
    steps = {3: first, 4: StepPart(), "warmup": StepPart(None, 7)}
    part = part_record(_part_with(steps))
    assert part_from(decode(encode(part), PartRec)).steps == steps


def _part_with(steps: dict) -> object:
    from lens_rl.offline.read.parts import ProcessPart

    return ProcessPart(Process("driver", 0, 1, 0, True), steps=steps)


def test_the_views_steps_across_drivers_merge_where_several_ran_one_and_leave_the_parts_as_they_were() -> None:
    """A job of two attempts: a step both drivers ran is one row (its ns summed, the later attempt's), a step
    one ran is its own; every step's window is its umbrellas'; the drivers' parts are left as they were."""
    from lens_rl.offline.read.parts import ProcessPart
    from lens_rl.offline.rollup.steps import step_rows, step_windows

    def driver(attempt: int, steps: dict[int, tuple[int, int, int]]) -> ProcessPart:
        part = ProcessPart(Process("driver", 0, 100, attempt=attempt, driver=True))
        for step, (lo, hi, ns) in steps.items():
            sp = part.steps[step] = StepPart(lo, hi)
            sp.ns, sp.umbrellas = [ns, 0, 0, 0], array("q", [lo, hi])
        return part

    first, second = driver(0, {1: (0, 10, 4)}), driver(1, {1: (20, 30, 5), 2: (30, 40, 6)})
    before = [(step, sp.ns[:], array("q", sp.umbrellas)) for p in (first, second) for step, sp in p.steps.items()]
    rows, _walls, productive = step_rows([first, second], None)
    assert [(r["step"], r["attempt"]) for r in rows] == [(1, 1), (2, 1)] and productive == [9, 6]
    assert step_windows([first, second], None) == {1: [(0, 10), (20, 30)], 2: [(30, 40)]}
    after = [(step, sp.ns[:], array("q", sp.umbrellas)) for p in (first, second) for step, sp in p.steps.items()]
    assert after == before
