"""Parts merge exactly: a Series of steps summed step by step (end to end when one follows the other), and a
process's part folded from its halves equals the part of the whole, in either order."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

from lens_rl.offline.read.parts import Series, merge_parts
from lens_rl.offline.read.reduce import file_parts
from tests.stores import grow_store


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


def test_a_part_folded_from_two_halves_is_the_part_of_the_whole(tmp_path: Path) -> None:
    """A worker's file read whole, and read as its first half plus its second (either order): equal parts."""
    whole = tmp_path / "whole"
    grow_store(whole, 0, 8)
    path = whole / "spans-lm_policy-4-104.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    head, body = lines[0], lines[1:]
    halves = []
    for k, chunk in enumerate((body[: len(body) // 2], body[len(body) // 2 :])):
        half = tmp_path / f"half{k}" / path.name
        half.parent.mkdir()
        half.write_text(head + "".join(chunk))
        halves.append(half)
    (expected,), _ = file_parts(path, critical=False)
    for order in (halves, halves[::-1]):
        (merged,) = merge_parts(part for half in order for part in file_parts(half, critical=False)[0])
        assert merged.bucket_ns == expected.bucket_ns and merged.bucketed == expected.bucketed
        assert json.dumps({k: dict(v.items()) for k, v in merged.compute.items()}) == json.dumps(
            {k: dict(v.items()) for k, v in expected.compute.items()}
        )
        assert merged.steps == expected.steps and merged.phases.keys() == expected.phases.keys()
