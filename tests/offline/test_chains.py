"""Which of a read's spans the refresh cache settles and which it holds: which spans have their whole ancestor
chain in the read (a chain may end at no parent, the job root, a remote parent or a malformed cycle), and
which wait for a parent not written yet, with their children."""

from __future__ import annotations

from array import array

from lens_rl.offline.read.columns import Columns
from lens_rl.offline.run.chains import complete_chains
from tests.stores import span_id


def _columns(rows: list[tuple[str, str | None, bool]]) -> Columns:
    cols = Columns()
    for label, parent, remote in rows:
        cols.add("x", span_id(label), None if parent is None else span_id(parent), 1, 2, None, remote)
    return cols


def test_chains_that_end_in_the_read_settle_and_the_rest_are_held() -> None:
    """Spans under a remote parent, a root and a cycle settle; a span whose local parent is not written yet is
    held with its child; a parent an earlier read settled makes the read late (read cold)."""
    cols = _columns([("a", None, False), ("b", "a", False), ("c", "elsewhere", True), ("d", "c", False)])
    assert complete_chains(cols, array("Q")) == (bytearray(b"\x01" * 4), False)
    cyc = _columns([("p", "q", False), ("q", "p", False), ("r", "p", False)])
    assert complete_chains(cyc, array("Q")) == (bytearray(b"\x01" * 3), False)
    held = _columns([("a", None, False), ("k", "later", False), ("kid", "k", False), ("c", "elsewhere", True)])
    assert complete_chains(held, array("Q")) == (bytearray([1, 0, 0, 1]), False)
    earlier = array("Q", [int(span_id("later"), 16)])
    assert complete_chains(held, earlier) == (bytearray([1, 0, 0, 1]), True)
