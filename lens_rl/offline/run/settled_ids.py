"""The span ids a cache entry has settled, as a sorted set: an int array while every id is lens_rl's 16
lower-case hex digits (8 bytes an id, one binary search to find one), else a list sorted by type then value.
A grown file's new lines are told apart from the settled ones in bulk (:func:`unsettled`), and a look's new
ids slot into them without a sort of the whole run (:func:`merged_ids`).

Example::

    ids = merged_ids(array("Q"), [id_key("00000000000000ff")])
    settled_has(ids, id_key("00000000000000ff"))   # True
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from lens_rl.offline.read.runs import from_hex, hex_id

__all__ = ["id_key", "merged_ids", "settled_has", "unsettled"]


def id_key(span_id: Any) -> Any:
    """A span id as the settled ids keep it: an int for lens_rl's 16 lower-case hex digits
    (:func:`~lens_rl.offline.read.runs.hex_id`), else as given."""
    number = hex_id(span_id)
    return span_id if number is None else number


def settled_has(ids: Any, key: Any) -> bool:
    """Whether the settled ids (sorted: see :func:`merged_ids`) hold ``key`` (an :func:`id_key`)."""
    if type(ids) is array:
        if type(key) is not int:
            return False
        at = bisect_left(ids, key)
        return at < len(ids) and ids[at] == key
    at = bisect_left(ids, _id_order(key), key=_id_order)
    return at < len(ids) and ids[at] == key


def _id_order(key: Any) -> tuple[str, Any]:
    """The settled ids' order where they are of several types (an int and a text id never compare): by type,
    then by value."""
    return (key.__class__.__name__, key)


def unsettled(ids: Any, span_ids: Sequence[Any]) -> bytearray:
    """1 for each of ``span_ids`` (as lines hold them) that the settled ``ids`` do not hold, else 0: in bulk where
    they are lens_rl's 16 hex digits and ``ids`` an int array (one binary search of them all), else one by one."""
    if type(ids) is array and len(ids) and all(type(s) is str and len(s) == 16 for s in span_ids):
        numbers = from_hex(span_ids)  # (None: not all lens_rl's form: each as :func:`id_key` takes it)
        if numbers is not None:
            import numpy as np  # (a grown file's new lines: numpy is loaded by the reduction already)

            keys, table = np.frombuffer(numbers, np.uint64), np.frombuffer(ids, np.uint64)
            found = table[np.minimum(np.searchsorted(table, keys), len(table) - 1)] == keys
            return bytearray((~found).view(np.uint8).tobytes())
    return bytearray(not settled_has(ids, id_key(span_id)) for span_id in span_ids)


def merged_ids(ids: Any, new: Any) -> Any:
    """The settled ids with ``new`` ones (a list, or an int array), sorted (an int array while every id is
    lens_rl's form)."""
    if not len(new):
        return ids
    if type(ids) is array and (type(new) is array or all(type(i) is int and 0 <= i < 2**64 for i in new)):
        new = sorted(new)
        if not len(ids):  # (a first look: its ids, sorted once)
            return array("Q", new)
        out, at = array("Q"), 0  # (the few new ones slotted in: no sort of the whole run)
        for i in new:
            to = bisect_left(ids, i, at)
            out += ids[at:to]
            out.append(i)
            at = to
        out += ids[at:]
        return out
    return sorted([*ids, *new], key=_id_order)
