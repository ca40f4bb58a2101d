"""Passes 1-3 of the reduction (:mod:`lens_rl.offline.read.reduce` runs pass 4): one process's columns linked
into a :class:`Tree`, with no object per span.

1. :func:`link`: each span's parent row, whether it has a child in the file, whether it is an orphan's
   child (its local parent was never written: still open when the file ended, a killed process).
2. :func:`resolve`: the one tree rule (:mod:`lens_rl.offline.read.tree`, which every command asks): each
   span's step, nearest bucketed ancestor and place (step umbrella, phase, a third party's span), parent
   cycles cut and counted.
3. :func:`inner`: each bucketed span's nearest bucketed descendants (their time is taken from it:
   :func:`lens_rl.buckets.exclusive_time`, the rule the live metric uses too), and each unbucketed phase's
   child phases (its exclusive time in the phase table).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from itertools import repeat
from operator import is_not
from typing import Any

import numpy as np

from lens_rl.offline.read.columns import REMOTE_PARENT, THIRD_PARTY, Columns
from lens_rl.offline.read.parts import BUCKETS
from lens_rl.offline.read.tree import JOB, UMBRELLA, id_key, parent_rows
from lens_rl.offline.read.tree import THIRD_PARTY as THIRD_ROLE
from lens_rl.offline.read.tree import resolve as resolve_tree

__all__ = ["Kids", "Tree", "inner", "link", "resolve"]

_BUCKET_SET = frozenset(BUCKETS)
_BUCKET_OR_NONE = _BUCKET_SET | {None}
_NUMBER_OR_NONE = frozenset((int, float, type(None)))
_THIRD_MASK = bytes(b & THIRD_PARTY for b in range(256))  # flags -> only their third-party bit


class Tree:
    """One process's spans linked: what the passes share (rows are indexes into the columns)."""

    __slots__ = (
        "n",
        "names",
        "starts",
        "ends",
        "parents",
        "buckets",
        "own_steps",
        "tokens",
        "has_child",
        "orphan",
        "flags",
        "steps",
        "outer",
        "top",
        "role",
        "cycles",
        "ids",
        "remote",
        "flops",
        "gen_tokens",
        "versions",
        "third_roots",
        "remote_tokens",
        "errors",
    )
    n: int
    names: list[Any]
    starts: array
    ends: array
    parents: array
    buckets: list[Any]
    own_steps: list[Any]
    tokens: dict[int, float]
    has_child: bytearray
    orphan: bytearray
    flags: bytearray
    steps: list[Any]
    outer: array
    top: array
    role: bytearray
    cycles: int
    ids: Any
    remote: dict[int, Any]
    flops: dict[int, float]
    gen_tokens: dict[int, tuple[float, float]]
    versions: dict[int, tuple[Any, Any, Any, Any, Any]]
    third_roots: dict[int, Any]
    remote_tokens: dict[str, list[float]]
    errors: dict[int, dict[str, str]]


def link(cols: Columns) -> Tree:
    """Pass 1 (see the module docstring). Consumes the columns' ids (memory on large files)."""
    tree = Tree()
    n = tree.n = len(cols.names)
    tree.names, tree.starts, tree.flags = cols.names, cols.starts, cols.flags
    tree.errors = cols.errors
    tree.ends = _ints(
        np.maximum(_np(cols.starts, np.int64), _np(cols.ends, np.int64))
    )  # (an end never before its start)
    if type(cols.ids) is array and n:
        _link_numbers(tree, cols)
    else:
        _link_given(tree, cols)
    tree.ids, cols.ids = cols.ids, []  # (the critical path names the spans it walks; dropped after it)
    cols.parent_ids = []
    buckets: list[Any] = cols.buckets  # in place: an unknown bucket counts as none, a third party's too
    flags = cols.flags
    if not set(buckets) <= _BUCKET_OR_NONE or THIRD_PARTY in flags.translate(_THIRD_MASK):
        for i, b in enumerate(buckets):
            if b is not None and (b not in _BUCKET_SET or flags[i] & THIRD_PARTY):
                buckets[i] = None
    tree.buckets, tree.own_steps = buckets, cols.steps
    tree.flops = cols.flops
    tokens = cols.tokens
    if set(map(type, tokens)) <= _NUMBER_OR_NONE:  # (as the columns keep them: no bool, nothing else)
        tree.tokens = {i: tok for i, tok in enumerate(tokens) if tok is not None}
    else:
        tree.tokens = {
            i: tok
            for i, tok in enumerate(tokens)
            if tok is not None and isinstance(tok, (int, float)) and not isinstance(tok, bool)
        }
    tree.gen_tokens = cols.gen_tokens
    tree.versions = cols.versions
    return tree


def _np(values: array | bytearray, dtype: Any) -> Any:
    """An array's numbers as a numpy view (no copy)."""
    return np.frombuffer(values, dtype=dtype) if len(values) else np.zeros(0, dtype=dtype)


def _ints(values: Any) -> array:
    """Numpy int64 numbers as an ``array("q")``."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return out


def _link_numbers(tree: Tree, cols: Columns) -> None:
    """:func:`link`'s parents, children, entries, third parties' roots and orphans where the ids are numbers
    (lens_rl's 16 hex digits; a missing parent is 0), at numpy's speed: what :func:`_link_given` finds."""
    n = tree.n
    ids, parent_ids = _np(cols.ids, np.uint64), _np(cols.parent_ids, np.uint64)
    by_id = np.argsort(ids, kind="stable")
    ordered = ids[by_id]
    at = np.searchsorted(ordered, parent_ids, side="right") - 1  # (a repeated id names its last span)
    at[at < 0] = 0
    found = ordered[at] == parent_ids  # (no id is 0: a missing parent finds none)
    parents = np.where(found, by_id[at], -1).astype(np.int64)
    tree.parents = _ints(parents)
    rows = np.arange(n, dtype=np.int64)
    has_child = np.zeros(n, dtype=np.uint8)
    has_child[parents[found & (parents != rows)]] = 1  # (a self-parent: cut and counted by the tree rule)
    tree.has_child = bytearray(has_child.tobytes())
    flags = np.frombuffer(cols.flags, dtype=np.uint8)
    root = ~found
    third = np.flatnonzero(root & ((flags & THIRD_PARTY) != 0) & (parent_ids != 0))
    tree.third_roots = dict(zip(third.tolist(), parent_ids[third].tolist(), strict=True))
    remote = root & ((flags & REMOTE_PARENT) != 0)
    entries = np.flatnonzero(remote)
    tree.remote = dict(zip(entries.tolist(), parent_ids[entries].tolist(), strict=True))
    orphan = root & ~remote & (parent_ids != 0)
    if type(cols.root) is int and 0 <= cols.root < 2**64:
        orphan &= parent_ids != np.uint64(cols.root)
    tree.orphan = bytearray(orphan.astype(np.uint8).tobytes())


def _link_given(tree: Tree, cols: Columns) -> None:
    """:func:`link`'s parents, children, entries, third parties' roots and orphans, ids as they came."""
    n = tree.n
    parents = tree.parents = parent_rows(cols.ids, cols.parent_ids)
    tree.remote, tree.third_roots = {}, {}
    has_child = tree.has_child = bytearray(n)
    orphan = tree.orphan = bytearray(n)
    none, root, flags = 0 if type(cols.parent_ids) is array else None, cols.root, cols.flags
    for i, p in enumerate(parents):
        if p != -1:
            if p != i:  # (a self-parent: cut and counted by the tree rule)
                has_child[p] = 1
        else:
            parent_id = cols.parent_ids[i]
            if flags[i] & THIRD_PARTY and parent_id != none:
                tree.third_roots[i] = parent_id  # (a third party's call from a phase in another file, likely)
            if flags[i] & REMOTE_PARENT:
                tree.remote[i] = parent_id  # an entry: called from another process
            elif parent_id != none and parent_id != root:
                orphan[i] = 1


def resolve(tree: Tree) -> None:
    """Pass 2 (see the module docstring): the one tree rule (:func:`lens_rl.offline.read.tree.resolve`);
    then a third-party span's token counts go to the lens_rl phase it runs under, where that phase has
    none of its own."""
    mask = tree.flags.translate(_THIRD_MASK)
    third = mask if THIRD_PARTY in mask else None
    done = resolve_tree(tree.parents, tree.own_steps, tree.buckets, tree.names, third, tree.has_child)
    tree.steps, tree.outer, tree.top, tree.role = done.steps, done.outer, done.top, done.role
    tree.has_child, tree.cycles = done.has_child, done.cycles
    tree.remote_tokens = {}
    if tree.gen_tokens:
        _third_party_tokens(tree)
    tree.gen_tokens = {}


def _third_party_tokens(tree: Tree) -> None:
    """Each third-party span's token counts to the lens_rl phase it runs under (a phase's own count wins), or,
    where that phase is in another file, kept by its parent's id for the rollup to match."""
    counts: dict[int, list[float]] = {}
    role, parents = tree.role, tree.parents
    for i, (out, into) in tree.gen_tokens.items():
        r, p = i, parents[i]
        while p != -1 and role[p] == THIRD_ROLE:
            r, p = p, parents[p]
        if p == -1 and r in tree.third_roots:  # its phase is in another file: matched by id at the rollup
            found = tree.remote_tokens.setdefault(id_key(tree.third_roots[r]), [0.0, 0.0])
        elif p != -1 and role[p] != JOB:
            found = counts.setdefault(p, [0.0, 0.0])
        else:
            continue
        found[0] += out
        found[1] += into
    for p, (out, into) in counts.items():
        if p not in tree.tokens:
            tree.tokens[p] = out or into


def inner(tree: Tree) -> tuple[Kids, dict[int, list[tuple[int, int]]]]:
    """Pass 3 (see the module docstring): each bucketed span's nearest bucketed descendants (:class:`Kids`);
    and each unbucketed phase outside every bucketed span, its children that are phases (a phase's exclusive
    time: what its time nested phases leave it, each instant counted once however deep the nesting)."""
    n = tree.n
    outer = _np(tree.outer, np.int64)
    bucketed = np.fromiter(map(is_not, tree.buckets, repeat(None)), dtype=bool, count=n)
    kids = np.flatnonzero((outer != -1) & bucketed)
    own: dict[int, list[tuple[int, int]]] = {}
    parents, role = _np(tree.parents, np.int64), _np(tree.role, np.uint8)
    phase = role <= UMBRELLA
    under = (outer == -1) & (parents != -1) & phase  # (no bucket above: its parent has none)
    under[under] &= phase[parents[under]]
    starts, ends = tree.starts, tree.ends
    for i in np.flatnonzero(under).tolist():
        own.setdefault(tree.parents[i], []).append((starts[i], ends[i]))
    return Kids(outer[kids], _np(starts, np.int64)[kids], _np(ends, np.int64)[kids]), own


class Kids(Mapping[int, list[tuple[int, int]]]):
    """Bucketed span's row -> its nearest bucketed descendants' intervals, in row order: kept as three
    arrays (the descendants' ancestor rows, starts, ends; in row order), a dict made only where one is
    asked for by row (the driver's overlaps); :meth:`single` and :meth:`several` read the arrays."""

    def __init__(self, rows: Any, starts: Any, ends: Any) -> None:
        self.rows, self.starts, self.ends = rows, starts, ends
        self._made: dict[int, list[tuple[int, int]]] | None = None

    @property
    def _dict(self) -> dict[int, list[tuple[int, int]]]:
        if self._made is None:
            made: dict[int, list[tuple[int, int]]] = {}
            for o, start, end in zip(self.rows.tolist(), self.starts.tolist(), self.ends.tolist(), strict=True):
                made.setdefault(o, []).append((start, end))
            self._made = made
        return self._made

    def __getitem__(self, row: int) -> list[tuple[int, int]]:
        return self._dict[row]

    def __iter__(self) -> Iterator[int]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def single(self) -> tuple[Any, Any, Any]:
        """The rows with one descendant, and its start and end (numpy arrays)."""
        counts = np.bincount(self.rows, minlength=1) if self.rows.size else np.zeros(0, dtype=np.int64)
        one = counts[self.rows] == 1 if self.rows.size else np.zeros(0, dtype=bool)
        return self.rows[one], self.starts[one], self.ends[one]

    def several(self) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """(row, its descendants' intervals) of the rows with more than one, in the order they first appear."""
        if not self.rows.size:
            return
        counts = np.bincount(self.rows)
        many = counts[self.rows] > 1
        if not many.any():
            return
        found: dict[int, list[tuple[int, int]]] = {}
        for o, start, end in zip(
            self.rows[many].tolist(), self.starts[many].tolist(), self.ends[many].tolist(), strict=True
        ):
            found.setdefault(o, []).append((start, end))
        yield from found.items()
