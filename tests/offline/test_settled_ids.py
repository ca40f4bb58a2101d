"""The settled span ids: a grown file's new ids told apart from them in bulk exactly as one by one, and a look's
new ones slotted in as a sort of them all."""

from __future__ import annotations

import random
from array import array
from typing import Any

from lens_rl.offline.run.settled_ids import id_key, merged_ids, settled_has, unsettled


def test_which_new_lines_repeat_a_settled_span_is_the_one_by_one_rule_in_bulk() -> None:
    """A grown file's new span ids are told apart from the settled ones in bulk exactly as one by one: lens_rl's
    16 lower-case hex digits found or not, and ids that are not (upper case, a sign, a space, other digits,
    numbers) taken as the rule takes them."""
    settled = merged_ids(array("Q"), [0x1, 0xABCDEF0123456789, 2**64 - 1])
    every_kind: list[list[Any]] = [
        ["0000000000000001", "abcdef0123456789", "ABCDEF0123456789", "ffffffffffffffff", "0000000000000002"],
        ["0000000000000001", "+000000000000001", "00 0000000000001", "zz00000000000001", "0000000000000002"],
        ["0000000000000001", "1", 1, None, "ffffffffffffffff"],
    ]
    for span_ids in every_kind:
        expected = bytearray(not settled_has(settled, id_key(s)) for s in span_ids)
        assert unsettled(settled, span_ids) == expected
    assert unsettled(settled, ["0000000000000001", "0000000000000003"]) == bytearray([0, 1])


def test_a_grown_files_new_ids_slot_into_the_settled_ones_as_a_sort_of_them_all() -> None:
    """The settled ids with a look's new ones are the sorted whole (random ids, repeats, ids past 2**63, an
    int array or a list of new ones), as a sort of them all says, an int array still."""
    rng = random.Random(5)
    for _ in range(300):
        pool = [rng.randrange(2**64) for _ in range(rng.randrange(1, 40))] + [0, 2**63, 2**64 - 1]
        ids = array("Q", sorted(rng.choice(pool) for _ in range(rng.randrange(0, 60))))
        new = [rng.choice(pool) for _ in range(rng.randrange(0, 20))]
        got = merged_ids(ids, array("Q", new) if rng.random() < 0.5 else new)
        assert type(got) is array and got == array("Q", sorted([*ids, *new]))
