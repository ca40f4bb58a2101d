"""The critical path of every step: the chain of spans, across processes, that determined when it ended.

For each final run of a driver step, walk back from the step's end through the spans under it (the
driver's own, and every worker span whose parent chain leads into the step), always into the span that
ended last before the current point; time where no child runs is the parent's own; a child's stretch is
clipped to its parent's interval (a child may start before the span it belongs to, as async generation
does); a child still running at the current point is skipped. Each stretch is attributed to (worker group,
rank, phase, bucket).

Streaming, in two halves that meet at the rollup:

* **Per file** (:func:`walk_file`, inside the goodput read: no other pass). Each process walks its own
  spans from every *walk root*: the driver's step umbrellas, and every *entry* (a span whose parent was
  carried in from another process). The result, a :class:`CritPart`, holds each root's stretches (from its
  end backwards) and, per entry, the parent id it hangs from: a few int arrays, merged exactly. An entry
  that is a leaf, or whose one child is a leaf (the common worker shape), is not walked here: its child's
  row and interval are kept, and the rollup applies the rule to them when a walk reaches the entry.
* **At the rollup** (:func:`lens_rl.offline.rollup.critical.critical_path`). Entries are indexed by the
  parent they hang from. A stretch of a span's own time that has entries hanging from that span is walked
  again over those remote
  children (the same rule; their own stretches, cut at the walk's bound, go in its place): a driver phase
  that waited on two workers becomes the slower worker's chain, then the driver phase's own rest.

A remote call that overlapped a local child of its caller is walked within the caller's own time only (in
the common case, a call the caller waited on, this is exact). A span whose parent was never written joins
no step. A profiler capture's window (``rl.profile``, :data:`lens_rl.offline.read.tree.CAPTURE`) is not on any
path: its children (the capture's cost) are walked as its parent's, where it hangs from another process as
entries hanging from the same span; the step's phases inside the window are walked as they are.

Example::

    rollup = critical_path(processes, step_rows)
    rollup["phases"][0]      # {"worker_group", "phase", "bucket", "critical_s", "critical_share", "exposed_share"}
"""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import int64_array
from lens_rl.offline.read.parts import SlotsState
from lens_rl.offline.read.tree import CAPTURE, JOB, THIRD_PARTY

__all__ = ["CritPart", "walk_file"]


class CritPart(SlotsState):
    """One process's walks: its walk roots (driver steps, entries) and their stretches, compact.

    ``nodes``: the process's spans (a stretch, an entry, a child names one by its row), each as its span id and
    (name, bucket); ``stretches``: two int arrays (start ns, node), each root's run of them from its end
    backwards, tiling the root's interval (a stretch ends where the one before it starts, the first where its
    root ends); ``steps``: step -> [(first stretch, count, end ns)] of the driver's umbrellas; ``entries``:
    per entry, its parent's id, its interval, its node, and its one child where that child is a leaf and the
    entry has no other (node, interval; node -1: none); ``walked``: the entries with any other shape (sorted)
    and their stretches (an entry in neither is a leaf: its own whole interval)."""

    __slots__ = (
        "node_ids",
        "node_attr",
        "attrs",
        "a",
        "node",
        "steps",
        "e_parent",
        "e_start",
        "e_end",
        "e_node",
        "k_node",
        "k_start",
        "k_end",
        "w_entry",
        "w_off",
        "w_len",
    )

    def __init__(self) -> None:
        self.node_ids: Any = array("Q")  # (a list where an id is not lens_rl's 16 hex digits)
        self.node_attr = array("i")  # each node's (name, bucket), as an index into attrs
        self.attrs: list[tuple[Any, Any]] = []
        self.a = array("q")
        self.node = array("i")
        self.steps: dict[Any, list[tuple[int, int, int]]] = {}
        self.e_parent: Any = array("Q")  # (a list, as node_ids)
        self.e_start = array("q")
        self.e_end = array("q")
        self.e_node = array("i")
        self.k_node = array("i")
        self.k_start = array("q")
        self.k_end = array("q")
        self.w_entry = array("i")
        self.w_off = array("q")
        self.w_len = array("i")

    def merge(self, other: CritPart) -> None:
        """Fold another part of the same process in (its nodes, stretches and entries after this one's)."""
        nodes, stretches, entries = len(self.node_ids), len(self.a), len(self.e_parent)
        self.node_ids = _joined(self.node_ids, other.node_ids)
        remap = self._take_attrs(other.attrs)
        self.node_attr.extend(map(remap.__getitem__, other.node_attr))
        self.a += other.a
        self.node.extend(n + nodes for n in other.node)
        for step, runs in other.steps.items():
            self.steps.setdefault(step, []).extend((off + stretches, count, end) for off, count, end in runs)
        self.e_parent = _joined(self.e_parent, other.e_parent)
        self.e_start += other.e_start
        self.e_end += other.e_end
        self.e_node.extend(n + nodes for n in other.e_node)
        self.k_node.extend(n + nodes if n >= 0 else -1 for n in other.k_node)
        self.k_start += other.k_start
        self.k_end += other.k_end
        self.w_entry.extend(e + entries for e in other.w_entry)
        self.w_off.extend(off + stretches for off in other.w_off)
        self.w_len += other.w_len

    def _take_attrs(self, attrs: list[tuple[Any, Any]]) -> list[int]:
        """Another part's (name, bucket) table folded into this one's: each of its indexes' new index."""
        known = {attr: n for n, attr in enumerate(self.attrs)}
        remap = []
        for attr in attrs:
            if attr not in known:
                known[attr] = len(self.attrs)
                self.attrs.append(attr)
            remap.append(known[attr])
        return remap


def _ids(values: list[Any]) -> Any:
    """Span ids as 8 bytes each where they are lens_rl's 16 hex digits (read as ints), else the list."""
    try:
        return array("Q", values)
    except (TypeError, OverflowError):
        return values


def _joined(mine: Any, other: Any) -> Any:
    """Two runs of span ids as one (an array while both are)."""
    if type(mine) is type(other):
        mine += other
        return mine
    return list(mine) + list(other)


# ------------------------------------------------------------------------------------------- per file


def walk_file(tree: Any, ids: Any, remote_parent: Mapping[int, Any], umbrellas: Sequence[int], skip: Any) -> CritPart:
    """One process's walks (see the module docstring). ``tree``: its linked spans; ``ids``: their span ids;
    ``remote_parent``: entry row -> the id of its parent in another process; ``umbrellas``: rows of the
    driver's final-run step umbrellas; ``skip(row)``: a row of a superseded run (walks no further), or None.

    An entry that is a leaf, or has one child that is a leaf (a worker's phase and its one inner span, the
    common shape), is not walked here: its child is all the rollup needs (:meth:`_Index.entry`). The
    entries' columns are made in bulk, as is the node table (every span of the file, by row)."""
    if CAPTURE in tree.names:
        tree, remote_parent = _without_captures(tree, remote_parent)
    only, many, kids = _children(tree.parents, tree.has_child, tree.ends)
    part = CritPart()
    walker = _Walker(tree, only, kids, part)
    for row in umbrellas:
        step = tree.own_steps[row]
        part.steps.setdefault(step, []).append((*walker.walk(row), tree.ends[row]))
    rows = list(remote_parent) if skip is None else [row for row in remote_parent if not skip(row)]
    _entries(part, tree, walker, rows, only, many)
    part.e_parent = _ids([remote_parent[row] for row in rows])
    part.node_ids = ids if type(ids) is array else _ids(list(ids))
    _node_table(part, tree)
    return part


class _View:
    """The columns a walk reads of a file's tree, its captures' windows taken out (:func:`_without_captures`)."""

    __slots__ = ("starts", "ends", "parents", "has_child", "names", "buckets", "role", "own_steps")

    def __init__(self, tree: Any, parents: array, has_child: bytearray) -> None:
        self.starts, self.ends, self.names, self.buckets = tree.starts, tree.ends, tree.names, tree.buckets
        self.role, self.own_steps = tree.role, tree.own_steps
        self.parents, self.has_child = parents, has_child


def _without_captures(tree: Any, remote_parent: Mapping[int, Any]) -> tuple[_View, dict[int, Any]]:
    """The tree as the walk reads it where the file holds capture windows: each window's children hang from
    the window's parent (from the span in another process it hangs from: entries), the window from nothing (no
    walk enters it, none starts at it)."""
    parents, has_child, remote = array("q", tree.parents), bytearray(tree.has_child), dict(remote_parent)
    names = tree.names
    windows = {row for row, name in enumerate(names) if name == CAPTURE}
    for row, up in enumerate(parents):
        if up in windows:
            above = parents[up]
            parents[row] = above
            if above != -1:
                has_child[above] = 1
            elif up in remote:
                remote[row] = remote[up]
    above = {parents[row] for row in windows}
    for row in windows:
        parents[row] = -1
        has_child[row] = 0
        remote.pop(row, None)
    still = set(parents)
    for row in above - {-1}:
        has_child[row] = row in still  # (a span whose one child was a window with none of its own: a leaf now)
    return _View(tree, parents, has_child), remote


def _children(
    parents: array, has_child: bytearray, ends: array
) -> tuple[dict[int, int], set[int], dict[int, list[int]]]:
    """Each span's children, as the walk reads them: parent -> its last child (its child, if it has one),
    the spans with more than one child (none, often: then no count of them), and theirs, latest end first."""
    only = dict(zip(parents, range(len(parents)), strict=False))
    many: set[int] = set()
    if len(parents) - parents.count(-1) > has_child.count(1):
        many = {p for p, count in Counter(parents).items() if count > 1 and p != -1}
    kids: dict[int, list[int]] = {}
    if many:
        for i, p in enumerate(parents):
            if p in many:
                found = kids.get(p)
                if found is None:
                    kids[p] = [i]
                else:
                    found.append(i)
        for children in kids.values():
            children.sort(key=ends.__getitem__, reverse=True)
    return only, many, kids


class _Walker:
    """The walk of one root (the rule of the module docstring), appending its stretches to a part's columns."""

    __slots__ = ("starts", "ends", "has_child", "only", "kids", "a", "node")

    def __init__(self, tree: Any, only: dict[int, int], kids: dict[int, list[int]], part: CritPart) -> None:
        self.starts, self.ends, self.has_child = tree.starts, tree.ends, tree.has_child
        self.only, self.kids = only, kids
        self.a, self.node = part.a, part.node

    def walk(self, root: int) -> tuple[int, int]:
        """The stretches of ``root``, from its end backwards: (the first's index, their count)."""
        starts, ends, has_child, only, kids = self.starts, self.ends, self.has_child, self.only, self.kids
        a, node = self.a, self.node
        first = len(a)
        stack = [(root, ends[root], starts[root], 0)]
        while stack:
            row, t, low, pos = stack.pop()
            descended = False
            if has_child[row]:
                children = kids.get(row) or (only[row],)
                count = len(children)
                while pos < count:
                    c = children[pos]
                    pos += 1
                    end = ends[c]
                    if end > t:
                        continue  # still running at the current point
                    if end <= low:
                        break  # (sorted by end: none left inside)
                    if t > end:
                        a.append(end)
                        node.append(row)
                    start = starts[c]
                    bound = start if start > low else low
                    if has_child[c]:
                        stack.append((row, bound, low, pos))
                        stack.append((c, end, bound, 0))
                        descended = True
                        break
                    a.append(bound)  # a leaf: its stretch, then on in this span
                    node.append(c)
                    t = bound
                    if t <= low:
                        break
            if not descended and t > low:
                a.append(low)
                node.append(row)
        return first, len(a) - first


def _entries(part: CritPart, tree: Any, walker: _Walker, rows: list[int], only: dict[int, int], many: set[int]) -> None:
    """The entries' columns (``rows``: theirs): each one's interval and node, its one leaf child's, and the
    walks of those of any other shape."""
    has_child = tree.has_child
    # per entry: -1 a leaf, its one child's row where that child is a leaf, else -2 (walked here)
    kid = [-1 if not has_child[row] else -2 if row in many or has_child[c := only[row]] else c for row in rows]
    if -2 in kid:
        for e, c in enumerate(kid):
            if c == -2:
                off, count = walker.walk(rows[e])
                if count:  # (none: an entry of no length, read as a leaf)
                    part.w_entry.append(e)
                    part.w_off.append(off)
                    part.w_len.append(count)
                kid[e] = -1
    part.e_node, part.k_node = array("i", rows), array("i", kid)
    at, kid_at = np.frombuffer(part.e_node, np.int32), np.frombuffer(part.k_node, np.int32)
    starts_of, ends_of = np.frombuffer(tree.starts, np.int64), np.frombuffer(tree.ends, np.int64)
    part.e_start, part.e_end = int64_array(starts_of[at]), int64_array(ends_of[at])
    # (where there is no child, -1 reads the last span: never read)
    part.k_start, part.k_end = int64_array(starts_of[kid_at]), int64_array(ends_of[kid_at])


def _node_table(part: CritPart, tree: Any) -> None:
    """Every span's (name, bucket), as an index into ``part.attrs``; a third party's span is no phase: its
    stretches are its nearest phase's."""
    pairs = list(zip(tree.names, tree.buckets, strict=True))
    parents, role = tree.parents, tree.role
    if THIRD_PARTY in role:
        for i in (i for i, r in enumerate(role) if r == THIRD_PARTY):
            p = parents[i]
            while p != -1 and role[p] == THIRD_PARTY:
                p = parents[p]
            if p != -1 and role[p] != JOB:
                pairs[i] = pairs[p]
    part.attrs = list(dict.fromkeys(pairs))
    part.node_attr = array("i", map(dict(zip(part.attrs, itertools.count())).__getitem__, pairs))
