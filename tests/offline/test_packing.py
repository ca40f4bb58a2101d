"""A part's per-step and per-span tables go to the refresh cache as columns and come back exactly: ints as
ints (arrays where they fit), anything else as it was; a driver's part pickles as a few arrays, not one object
per step."""

from __future__ import annotations

import pickle
import pickletools
from array import array
from pathlib import Path

from lens_rl.offline.read.critical import CritPart
from lens_rl.offline.read.packing import (
    hex_column,
    indexed,
    pairs_columns,
    pairs_from_columns,
    runs_columns,
    runs_from_columns,
    scalars,
    unhexed,
)
from lens_rl.offline.read.reduce import file_parts
from tests.stores import grow_store


def test_scalars_are_arrays_only_where_every_value_is_an_int_that_fits() -> None:
    assert scalars([1, -2, 3]) == array("q", [1, -2, 3])
    assert scalars([2**63 + 5, 1]) == array("Q", [2**63 + 5, 1])  # (span ids: unsigned)
    for kept in ([2**64, 1], [-1, 2**63], [True, 1], [1, "2"], [1, None], [1.0, 2]):
        out = scalars(kept)
        assert out == kept and [type(v) for v in out] == [type(v) for v in kept]
    assert scalars([]) == array("q") and scalars([0.5, 1e300]) == array("d", [0.5, 1e300])
    assert [type(v) for v in scalars([0.5, 1])] == [float, int]


def test_span_ids_pack_as_numbers_only_in_lens_rls_form() -> None:
    ids = ["d000000000000001", "00000000000000ff"]
    assert hex_column(ids) == array("Q", [0xD000000000000001, 0xFF]) and unhexed(hex_column(ids)) == ids
    for kept in (
        ["D000000000000001"],
        ["+00000000000000f"],
        ["0x0000000000000f"],
        ["0000_00000000000f"],
        ["zzzzzzzzzzzzzzzz"],
        ["short"],
        [7],
    ):
        assert hex_column(kept) == kept and unhexed(hex_column(kept)) == kept
    assert unhexed(hex_column([])) == []


def test_runs_and_tables_come_back_as_they_were() -> None:
    runs = {3: [(0, 2, 10), (5, 1, 12)], "warmup": [(9, 0, 4)], None: []}
    assert runs_from_columns(runs_columns(runs, 3)) == runs
    table, index = indexed([("gen", None), ("gen", "productive"), ("gen", None)])
    assert table == [("gen", None), ("gen", "productive")] and list(index) == [0, 1, 0]
    tokens = {("own", 3): 12.5, ("gen", 3): 7, ("gen", "warmup"): 1.0}
    back = pairs_from_columns(pairs_columns(tokens))
    assert back == tokens and [type(v) for v in back.values()] == [float, int, float]


def test_a_parts_tables_round_trip_through_pickle_as_a_few_objects(tmp_path: Path) -> None:
    """A driver's and a worker's parts, with untokened phases (int ids and a foreign id, int and odd steps)
    and critical-path steps: equal after a pickle round trip, and the driver's pickle holds far fewer
    opcodes than it has steps (one object per step would be several opcodes each)."""
    grow_store(tmp_path, 0, 120)
    for path in sorted(tmp_path.glob("spans-*.jsonl")):
        (part,), _ = file_parts(path, critical=True)
        part.step_tokens.update({("own", 3): 12.5, ("gen", 3): 7.0})
        part.untokened.update({"not-hex-id": ("generate", None, 7, "warmup"), 5: ("generate", "productive", 3, None)})
        back = pickle.loads(pickle.dumps(part, protocol=5))
        assert back.untokened == part.untokened and list(back.untokened) == list(part.untokened)
        assert back.crit.steps == part.crit.steps and back.steps == part.steps and back.step_tokens == part.step_tokens
        if part.is_driver:
            assert len(part.crit.steps) >= 120
            ops = sum(1 for _ in pickletools.genops(pickle.dumps(part.crit, protocol=5)))
            assert ops < 2 * len(part.crit.steps)  # (a list of tuples per step: over 8 a step)
    part.untokened = {"d000000000000001": ("generate", None, 7, 3), "00000000000000ff": ("generate", None, 1, 4)}
    assert pickle.loads(pickle.dumps(part)).untokened == part.untokened  # (ids in lens_rl's form: packed as numbers)
    odd = CritPart()
    odd.steps = {"warmup": [(0, 1, 5)], 2: [(1, 2, 9), (3, 0, 9)]}
    assert pickle.loads(pickle.dumps(odd)).steps == odd.steps
