"""Columns a part pickles its many small values as: a run's 10 k steps or span ids kept as a few flat arrays,
not 10 k tuples. The refresh cache reads every entry back at every look, and each object in a pickle costs
the reader a check and an allocation, so a part's per-step and per-span tables go to disk as columns and come
back exactly as they were (ints stay ints, anything else is kept as it is).

Example::

    keys = scalars([3, 4, 5])              # array('q', [3, 4, 5]); [3, "x"] stays a list
    columns = runs_columns({3: [(0, 2, 10)]}, 3)
    assert runs_from_columns(columns) == {3: [(0, 2, 10)]}
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "hex_column",
    "indexed",
    "pairs_columns",
    "pairs_from_columns",
    "runs_columns",
    "runs_from_columns",
    "scalars",
    "unhexed",
]

_HEX = "{:016x}".format


def scalars(values: Iterable[Any]) -> array | list[Any]:
    """``values`` as a signed (else unsigned) 64-bit array when every one is an int that fits, a double array
    when every one is a float, else a list (iterating either gives the values back, equal and of the same
    type)."""
    values = list(values)
    if all(type(v) is int for v in values):
        for code in "qQ":
            try:
                return array(code, values)
            except OverflowError:
                continue
    elif all(type(v) is float for v in values):
        return array("d", values)
    return values


def hex_column(values: Iterable[Any]) -> array | list[Any]:
    """Span ids as text (what matches a parent across files) as an unsigned 64-bit array when every one is
    lens_rl's form, 16 lowercase hex digits (:func:`unhexed` gives them back as that text), else as they are
    in a list (given back as they are)."""
    values = list(values)
    if values and all(type(v) is str and len(v) == 16 for v in values):
        try:
            numbers = array("Q", (int(v, 16) for v in values))
        except ValueError:
            return values
        if list(map(_HEX, numbers)) == values:  # (no sign, prefix, separator or capital was read past)
            return numbers
    return values


def unhexed(column: array | list[Any]) -> list[Any]:
    """The span ids :func:`hex_column` made a column of."""
    return list(map(_HEX, column)) if isinstance(column, array) else column


def indexed(values: Iterable[Hashable]) -> tuple[list[Any], array]:
    """``values`` as a table of the distinct ones (in first-seen order) and each one's index into it."""
    table: dict[Any, int] = {}
    index = array("i", (table.setdefault(v, len(table)) for v in values))
    return list(table), index


def pairs_columns(mapping: Mapping[Any, Any]) -> tuple[Any, ...]:
    """A mapping keyed by pairs (a few kinds, then a step) as columns: the first halves as indexes into a
    table, the second halves and the values as :func:`scalars`."""
    table, index = indexed(first for first, _ in mapping)
    return table, index, scalars(second for _, second in mapping), scalars(mapping.values())


def pairs_from_columns(columns: tuple[Any, ...]) -> dict[tuple[Any, Any], Any]:
    """The mapping :func:`pairs_columns` made columns of."""
    table, index, seconds, values = columns
    return {(table[at], second): value for at, second, value in zip(index, seconds, values, strict=True)}


def runs_columns(runs: Mapping[Any, Sequence[Sequence[int]]], width: int) -> tuple[Any, ...]:
    """A mapping of key -> list of ``width`` ints (a step's runs) as columns: the keys, how many each has,
    and the ints, flat."""
    counts, flat = array("i"), array("q")
    for items in runs.values():
        counts.append(len(items))
        for item in items:
            flat.extend(item)
    return scalars(runs), counts, flat, width


def runs_from_columns(columns: tuple[Any, ...]) -> dict[Any, list[tuple[int, ...]]]:
    """The mapping :func:`runs_columns` made columns of."""
    keys, counts, flat, width = columns
    items = list(zip(*[iter(flat)] * width, strict=True))  # (every tuple at once)
    out: dict[Any, list[tuple[int, ...]]] = {}
    at = 0
    for key, count in zip(keys, counts, strict=True):
        out[key] = items[at : at + count]
        at += count
    return out
