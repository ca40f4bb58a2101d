"""The critical path's rollup: the per-file walks (:mod:`lens_rl.offline.read.critical`, whose docstring
tells the whole rule) joined across processes, entries indexed by the parent they hang from, per step and
per phase; the per-step results of an earlier look reused (:class:`Memo`).

Example::

    rollup = critical_path(processes, step_rows)
    rollup["phases"][0]      # {"worker_group", "phase", "bucket", "critical_s", "critical_share", "exposed_share"}
"""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import int64_array
from lens_rl.offline.rollup.memo import Memo, flat_numbers

__all__ = ["Memo", "critical_path"]

_BEFORE_ALL = -(2**63)  # a bound below every time: a step umbrella's own walk is never cut
_RUN, _OWN = 0, 1  # the walk's frames: a run of stretches; a span's own time over the entries hanging from it
_MISSING = object()


def _groups(parents: Sequence[Any]) -> tuple[dict[Any, int], Any]:
    """The taken entries' parent ids (per part, a uint64 array or a list) as groups: parent id -> its group,
    and each entry's group in the order read."""
    if all(type(ids) is np.ndarray for ids in parents):
        ids, groups = np.unique(np.concatenate(parents) if parents else np.zeros(0, np.uint64), return_inverse=True)
        return dict(zip(ids.tolist(), itertools.count())), groups
    listed = [i for ids in parents for i in (ids.tolist() if type(ids) is np.ndarray else ids)]
    group = dict(zip(dict.fromkeys(listed), itertools.count()))
    return group, np.fromiter(map(group.__getitem__, listed), np.int64, len(listed))


class _Index:
    """Every process's entries by the parent they hang from, compact: an entry is one int (its part's
    position << 32 | its own), the entries of one parent a slice of two flat int arrays (their ends and refs,
    latest end first, ties in the order they were read), found by the parent's id. Entries that ended at or
    before ``after`` are left out (no walk whose bounds lie after it can take them). Built in bulk (numpy):
    the rollup's only pass over every entry."""

    def __init__(self, parts: Sequence[Any], after: int = _BEFORE_ALL, cut: Any = None) -> None:
        self.parts = parts
        self.on_way: set[int] = set()  # the entries the walk is in, on its way down (a cycle: not again)
        self.looped: set[int] = set()  # the entries met again on the way down (a cycle the cut did not see)
        cut_refs = np.fromiter(cut.refs, np.int64, len(cut.refs)) if cut is not None and cut.refs else None
        ends, refs, parents = [], [], []  # per part with entries: those taken
        for p, part in enumerate(parts):
            crit = part.crit
            if crit is None or not len(crit.e_parent):
                continue
            all_ends = np.frombuffer(crit.e_end, np.int64)
            kept = np.flatnonzero(all_ends > after)  # (the positions of the entries that ended after it)
            if cut_refs is not None:  # (and whose link the tree rule kept)
                kept = kept[~np.isin(kept | (p << 32), cut_refs)]
            ends.append(all_ends[kept])
            refs.append(kept | (p << 32))
            ids = crit.e_parent
            parents.append(np.frombuffer(ids, np.uint64)[kept] if type(ids) is array else [ids[e] for e in kept])
        #: parent id -> its group; a group's entries are ``first[g]:first[g + 1]`` of ``ends`` and ``refs``
        self.group, groups = _groups(parents)
        taken_ends = np.concatenate(ends) if ends else np.zeros(0, np.int64)
        order = np.lexsort((-taken_ends, groups))  # (stable: ties in the order read)
        self.first = array("q", [0])
        self.first.frombytes(np.cumsum(np.bincount(groups, minlength=len(self.group))).tobytes())
        self.ends = int64_array(taken_ends[order])
        self.refs = int64_array(np.concatenate(refs)[order] if refs else taken_ends)  # (no entries: both empty)

    def run(self, p: int, stretches: Any, end: int, low: int, acc: dict[tuple[int, int], int]) -> None:
        """Add a run of part ``p``'s stretches ((start, node) pairs, its root ending at ``end``), cut at
        ``low``, into ``acc`` ((part, node) -> ns), each span's own time walked again over the entries hanging
        from it (:meth:`own`), and theirs over the entries hanging from them, to any depth: in one loop over
        a stack of frames, never a recursion. An entry already on the walk's way down is not walked again
        (a cycle between processes the tree rule did not see: counted in ``looped``)."""
        stack: list[list[Any]] = [[_RUN, p, iter(stretches), end, low, -1]]
        on_way = self.on_way
        while stack:
            frame = stack[-1]
            if frame[0] == _RUN:
                pair = next(frame[2], None)
                if pair is None or frame[3] <= frame[4]:
                    stack.pop()  # (from the end backwards: the rest lie below the bound)
                    on_way.discard(frame[5])
                    continue
                start, n = pair
                high, frame[3] = frame[3], start
                low = frame[4]
                self._own(stack, frame[1], n, start if start > low else low, high, acc, -1)
                continue
            self._resume(stack, frame, acc)

    def _own(
        self, stack: list[list[Any]], p: int, n: int, low: int, high: int, acc: dict[tuple[int, int], int], ref: int
    ) -> None:
        """Span ``n`` of part ``p``'s own time ``(low, high]``: all its own where no entry hangs from it, else a
        frame walking the entries hanging from it (each time the one that ended last before the current
        point; each at most once, in the order of their ends, latest first, ties in the order they were
        read), the rest its own. ``ref``: the entry this frame walks for (-1: none)."""
        key = (p, n)
        g = self.group.get(self.parts[p].crit.node_ids[n])
        if g is None:
            acc[key] = acc.get(key, 0) + high - low
            if ref != -1:
                stack.append([_RUN, p, iter(()), 0, 0, ref])  # (closes the entry's place on the way down)
            return
        stack.append([_OWN, key, self.first[g], self.first[g + 1], low, high, ref])

    def _resume(self, stack: list[list[Any]], frame: list[Any], acc: dict[tuple[int, int], int]) -> None:
        """Go on with an own-time frame: to its next entry (pushed as a frame), or to its end."""
        _kind, key, i, stop, low, t, ref = frame
        ends, refs, parts, on_way = self.ends, self.refs, self.parts, self.on_way
        while i < stop and t > low:
            end = ends[i]
            i += 1
            if end > t:
                continue  # still running at the current point
            if end <= low:
                break
            entry = refs[i - 1]
            if entry in on_way:
                self.looped.add(entry)
                continue
            if t > end:
                acc[key] = acc.get(key, 0) + t - end
            q, e = entry >> 32, entry & 0xFFFFFFFF
            start = parts[q].crit.e_start[e]
            bound = start if start > low else low
            frame[2], frame[5] = i, bound
            on_way.add(entry)
            self._entry(stack, q, e, bound, acc, entry)
            return
        if t > low:
            acc[key] = acc.get(key, 0) + t - low
        stack.pop()
        on_way.discard(ref)

    def stored(self, p: int, off: int, count: int) -> Any:
        """Part ``p``'s stored run of ``count`` stretches from ``off``, as (start, node) pairs."""
        crit = self.parts[p].crit
        return zip(crit.a[off : off + count], crit.node[off : off + count], strict=True)

    def _entry(
        self, stack: list[list[Any]], q: int, e: int, low: int, acc: dict[tuple[int, int], int], ref: int
    ) -> None:
        """Entry ``e`` of part ``q`` walked from its end down to ``low`` (a frame pushed): its stretches where
        it was walked; for one with one leaf child (not walked per file), the walk's rule on that child here;
        else (a leaf) its own time."""
        crit = self.parts[q].crit
        end, row, start = crit.e_end[e], crit.e_node[e], crit.e_start[e]
        w = bisect_left(crit.w_entry, e)
        if w < len(crit.w_entry) and crit.w_entry[w] == e:
            stack.append([_RUN, q, self.stored(q, crit.w_off[w], crit.w_len[w]), end, low, ref])
            return
        k = crit.k_node[e]
        c_end = crit.k_end[e]
        if k == -1 or not start < c_end <= end:  # (a leaf; or a child still running at the entry's end, or
            self._own(stack, q, row, low, end, acc, ref)  # ended before it began: the entry's own time)
            return
        c_start = crit.k_start[e]
        c_low = c_start if c_start > start else start
        stretches = [(c_low, k)]
        if end > c_end:
            stretches.insert(0, (c_end, row))
        if c_low > start:
            stretches.append((start, row))
        stack.append([_RUN, q, iter(stretches), end, low, ref])


def critical_path(
    processes: Sequence[Any],
    steps: Sequence[Mapping[str, Any]],
    memo: Memo | None = None,
    cut: Any = None,
    selected: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The rollup (``--json`` ``critical_path``): per (worker group, phase, bucket) ``critical_s``,
    ``critical_share`` of the steps' wall and ``exposed_share`` (critical over exclusive seconds); per step
    its critical seconds by group and by "<group> <phase>", and the top stretch (group, rank, phase, seconds).
    ``memo``: an earlier look's per-step results, reused where they still hold (:class:`Memo`); ``cut``: the
    links between processes the tree rule cut (:func:`lens_rl.offline.read.crosslinks.cross_cut`: its
    ``refs`` hang from nothing; None: none cut, and a walk that meets an entry again on its way down passes
    it by); ``selected``: with ``--steps``, the parts cut to the selected steps
    (:func:`~lens_rl.offline.rollup.selected.cut_phases`): the exposed share is of their exclusive seconds."""
    wall = {row["step"]: row["wall_s"] for row in steps if not row.get("incomplete")}
    totals: dict[tuple[str, str, Any], int] = defaultdict(int)
    step_rows, todo, kept_ns = _gathered(processes, wall, memo)
    if todo:
        after = min((t[0] for t in todo if t[0] is not None), default=_BEFORE_ALL)
        index = _Index(processes, after, cut)
        labels: dict[Any, Any] = {}
        for _start, p, driver, step, runs, end in todo:
            by_key = _walked(index, p, runs)
            row = _step_row(step, by_key, totals, labels)
            step_rows.append(row)
            if memo is not None:
                memo.keep(driver, step, end, wall[step], by_key, row)
    if memo is not None:
        memo.add_totals(kept_ns, totals)
    _by_step(step_rows)
    walls = sum(wall[r["step"]] for r in step_rows)
    return {"phases": _phase_rows(processes if selected is None else selected, totals, walls), "steps": step_rows}


def _by_step(rows: list[dict[str, Any]]) -> None:
    """Step rows sorted by step (ints in order, then the others by type name)."""
    if all(type(r["step"]) is int for r in rows):  # (the key below, for ints alone)
        rows.sort(key=itemgetter("step"))
    else:
        rows.sort(key=lambda r: (type(r["step"]).__name__, r["step"]))


def _gathered(
    processes: Sequence[Any], wall: Mapping[Any, Any], memo: Memo | None
) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]], dict[int, int]]:
    """The drivers' complete steps: the rows of those an earlier look's ``memo`` still holds (and their
    critical ns per stretch key), and the others to walk, each (start, part, driver, step, runs, end)."""
    step_rows: list[dict[str, Any]] = []
    todo = []
    flats: list[Sequence[int]] = []  # the reused steps' [stretch key, ns, ...]
    reused = None if memo is None else memo.reused
    row_kept, flat_kept = step_rows.append, flats.append  # (a run's 100 k steps: a call less each)
    for p, part in enumerate(processes):
        crit = part.crit
        if crit is None or not part.is_driver:
            continue
        driver = repr(part.key)
        for step, runs in crit.steps.items():
            wall_s = wall.get(step, _MISSING)
            if wall_s is _MISSING:
                continue
            end = (runs[0][2] if runs[0][1] else None) if len(runs) == 1 else _end(runs)  # (one umbrella: inline)
            if reused is not None and (record := reused(driver, step, end, wall_s)) is not None:
                row_kept(record[5])  # (its row as the earlier look made it: no walk, no new row)
                flat_kept(record[4])  # (summed here only where the memo's sums are not known)
                continue
            start = min((crit.a[off + count - 1] for off, count, _e in runs if count), default=None)
            todo.append((start, p, driver, step, runs, end))
    return step_rows, todo, _kept_ns(memo, flats)


def _kept_ns(memo: Memo | None, flats: Sequence[Sequence[int]]) -> dict[int, int]:
    """The reused steps' critical ns per stretch key: from the memo's sums where it knows them, else summed
    from their records' ``flats``."""
    reused = None if memo is None else memo.reused_ns()
    return _summed(flats) if reused is None else reused


def _end(runs: Sequence[tuple[int, int, int]]) -> int | None:
    """When a step's walked umbrellas (``runs``: (first stretch, count, end ns)) ended (None: none walked)."""
    if len(runs) == 1:  # (one umbrella, the common case)
        return runs[0][2] if runs[0][1] else None
    return max((e for _off, count, e in runs if count), default=None)


def _summed(flats: Sequence[Sequence[int]]) -> dict[int, int]:
    """[stretch key, ns, ...] lists summed per stretch key, the keys in the order they first appear."""
    out: dict[int, int] = defaultdict(int)
    for packed in flats:
        flat = flat_numbers(packed)
        for k in range(0, len(flat), 2):
            out[flat[k]] += flat[k + 1]
    return out


def _phase_rows(processes: Sequence[Any], totals: Mapping[tuple[str, str, Any], int], walls: float) -> list[Any]:
    """The rollup's rows per (group, phase, bucket), longest first."""
    exclusive = _exclusive(processes)
    phases = []
    for (group, name, bucket), ns in totals.items():
        seconds = ns / 1e9
        excl = exclusive.get((group, name, bucket))
        phases.append(
            {
                "worker_group": group,
                "phase": name,
                "bucket": bucket,
                "critical_s": round(seconds, 6),
                "critical_share": round(seconds / walls, 6) if walls else None,
                "exposed_share": round(min(seconds / excl, 1.0), 6) if excl else None,
            }
        )
    phases.sort(key=lambda r: (-r["critical_s"], r["worker_group"], str(r["phase"]), str(r["bucket"])))
    return phases


def _walked(index: _Index, p: int, runs: Sequence[tuple[int, int, int]]) -> dict[tuple[str, int, str, Any], int]:
    """One step's walk from its umbrellas: its critical ns per (group, rank, phase, bucket)."""
    processes = index.parts
    per: dict[tuple[int, int], int] = {}
    for off, count, end in runs:
        index.run(p, index.stored(p, off, count), end, _BEFORE_ALL, per)
    by_key: dict[tuple[str, int, str, Any], int] = defaultdict(int)
    for (q, n), ns in per.items():
        owner = processes[q]
        node_crit = owner.crit
        name, bucket = node_crit.attrs[node_crit.node_attr[n]]
        by_key[(owner.key.group, owner.key.rank, name, bucket)] += ns
    return by_key


def _step_row(
    step: Any, by_key: Mapping[tuple[str, int, str, Any], int], totals: dict[Any, int], labels: dict[Any, Any]
) -> dict[str, Any]:
    """A step's row from its critical ns per (group, rank, phase, bucket), added into ``totals`` too;
    ``labels``: what each key is called, made once per rollup."""
    by_group: dict[str, int] = {}
    by_phase: dict[str, int] = {}
    top, top_ns, top_str = None, -1, ""
    for key, ns in by_key.items():
        label = labels.get(key)
        if label is None:
            group, _rank, name, bucket = key
            label = labels[key] = (group, f"{group} {name}", (group, name, bucket), str(key))
        group, phase = label[0], label[1]
        totals[label[2]] += ns
        by_group[group] = by_group.get(group, 0) + ns
        by_phase[phase] = by_phase.get(phase, 0) + ns
        if ns > top_ns or (ns == top_ns and label[3] > top_str):
            top, top_ns, top_str = key, ns, label[3]
    return {
        "step": step,
        "critical_s": round(sum(by_key.values()) / 1e9, 6),
        "by_group": {g: round(ns / 1e9, 6) for g, ns in sorted(by_group.items())},
        "by_phase": {k: round(ns / 1e9, 6) for k, ns in sorted(by_phase.items())},
        "top": None
        if top is None
        else {"worker_group": top[0], "rank": top[1], "phase": top[2], "seconds": round(top_ns / 1e9, 6)},
    }


def _exclusive(processes: Sequence[Any]) -> dict[tuple[str, str, Any], float]:
    """(group, phase, bucket) -> exclusive seconds of its final runs (bucketed phases only)."""
    out: dict[tuple[str, str, Any], float] = defaultdict(float)
    for part in processes:
        for (name, bucket), phase in part.phases.items():
            if bucket is not None:
                out[(part.key.group, name, bucket)] += phase.excl_ns / 1e9
    return out
