"""A part's GPU span columns read back from its cache record: kept as written, and refused (never trusted)
where their index points outside the (phase, bucket) table or their lengths differ."""

from __future__ import annotations

from array import array

import msgspec
import pytest

from lens_rl.offline.run.part_records import _gpu_from
from lens_rl.offline.run.part_schema import GpuRec
from lens_rl.offline.run.record_codec import raw


def _rec(index: list[int], n: int | None = None) -> GpuRec:
    """The record as a look reads it back (encoded, then decoded: its arrays raw bytes)."""
    n = len(index) if n is None else n
    starts = array("q", range(n))
    written = GpuRec(
        ["GPU-0"], raw(starts, "q"), raw(array("q", [s + 5 for s in starts]), "q"),
        [("generation", "productive"), ("wait", "idle")], raw(array("i", index), "i"), raw(array("q", [1] * n), "q"),
    )  # fmt: skip
    return msgspec.msgpack.decode(msgspec.msgpack.encode(written), type=GpuRec)


def test_gpu_columns_come_back_as_written() -> None:
    """A record's columns decode to the same arrays, its table and uuids, and an empty one to empty arrays."""
    uuids, starts, ends, keys, index, steps = _gpu_from(_rec([0, 1, 1, 0] * 300))
    assert uuids == ("GPU-0",) and keys == [("generation", "productive"), ("wait", "idle")]
    assert list(index) == [0, 1, 1, 0] * 300 and list(ends) == [s + 5 for s in starts] and set(steps) == {1}
    assert [len(c) for c in _gpu_from(_rec([]))[1:] if not isinstance(c, list)] == [0, 0, 0, 0]


@pytest.mark.parametrize("index", [[0, 2], [-1, 0], [0] * 500 + [7], [-(2**31)] + [1] * 10])
def test_an_index_outside_the_table_is_refused(index: list[int]) -> None:
    """An index past the table's end or negative, wherever it lies in the column, is a record that does not add up."""
    with pytest.raises(ValueError, match="do not add up"):
        _gpu_from(_rec(index))


def test_columns_of_different_lengths_are_refused() -> None:
    """Starts, ends or steps of another length than the index are a record that does not add up."""
    with pytest.raises(ValueError, match="do not add up"):
        _gpu_from(_rec([0, 1], n=3))
