"""A run of store rows made columns at once (:meth:`lens_rl.offline.read.columns.Columns.extend`, the reads' hot
path): the column-wide forms of what :meth:`~lens_rl.offline.read.columns.Columns.add` does to each row, at C
speed where they can be (ids from hex a run at a time, steps shared, the rows that hold a value found).

Example::

    numbers, parents = hex_ids(["00000000000000a1"], [None])    # array('Q', [161]), array('Q', [0])
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any

from lens_rl.store import INT64_END

__all__ = ["from_hex", "hex_id", "hex_ids", "run_steps", "where_equal", "where_true"]

_ID_TYPES = frozenset((str, type(None)))
_NO_PARENT = "0" * 16


def hex_ids(span_ids: list[Any], parent_ids: list[Any]) -> tuple[array, array] | None:
    """Span and parent ids as :meth:`Columns.add` keeps them where every one is of lens_rl's form (16 hex
    digits, a span id above 0, a parent id above 0 or none: 0), as two uint64 arrays; else None."""
    if set(map(type, span_ids)) != {str} or not set(map(type, parent_ids)) <= _ID_TYPES:
        return None
    filled = [_NO_PARENT if p is None else p for p in parent_ids]
    if set(map(len, span_ids)) != {16} or set(map(len, filled)) != {16}:
        return None
    numbers, parents = from_hex(span_ids), from_hex(filled)
    if numbers is None or parents is None or 0 in numbers or parents.count(0) != parent_ids.count(None):
        return None
    return numbers, parents


def from_hex(ids: Sequence[str]) -> array | None:
    """Ids of 16 characters each as the uint64 numbers their hex digits write (as ``int(i, 16)`` reads
    them), at C speed; None where one is not 16 plain lower-case hex digits (``int`` may read it otherwise: a
    sign, a ``0x``, a space, an underscore, other scripts' digits), the form lens_rl writes. An upper-case id
    stays text: a number would make it one with its lower-case twin, which a read keeps as another span."""
    joined = "".join(ids)
    if any(c in joined for c in "ABCDEF"):  # (one memchr each)
        return None
    try:
        raw = bytes.fromhex(joined)
    except ValueError:
        return None
    if len(raw) != 8 * len(ids):  # (a space inside an id: fromhex skips it, and pairs digits across ids)
        return None
    out = array("Q")
    out.frombytes(raw)
    if sys.byteorder == "little":
        out.byteswap()
    return out


def hex_id(span_id: Any) -> int | None:
    """One id as :func:`from_hex` reads ids: the number its 16 plain lower-case hex digits write, else None."""
    if type(span_id) is not str or len(span_id) != 16 or any(c in span_id for c in "ABCDEF"):
        return None
    try:
        raw = bytes.fromhex(span_id)
    except ValueError:
        return None
    return int.from_bytes(raw, "big") if len(raw) == 8 else None


def run_steps(steps: list[Any], shared: Any) -> list[Any]:
    """``rl.step`` values as :meth:`Columns.add` keeps them: an int within int64 shared, a list or an object
    none, past int64 none, anything else as it is."""
    kinds = set(map(type, steps))
    if kinds <= {int, type(None)}:
        ints = [s for s in steps if s is not None]
        if not ints or (min(ints) >= -INT64_END and max(ints) < INT64_END):
            return list(map(shared, steps, steps))
    return [
        (shared(s, s) if -INT64_END <= s < INT64_END else None)
        if type(s) is int
        else (None if type(s) in (list, dict) else s)
        for s in steps
    ]


def where_true(values: list[Any]) -> list[int]:
    """The indexes of the values that are ``True`` itself."""
    if True not in values:
        return []
    return [i for i, v in enumerate(values) if v is True]


def where_equal(names: list[Any], name: str) -> list[int]:
    """The indexes of the names equal to ``name`` (none looked for one by one where there is none)."""
    if name not in names:
        return []
    return [i for i, found in enumerate(names) if found == name]
