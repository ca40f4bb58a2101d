"""Parts merge exactly: a process's part folded from its halves equals the part of the whole, in either order."""

from __future__ import annotations

import json
from pathlib import Path

from lens_rl.offline.read.parts import merge_parts
from lens_rl.offline.read.reduce import file_parts
from tests.stores import grow_store


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
