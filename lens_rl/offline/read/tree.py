"""The one tree rule: from one file's spans, each span's parent, step, nearest bucketed ancestor and place.

Every command that needs a span's step or its bucket for time (``goodput``, the critical path, Perfetto
``--steps``, the report's timeline) asks this module, so all of them agree on each span:

* **Parents.** A span's parent is the span of the same file its parent id names (a parent in another
  process, or never written, is none here). A span that is its own parent, and every cycle of parent links
  (of any length, through a step umbrella too), is broken: the cycle's first span in file order loses its
  parent (so the answer depends on the spans' order only, which any subset of the file keeps); each break
  is counted.
* **Step.** Its own ``rl.step``, else its parent's (so its nearest ancestor's).
* **Bucketed ancestor** (``outer``): the nearest ancestor carrying a bucket: the span its time is taken
  from, and whose bucket an unbucketed span's time counts in.
* **Place** (``role``): :data:`UMBRELLA` for a step's umbrella: the outermost span with its own step (no
  span above it has one), when it has no bucket (nested unbucketed spans with a step are one step's tree,
  not several steps; a phase that carries its step, as a worker's do, is no umbrella); :data:`THIRD_PARTY`
  for a span recorded by another library (its scope is not lens_rl's: vLLM's ``llm_request``, an aiohttp
  client span), never a phase; :data:`JOB` for the job root; else :data:`PHASE`.
* **Capture windows.** A profiler capture's span (:data:`CAPTURE`, ``rl.profile``) carries ``rl.bucket``
  ``overhead`` and its ``rl.step`` for readers of the span file, but its window is the profiled step's time, not
  its own: the reads take it with no bucket and no step of its own (:class:`lens_rl.offline.read.columns.Columns`,
  where every reduction reads them), so it is no umbrella, claims no time and widens no step; the capture's own
  time is its children ``rl.profile.start`` / ``rl.profile.stop`` (``overhead``). A store written before it
  carried them reads the same. (A window of steps, :func:`rows_tree`, selects it by its own step.)

Everything is iterative (no recursion: chains thousands deep are walked in loops) and each span is resolved
once.

Example::

    parents = parent_rows(ids, parent_ids)
    tree = resolve(parents, own_steps, buckets, names, third_party)   # parents: cycles cut
    tree.steps[i], tree.outer[i], tree.role[i], tree.cycles
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import repeat
from operator import is_not, ne
from typing import Any

__all__ = [
    "CAPTURE",
    "JOB",
    "PHASE",
    "THIRD_PARTY",
    "UMBRELLA",
    "Resolved",
    "cut_cycles",
    "depths",
    "id_key",
    "parent_rows",
    "resolve",
    "rows_tree",
    "steps_of_rows",
]

PHASE = 0
UMBRELLA = 1
THIRD_PARTY = 2
JOB = 3

_JOB_NAME = "rl.job"
#: A profiler capture's span: no bucket and no step of its own to the reads (the module docstring)
CAPTURE = "rl.profile"
_INT64 = 2**63


class Resolved:
    """What :func:`resolve` decides per span (rows index the file's spans): ``steps``, ``outer`` (the
    nearest bucketed ancestor's row, -1: none), ``top`` (the row of the outermost span with its own step
    it lies under, itself included, -1: none; its step umbrella where that span is one), ``role``
    (:data:`PHASE` ...), ``has_child``, and ``cycles`` (the parent cycles broken, self-parents included)."""

    __slots__ = ("steps", "outer", "top", "role", "has_child", "cycles")

    def __init__(self, steps: list[Any], outer: array, top: array, role: bytearray, has_child: bytearray) -> None:
        self.steps = steps
        self.outer = outer
        self.top = top
        self.role = role
        self.has_child = has_child
        self.cycles = 0


def id_key(span_id: Any) -> str:
    """A span id as one key whatever form a reader kept it in (a number, or text as written): 16 hex digits
    where it is one of lens_rl's form, else its text (what matches a parent id across files)."""
    if type(span_id) is int:
        return f"{span_id:016x}"
    return str(span_id).lower()


def parent_rows(ids: Sequence[Any], parent_ids: Sequence[Any]) -> array:
    """Each span's parent row in the same file (-1: none there), from the span ids and parent ids (a
    repeated span id names its last span). Self-parents and cycles are left to :func:`resolve`."""
    referenced = set(parent_ids)  # (only the spans something points to: a fraction of them)
    index = {span_id: i for i, span_id in enumerate(ids) if span_id in referenced}
    index.pop(None, None)
    get = index.get
    return array("q", (get(p, -1) for p in parent_ids))


def resolve(
    parents: array,
    own_steps: Sequence[Any],
    buckets: Sequence[Any],
    names: Sequence[Any],
    third_party: Any = None,
    has_child: bytearray | None = None,
) -> Resolved:
    """The tree rule (the module docstring) over one file's spans; ``parents`` is cut in place where it
    loops. ``third_party``: a sequence of flags (truthy: not lens_rl's span), or None (all lens_rl's);
    ``has_child``: each span's "a span names it as parent" when the caller made it (recomputed after a cut).
    Each span is decided from its parent, decided before it: a level of the tree at a time (numpy) where the
    tree has no cycle and is shallow, else a span at a time in an order where every parent comes before its
    children (cycles cut on the way)."""
    n = len(parents)
    levels = _levels(parents) if n >= _LEVELS_FROM and type(parents) is array and parents.typecode == "q" else None
    if levels is not None:  # (no cycle, a shallow tree: a level at a time, at numpy's speed)
        steps, outer, top, role = _by_levels(parents, levels, own_steps, buckets, names, third_party)
        cycles = 0
    else:
        steps, outer, top, role, cycles = _in_order(parents, own_steps, buckets, names, third_party)
    if third_party is not None:
        for i, third in enumerate(third_party):
            if third:
                role[i] = THIRD_PARTY
    _mark_jobs(names, role)
    if has_child is None or cycles:
        has_child = bytearray(n)
        for p in parents:
            if p != -1:
                has_child[p] = 1
    out = Resolved(steps, outer, top, role, has_child)
    out.cycles = cycles
    return out


def _in_order(
    parents: array, own_steps: Sequence[Any], buckets: Sequence[Any], names: Sequence[Any], third_party: Any
) -> tuple[list[Any], array, array, bytearray, int]:
    """:func:`resolve`'s steps, outer, top and role, a span at a time in an order where each parent comes
    before its children (cycles cut on the way, and counted)."""
    order, cycles = _order(parents)
    n = len(parents)
    steps: list[Any] = [None] * n
    outer = array("q", [-1]) * n
    top = array("q", [-1]) * n
    role = bytearray(n)
    job = _JOB_NAME
    for i in order:
        p = parents[i]
        own = own_steps[i]
        if p == -1:
            steps[i] = own
            above = -1
        else:
            steps[i] = own if own is not None else steps[p]
            outer[i] = p if buckets[p] is not None else outer[p]
            above = top[p]
        if own is not None and above == -1 and not (third_party is not None and third_party[i]) and names[i] != job:
            top[i] = i  # the outermost span with its own step
            if buckets[i] is None:
                role[i] = UMBRELLA
        else:
            top[i] = above
    return steps, outer, top, role, cycles


#: spans from which a file's tree is resolved a level at a time; and the deepest tree so resolved (deeper,
#: or a cycle: a span at a time)
_LEVELS_FROM = 256
_LEVELS_MAX = 64


def _levels(parents: array) -> list[Any] | None:
    """The rows by depth (roots first; each level's rows in file order) where the parents have no cycle
    and the tree is at most :data:`_LEVELS_MAX` deep; else None."""
    import numpy as np  # (the reads' reduction has it loaded; the tree rule's other readers stay light)

    up = np.frombuffer(parents, dtype=np.int64)
    depth = np.where(up == -1, 0, -1)
    levels = [np.flatnonzero(up == -1)]
    pending = np.flatnonzero(up != -1)
    for level in range(1, _LEVELS_MAX + 1):
        if not pending.size:
            return levels
        ready = depth[up[pending]] == level - 1
        rows = pending[ready]
        if not rows.size:  # (a cycle, or a self-parent)
            return None
        depth[rows] = level
        levels.append(rows)
        pending = pending[~ready]
    return None if pending.size else levels


def _by_levels(
    parents: array,
    levels: list[Any],
    own_steps: Sequence[Any],
    buckets: Sequence[Any],
    names: Sequence[Any],
    third_party: Any,
) -> tuple[list[Any], array, array, bytearray]:
    """:func:`resolve`'s steps, outer, top and role a level of the tree at a time (what :func:`_in_order`
    decides a span at a time: each span from its parent, decided a level before)."""
    import numpy as np

    n = len(parents)
    up = np.frombuffer(parents, dtype=np.int64)
    steps = np.fromiter(own_steps, dtype=object, count=n)
    has_own = np.fromiter(map(is_not, own_steps, repeat(None)), dtype=bool, count=n)
    bucketed = np.fromiter(map(is_not, buckets, repeat(None)), dtype=bool, count=n)
    may_top = has_own & np.fromiter(map(ne, names, repeat(_JOB_NAME)), dtype=bool, count=n)
    if isinstance(third_party, (bytes, bytearray)):
        may_top &= np.frombuffer(third_party, dtype=np.uint8) == 0
    elif third_party is not None:
        may_top &= ~np.fromiter(map(bool, third_party), dtype=bool, count=n)
    outer = np.full(n, -1, dtype=np.int64)
    top = np.full(n, -1, dtype=np.int64)
    role = np.zeros(n, dtype=np.uint8)
    for level, rows in enumerate(levels):
        if level == 0:
            above = np.full(rows.size, -1, dtype=np.int64)
        else:
            up_rows = up[rows]
            inherit = ~has_own[rows]
            steps[rows[inherit]] = steps[up_rows[inherit]]
            outer[rows] = np.where(bucketed[up_rows], up_rows, outer[up_rows])
            above = top[up_rows]
        first = may_top[rows] & (above == -1)  # the outermost span with its own step
        top[rows] = np.where(first, rows, above)
        role[rows[first & ~bucketed[rows]]] = UMBRELLA
    return steps.tolist(), _q(outer), _q(top), bytearray(role.tobytes())


def _q(values: Any) -> array:
    """Numpy int64 numbers as an ``array("q")``."""
    out = array("q")
    out.frombytes(values.tobytes())
    return out


def _mark_jobs(names: Sequence[Any], role: bytearray) -> None:
    """The job root's spans (found at C speed) marked :data:`JOB`: no phase, no umbrella."""
    if not isinstance(names, list):
        names = list(names)
    at = -1
    while True:
        try:
            at = names.index(_JOB_NAME, at + 1)
        except ValueError:
            return
        if role[at] != THIRD_PARTY:
            role[at] = JOB


def cut_cycles(parents: array) -> int:
    """The parent cycles of ``parents`` (row -> parent row, -1: none) cut in place by the tree rule (each
    cycle's first row loses its parent), and how many there were: the rule for links between processes too
    (the critical path's remote entries, :mod:`lens_rl.offline.rollup.crosslinks`). Iterative."""
    return _order(parents)[1]


def _order(parents: array) -> tuple[array, int]:
    """The rows in an order where each parent comes before its children, and the cycles cut on the way: a
    cycle loses the parent link of its first span in file order (the same span whichever span the walk met
    first, and in any subset of the rows that keeps the cycle). Iterative: a chain of any depth is a loop."""
    n = len(parents)
    order = array("q")
    state = bytearray(n)  # 0 not yet, 1 on the current walk, 2 placed
    cycles = 0
    append = order.append
    for i in range(n):
        if state[i]:
            continue
        p = parents[i]
        if p == -1 or state[p] == 2:  # the common cases: a root, or a parent already placed
            append(i)
            state[i] = 2
            continue
        trail = []
        j = i
        while j != -1 and state[j] == 0:
            state[j] = 1
            trail.append(j)
            j = parents[j]
        if j != -1 and state[j] == 1:  # the walk met itself: a cycle from j to the trail's end
            at = trail.index(j)
            first = min(trail[at:])
            parents[first] = -1
            cycles += 1
            cut = trail.index(first) + 1
            for k in trail[cut:]:
                state[k] = 0  # (above the cut: placed by a later walk, from the cut span down)
            del trail[cut:]
        for k in reversed(trail):
            append(k)
            state[k] = 2
    return order, cycles


def depths(parents: array, wanted: Sequence[int] | None = None) -> dict[int, int]:
    """Span row -> its depth in its file's tree (0: a root), for the rows ``wanted`` (None: every row), from
    parents :func:`resolve` left without a cycle; iterative (a chain thousands deep is a loop)."""
    depth: dict[int, int] = {}
    for i in range(len(parents)) if wanted is None else wanted:
        if i in depth:
            continue
        trail = []
        j = i
        while j != -1 and j not in depth:
            trail.append(j)
            j = parents[j]
        d = -1 if j == -1 else depth[j]
        for k in reversed(trail):
            d += 1
            depth[k] = d
    return depth


def rows_tree(rows: Sequence[Any]) -> tuple[array, list[Any], int]:
    """One file's store rows (``s``, ``p``, ``a``) linked by the tree rule: their parents (cycles cut), each
    row's step and the cycles broken. A step is read as the goodput read reads it (a list or an object is no
    step; an int past 64 bits neither). A span's step depends on no bucket nor scope, so only steps are made
    (the same rule as :func:`resolve`'s, without its other columns)."""
    parents = parent_rows([row.s for row in rows], [row.p for row in rows])
    empty: dict[str, Any] = {}
    own = [(row.a or empty).get("rl.step") for row in rows]
    kinds = set(map(type, own))  # (the rare odd values looked for only where they are)
    ints = [step for step in own if type(step) is int] if int in kinds else []
    if list in kinds or dict in kinds or (ints and (min(ints) < -_INT64 or max(ints) >= _INT64)):
        for i, step in enumerate(own):
            if type(step) in (list, dict) or (type(step) is int and not -_INT64 <= step < _INT64):
                own[i] = None
    order, cycles = _order(parents)
    steps: list[Any] = [None] * len(rows)
    for i in order:
        step = own[i]
        if step is None:
            p = parents[i]
            if p != -1:
                step = steps[p]
        steps[i] = step
    return parents, steps, cycles


def steps_of_rows(rows: Sequence[Any]) -> tuple[list[Any], int]:
    """Each row's step by the tree rule (rows of one file), and the cycles broken: what Perfetto's
    ``--steps`` and the report's timeline window select by."""
    _parents, steps, cycles = rows_tree(rows)
    return steps, cycles
