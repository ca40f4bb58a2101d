"""The reduction passes: compact columns and arrays give what plain ones give; ids of any form find their parents; a part pickles exactly."""

from __future__ import annotations

from typing import Any


def _part(rows: list[tuple[Any, ...]]) -> Any:
    """The part of one process's rows (name, span id, parent id, start, end, attributes), as a file's read makes it."""
    from lens_rl.offline.read.columns import Columns
    from lens_rl.offline.read.reduce import part_from_columns
    from lens_rl.store import Process

    cols = Columns()
    for row in rows:
        cols.add(*row)
    return part_from_columns(Process("lm", 0, 1), cols)


def test_compact_reductions_equal_the_plain_ones() -> None:
    """The memory-lean reductions give what the plain ones give: merged intervals from row indexes, a
    phase's per-step compute ns from arrays (a step that is not an int keeps the dict, in order)."""
    import random
    from array import array

    from lens_rl.offline.read.intervals import merge_indexed, merge_intervals, pack

    rng = random.Random(7)
    starts = array("q", (rng.randrange(0, 1000) for _ in range(500)))
    ends = array("q", (s + rng.randrange(0, 40) for s in starts))
    rows = rng.sample(range(500), 300)
    assert merge_indexed(rows, starts, ends) == pack(merge_intervals((starts[i], ends[i]) for i in rows))

    def span(i: int, step: Any) -> tuple[Any, ...]:
        return (
            "train",
            f"{i + 1:016x}",
            None,
            i * 10,
            i * 10 + 3 + i % 5,
            {"rl.bucket": "productive", "rl.step": step},
        )

    part = _part([span(i, s) for i, s in enumerate([2, 1, 2, 1, 3])])
    assert dict(part.compute["train"]) == {1: 4 + 6, 2: 3 + 5, 3: 7} and list(part.compute["train"]) == [1, 2, 3]
    mixed = _part([span(i, s) for i, s in enumerate([2, "warmup", 1, 2])])
    assert mixed.compute["train"] == {2: 3 + 6, "warmup": 4, 1: 5}
    assert list(mixed.compute["train"]) == [2, "warmup", 1]  # the order the steps came in


def test_span_ids_of_any_form_still_find_their_parents() -> None:
    """Ids as lens_rl writes them (16 hex digits) are kept as numbers; an id of another form switches the
    columns to text without losing the parents found so far: exclusive time comes out the same."""

    def rows(child_ids: list[str]) -> list[tuple[Any, ...]]:
        parent = ("generation", "00000000000000aa", None, 0, 100, {"rl.bucket": "productive"})
        kids = [
            ("reward", kid, "00000000000000aa", 10 + 20 * n, 20 + 20 * n, {"rl.bucket": "overhead"})
            for n, kid in enumerate(child_ids)
        ]
        return [*kids, parent]

    for ids in (
        ["00000000000000b1", "00000000000000b2"],
        ["00000000000000b1", "kid-2"],
        ["kid-1", "kid-2"],
        ["0000000000000000", "-00000000000000b"],
    ):  # (the last: 16 characters, not ids)
        part = _part(rows(ids))
        assert part.bucket_ns["productive"] == 80 and part.bucket_ns["overhead"] == 20


def test_a_process_part_pickles_exactly() -> None:
    """What --jobs and --ray send back (a part with its steps as columns) is the part that was made:
    steps of any key, missing ends, no / empty / several intervals, an incomplete step."""
    import pickle
    from array import array

    from lens_rl.offline.read.parts import ProcessPart, StepPart
    from lens_rl.store import Process

    part = ProcessPart(Process("driver", 0, 1, 2, True))
    part.steps[1] = StepPart(0, 10)
    part.steps[1].ns = [1500, 0, 2250, 0]
    part.steps[1].bucketed = array("q", [0, 4, 6, 10])
    part.steps[1].incomplete = True
    part.steps["warmup"] = StepPart(None, 7)
    part.steps["warmup"].umbrellas = array("q")
    part.steps[3] = StepPart(0, None)
    part.steps[3].umbrellas = array("q", [0, 9])
    back = pickle.loads(pickle.dumps(part))
    assert back == part and list(back.steps) == [1, "warmup", 3] and back.key.attempt == 2
    assert back.steps["warmup"].umbrellas == array("q") and back.steps[3].bucketed is None and back.steps[1].incomplete


def test_numbered_ids_link_as_ids_given_link() -> None:
    """Pass 1 on ids kept as numbers (numpy) finds what it finds on the same ids kept as text: parents (a
    repeated id names its last span), children, self-parents, entries, third parties' roots, orphans."""
    import random
    from array import array

    from lens_rl.offline.read.columns import REMOTE_PARENT, THIRD_PARTY, Columns
    from lens_rl.offline.read.linked import link

    rng = random.Random(3)
    for trial in range(100):
        n = rng.randrange(1, 60)
        ids = [rng.randrange(1, n + 3) for _ in range(n)]
        parents = [rng.choice([0, 0, rng.randrange(1, n + 6), 2**64 - 1]) for _ in range(n)]
        flags = bytearray(rng.choice([0, REMOTE_PARENT, THIRD_PARTY, REMOTE_PARENT | THIRD_PARTY]) for _ in range(n))
        root = rng.choice([None, rng.randrange(1, n + 6), 2**64 - 1])
        starts, ends = [rng.randrange(0, 9) for _ in range(n)], [rng.randrange(0, 9) for _ in range(n)]
        trees = []
        for numbered in (True, False):
            cols = Columns()
            cols.names = ["x"] * n
            cols.starts, cols.ends = array("q", starts), array("q", ends)
            cols.buckets, cols.steps, cols.tokens, cols.flags = [None] * n, [None] * n, [None] * n, flags
            if numbered:
                cols.ids, cols.parent_ids, cols.root = array("Q", ids), array("Q", parents), root
            else:  # (text: a missing parent is None, as the columns keep it once ids are text)
                cols.ids = [f"{i:016x}" for i in ids]
                cols.parent_ids = [f"{p:016x}" if p else None for p in parents]
                cols.root = None if root is None else f"{root:016x}"
            tree = link(cols)
            keyed = (lambda v: 0 if v is None else int(v, 16)) if not numbered else (lambda v: v)
            trees.append(
                (
                    tree.parents,
                    tree.has_child,
                    tree.orphan,
                    tree.ends,
                    {k: keyed(v) for k, v in tree.remote.items()},
                    {k: keyed(v) for k, v in tree.third_roots.items()},
                )
            )
        assert trees[0] == trees[1], trial


def test_a_phase_s_compute_ns_summed_per_step_in_bulk_as_one_by_one() -> None:
    """Many compute spans' ns are summed per step with numpy: the steps in order and the sums are those the
    span-by-span sum gives (negative and repeated steps, any order)."""
    import random
    from array import array

    from lens_rl.offline.read.reduce import _BULK, _summed

    rng = random.Random(5)
    for size in (_BULK - 1, _BULK, 3 * _BULK):
        steps = array("q", [rng.randrange(-20, 200) for _ in range(size)])
        values = array("q", [rng.randrange(0, 10**12) for _ in range(size)])
        expected: dict[int, int] = {}
        for step, value in zip(steps, values, strict=True):
            expected[step] = expected.get(step, 0) + value
        series = _summed([steps, values])
        assert list(series.steps) == sorted(expected) and list(series.ns) == [expected[s] for s in sorted(expected)]
