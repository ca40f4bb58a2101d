"""A GPU process's productive time for the GPU goodput: the union of its productive spans, as the one interval rule
(offline/read/intervals.py) makes it, touching and nested spans merged, whatever their order."""

from __future__ import annotations

import numpy as np

from lens_rl.offline.read.intervals import merge_intervals
from lens_rl.offline.read.parts import NO_STEP
from lens_rl.offline.rollup.gpu_process import productive_union, step_hulls


def test_the_productive_union_is_merge_intervals_of_the_productive_spans() -> None:
    """Random spans (some nested, touching, out of order or in start order, even ending before they start) give
    exactly the union merge_intervals gives of the productive ones, the other buckets' spans left out."""
    rng = np.random.default_rng(1)
    keys = [("generation", "productive"), ("wait", "idle")]
    for case in range(300):
        n = int(rng.integers(0, 60))
        starts = rng.integers(0, 100, n).astype(np.int64)
        ends = starts + rng.integers(-5, 20, n)
        index = rng.integers(0, 2, n).astype(np.int32)
        if case % 2:  # (in start order, as most processes' are, ties in end order or not: no sort, the same union)
            order = np.lexsort((ends if case % 4 == 1 else -ends, starts))
            starts, ends, index = starts[order], ends[order], index[order]
        lo, hi = productive_union(keys, index, starts, ends)
        chosen = index == 0
        assert list(zip(lo.tolist(), hi.tolist(), strict=True)) == merge_intervals(
            zip(starts[chosen].tolist(), ends[chosen].tolist(), strict=True)
        )


def test_each_steps_first_start_and_last_end_whatever_the_spans_order() -> None:
    """A process's steps and their hulls are the same read from spans in step order (the common file) as
    from spans in any order, spans of no step left out."""
    rng = np.random.default_rng(2)
    for case in range(200):
        n = int(rng.integers(0, 50))
        steps = rng.integers(-1, 6, n).astype(np.int64)
        steps[steps < 0] = NO_STEP
        if case % 2:
            steps = np.sort(steps)
        starts = rng.integers(0, 1000, n).astype(np.int64)
        ends = starts + rng.integers(0, 50, n)
        values, lo, hi = step_hulls(steps, starts, ends)
        want = sorted({int(s) for s in steps if s != NO_STEP})
        assert values.tolist() == want
        for step, first, last in zip(want, lo.tolist(), hi.tolist(), strict=True):
            assert first == int(starts[steps == step].min()) and last == int(ends[steps == step].max())
