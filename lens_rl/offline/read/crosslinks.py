"""Links between processes, by the one tree rule: which remote entries the critical path may follow.

A process's *entry* (a span whose parent was carried in from another process) hangs from the span of
another process with its parent's id. Per file the tree rule (:mod:`lens_rl.offline.read.tree`) already cut
the cycles it can see; a cycle through several processes (a driver's step umbrella whose parent is a
worker span whose parent is the umbrella, or a ring of any length) only shows here. Each entry's parent is
the entry whose walk holds a span with its parent's id (the first such entry, in the order the processes
and their entries were read); :func:`lens_rl.offline.read.tree.cut_cycles` cuts the cycles of those links
(each cycle's first entry loses its parent, exactly as within a file) and counts them. The critical path
then walks no cut link: what hangs from a cycle is walked once, from its first entry.

The goodput read hands :func:`cross_cut` to the rollup (``report_from_parts(..., cut_links=cross_cut)``),
which runs it over the merged processes. Cheap where there is no such link (the common store: workers' entries hang from the driver's step spans,
which are in no entry's walk): a few array operations over the entries, no loop in Python.

Example::

    cut = cross_cut(processes)
    cut.cycles          # the cycles broken between processes
    ref in cut.refs     # (part << 32 | entry): an entry that hangs from nothing
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from lens_rl.offline.read.tree import cut_cycles

__all__ = ["CrossCut", "cross_cut"]


class CrossCut:
    """The entries (``part << 32 | entry``) whose link to their parent was cut (``refs``), and the cycles
    between processes that cut them (``cycles``)."""

    __slots__ = ("refs", "cycles")

    def __init__(self, refs: frozenset[int] = frozenset(), cycles: int = 0) -> None:
        self.refs = refs
        self.cycles = cycles


def _ids(values: Any, at: Any) -> Any:
    """``values[at]`` as a numpy array: uint64 where the ids are lens_rl's (an ``array('Q')``), else objects."""
    if type(values) is array:
        return np.frombuffer(values, np.uint64)[at] if len(values) else np.zeros(0, np.uint64)
    return np.array([values[i] for i in at.tolist()] + [None], dtype=object)[:-1]


def _walk_nodes(crit: Any) -> tuple[Any, Any]:
    """Every node of every entry's walk in one process, and the entry it belongs to: the walked entries'
    stretches, each entry's own span and its one kept child."""
    entries = len(crit.e_node)
    own = np.arange(entries, dtype=np.int64)
    nodes = [np.frombuffer(crit.e_node, np.int32).astype(np.int64)]
    owners = [own]
    kids = np.frombuffer(crit.k_node, np.int32).astype(np.int64)
    has_kid = kids >= 0
    nodes.append(kids[has_kid])
    owners.append(own[has_kid])
    if len(crit.w_entry):
        lengths = np.frombuffer(crit.w_len, np.int32).astype(np.int64)
        offsets = np.frombuffer(crit.w_off, np.int64)
        # (the stretches' positions of every walked entry, in one array)
        position = np.repeat(offsets - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        position += np.arange(int(lengths.sum()), dtype=np.int64)
        nodes.append(np.frombuffer(crit.node, np.int32).astype(np.int64)[position])
        owners.append(np.repeat(np.frombuffer(crit.w_entry, np.int32).astype(np.int64), lengths))
    return np.concatenate(nodes), np.concatenate(owners)


def _joined(arrays: Sequence[Any]) -> Any:
    """Id arrays as one (objects where any part's ids are not all lens_rl's)."""
    if not arrays:
        return np.zeros(0, np.uint64)
    if all(a.dtype == np.uint64 for a in arrays):
        return np.concatenate(arrays)
    return np.concatenate([a.astype(object) for a in arrays])


#: Bits of an id a table of :func:`_among` is indexed by (a table of 2**20 flags: 1 MB), and the slices of an id
#: its passes read (low, middle, high bits: each pass rules out most of what the one before let through).
_TABLE_BITS = 20
_SLICES = (0, 20, 40)


class _Wanted:
    """Wanted ids (uint64) as tables of flags indexed by a slice of an id's bits (its low, then middle, then high
    20), made once: they rule out most ids (the common store: no id is wanted; one table alone let a third of
    a run's 1 M ids through), and those they may hold are looked up exactly, by a binary search among the few
    wanted ids whose low bits one of them has (no sort of a run's 470 k ids: measured 22 ms; 18 -> 8 ms with
    the three passes)."""

    def __init__(self, wanted: Any) -> None:
        self.wanted, self._them = wanted, wanted.view(np.int64)  # (the same bits; a slice masked is never < 0)
        self.tables = []
        for shift in _SLICES:
            table = np.zeros(1 << _TABLE_BITS, bool)
            table[(self._them >> shift) & _MASK] = True
            self.tables.append(table)

    def maybe(self, ids: Any) -> Any:
        """The positions of the ``ids`` (uint64) every table lets through."""
        own = ids.view(np.int64)
        maybe = np.flatnonzero(self.tables[0][own & _MASK])
        for table, shift in zip(self.tables[1:], _SLICES[1:], strict=True):
            if not len(maybe):
                break
            maybe = maybe[table[(own[maybe] >> shift) & _MASK]]
        return maybe

    def exact(self, ids: Any, maybe: Any) -> Any:
        """Which of ``ids[maybe]`` are wanted."""
        table = np.zeros(1 << _TABLE_BITS, bool)
        table[ids.view(np.int64)[maybe] & _MASK] = True
        near = self.wanted[table[self._them & _MASK]]  # (the wanted ids sharing low bits with a maybe)
        ordered = np.sort(near)
        at = np.minimum(np.searchsorted(ordered, ids[maybe]), len(ordered) - 1)
        return ordered[at] == ids[maybe]


_MASK = np.int64((1 << _TABLE_BITS) - 1)


def _among(ids: Any, wanted: Any) -> Any:
    """Which of ``ids`` are among ``wanted`` (:class:`_Wanted`'s tables, then exactly)."""
    if ids.dtype != np.uint64 or wanted.dtype != np.uint64:
        return np.isin(ids, wanted)
    out = np.zeros(len(ids), bool)
    if not len(wanted) or not len(ids):
        return out
    table = _Wanted(wanted)
    maybe = table.maybe(ids)
    if len(maybe):
        out[maybe] = table.exact(ids, maybe)
    return out


def _none_wanted(crits: Sequence[Any]) -> bool:
    """Whether no entry's parent id is the id of any span of these processes (each one's whole node table, of
    which the walks' nodes are some): then no link between them can be cut, and no walk is gathered (the
    common store: workers' entries hang from the driver's spans, which have no entries). Each process's node
    table is looked up apart, against tables made once (no run-sized copy of every id: 13 -> 7 ms)."""
    if not all(type(c.node_ids) is array and type(c.e_parent) is array for c in crits):
        return False  # (ids that are not all lens_rl's: the exact pass below)
    parents = [np.frombuffer(c.e_parent, np.uint64) for c in crits if len(c.e_parent)]
    if not parents:
        return True
    table = _Wanted(np.concatenate(parents))
    for crit in crits:
        if len(crit.node_ids):
            ids = np.frombuffer(crit.node_ids, np.uint64)
            maybe = table.maybe(ids)
            if len(maybe) and bool(table.exact(ids, maybe).any()):
                return False
    return True


def cross_cut(processes: Sequence[Any]) -> CrossCut:
    """The links between processes the tree rule cuts (see the module docstring)."""
    parts = [(p, part.crit) for p, part in enumerate(processes) if part.crit is not None and len(part.crit.e_node)]
    if not parts:
        return CrossCut()
    if _none_wanted([crit for _p, crit in parts]):
        return CrossCut()
    base, refs, parent_ids, node_ids, node_owner = 0, [], [], [], []
    for p, crit in parts:
        count = len(crit.e_node)
        refs.append(np.arange(count, dtype=np.int64) | (p << 32))
        parent_ids.append(_ids(crit.e_parent, np.arange(count)))
        nodes, owners = _walk_nodes(crit)
        node_ids.append(_ids(crit.node_ids, nodes))
        node_owner.append(owners + base)
        base += count
    wanted, ids, owner = _joined(parent_ids), _joined(node_ids), np.concatenate(node_owner)
    hit = _among(ids, wanted)
    if not hit.any():
        return CrossCut()
    first: dict[Any, int] = {}
    for key, entry in zip(ids[hit].tolist(), owner[hit].tolist(), strict=True):
        first.setdefault(key, entry)  # (the first entry whose walk holds a span with this id)
    parents = array("q", [-1]) * base
    for g, key in enumerate(wanted.tolist()):
        found = first.get(key)
        if found is not None:
            parents[g] = found
    before = array("q", parents)
    cycles = cut_cycles(parents)
    if not cycles:
        return CrossCut()
    every = np.concatenate(refs)
    cut = [g for g in range(base) if parents[g] != before[g]]
    return CrossCut(frozenset(every[cut].tolist()), cycles)
