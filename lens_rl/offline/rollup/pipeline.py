"""The async pipeline: pools and roles, busy and idle, overlap, bubble, weight-sync pause, staleness, verdict.

* **Pools.** Each worker group is a pool with a role: ``rollout`` when most of its productive time is in
  generation-family phases, ``trainer`` when most is training or logprob, else ``other``; a process's
  ``rl.pool`` resource attribute wins (:mod:`~lens_rl.offline.rollup.pools`).
* **Busy.** On the steady-state steps' wall (the driver's steps after ``warmup_steps``; where the warm-up
  leaves no step of those selected, the selected steps' wall; without steps, the run's first to last span): per rank, the union of its productive spans over the wall (a rank that ran as
  several processes, an actor Ray restarted say, is one rank: their spans united); per pool, the mean over its
  ranks; ``idle`` = 1 - busy; ``imbalance`` = |idle(trainer) - idle(rollout)|. ``overlap``: where the
  trainer pool's union and the rollout pool's both cover, over the wall; ``bubble``: where no pool works.
  Every pause counts: idle is measured from the union of real spans, never from one window per version.
* **Weight sync.** Spans of the weight-sync family (:data:`lens_rl.buckets.WEIGHT_SYNC_PHASES`), on any
  process, as a union: ``count`` (a sync nested in another's time counted once), ``total`` seconds, and
  ``pause``: the part during which the rollout pool generated nothing. Per step too.
* **Staleness** (:mod:`~lens_rl.offline.rollup.staleness`) and the **verdict**
  (:mod:`~lens_rl.offline.rollup.verdict`), per job and per window of :data:`WINDOW` steps; per step too, with
  that step's ``imbalance`` (the one rule, :func:`lens_rl.buckets.verdict_name`, on that step's figures alone).

Example::

    pipeline_row(processes, view, rows, warmup_steps=1, steps=None)["verdict"]["verdict"]   # "rollout-bound"
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from lens_rl.offline.read.intervals import coverage, merged_packed, pack, union_packed
from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.rollup.pipe_memo import UNIONS, PipeMemo, Windows, tail
from lens_rl.offline.rollup.pools import ROLES, roles_of
from lens_rl.offline.rollup.staleness import placed, staleness
from lens_rl.offline.rollup.steps import steady_indexes, step_windows, warmup_of
from lens_rl.offline.rollup.verdict import verdict, verdict_name

__all__ = ["ROLES", "WINDOW", "pipeline_row", "roles_of"]

#: Steps per verdict window.
WINDOW = 20


def pipeline_row(
    processes: Sequence[ProcessPart],
    view: Sequence[ProcessPart],
    rows: list[dict[str, Any]],
    warmup_steps: int = 1,
    steps: tuple[int, int] | None = None,
    memo: PipeMemo | None = None,
) -> dict[str, Any] | None:
    """The ``pipeline`` section (the module docstring); None when no process has a productive span. Per-step
    figures are computed for every step at once (:func:`~lens_rl.offline.read.intervals.coverage`); ``memo``:
    each array's coverage of the windows an earlier look read (:class:`~.pipe_memo.PipeMemo`: those that ended
    before what is new are taken as kept, the rest computed from the arrays' tails), this look's left in it."""
    if not any(p.pipe is not None and len(p.pipe.productive) for p in processes):
        return None
    roles = roles_of(processes)
    windows = step_windows(list(view), steps)
    steady = [
        rows[n]["step"] for n in steady_indexes(rows, warmup_of(view, warmup_steps)) if windows.get(rows[n]["step"])
    ]
    wall = _wall(processes, windows, steady)
    if not wall:
        return None
    ranks = {role: _ranks([p for p in processes if roles.get(p.key.group) == role]) for role in ROLES}
    wl, wh = np.frombuffer(wall, np.int64)[0::2], np.frombuffer(wall, np.int64)[1::2]
    each = Windows(rows, windows, steady, wl)  # (the wall's intervals: as many as its starts)
    arrays = each.keyed(_arrays(processes, ranks, each.reuse(memo, _keys(ranks))), ROLES)
    consumed = placed([c for p in processes if p.pipe for c in p.pipe.consumed], windows)
    bound = next((p.device.get("rl.max_staleness") for p in view if "rl.max_staleness" in p.device), None)
    length = int((wh - wl).sum())
    covered_ns: dict[int, int] = {}  # (each array's coverage of the wall, read once: the pools reuse it)

    def cover(packed: array) -> int:
        got = covered_ns.get(id(packed))
        if got is None:
            got = covered_ns[id(packed)] = each.of_wall(packed, wl, wh)
        return got

    job = _figures(cover, length, ranks, arrays)
    steady_set = set(steady)
    counted = steady_set or set(windows)  # (what the staleness reads: the wall's steps; all without steps)
    per_step, chunks = _per_step(each, steady, ranks, arrays, consumed, bound)
    judged = verdict(job["idle"].get("trainer"), job["idle"].get("rollout"), job["pause_share"])
    judged["windows"] = chunks
    if memo is not None:
        each.keep(memo)
    return {
        "wall_s": round(length / 1e9, 6),
        "steps": len(steady),
        "pools": _pools(ranks, arrays, cover, length),
        "imbalance": _r(job["imbalance"]),
        "overlap": _r(job["overlap"]),
        "bubble": _r(job["bubble"]),
        "weight_sync": _weight_sync(wall, processes, job),
        "staleness": staleness((c for c in consumed if not counted or c[0] in counted), bound),
        "verdict": judged,
        "per_step": per_step,
    }


def _wall(processes: Sequence[ProcessPart], windows: dict[Any, Any], steady: list[Any]) -> array:
    """The wall the figures are over, merged and packed: the steady steps' windows; with none, the selected
    steps' windows, warm-up ones too (never time outside them); without steps, the run's first to last span."""
    steady_windows = [w for step in steady for w in windows.get(step, ())]
    wall = merged_packed([a for a, _ in steady_windows], [b for _, b in steady_windows])
    if not wall:
        chosen = [w for each in windows.values() for w in each]
        wall = merged_packed([a for a, _ in chosen], [b for _, b in chosen])
    if not wall:
        lo = min((p.first_ns for p in processes if p.first_ns is not None), default=None)
        hi = max((p.last_ns for p in processes if p.last_ns is not None), default=None)
        wall = pack([(lo, hi)] if lo is not None and hi is not None and hi > lo else [])
    return wall


def _weight_sync(wall: array, processes: Sequence[ProcessPart], job: dict[str, Any]) -> dict[str, Any]:
    """The job's ``weight_sync`` figures: the syncs within the wall (one nested in another's counted once),
    their seconds and the pause."""
    return {
        "count": _inside(wall, (s for p in processes if p.pipe for s in p.pipe.syncs)),
        "total_s": round(job["sync"] / 1e9, 6),
        "pause_s": None if job["pause"] is None else round(job["pause"] / 1e9, 6),
        "pause_share": _r(job["pause_share"]),
    }


def _r(value: Any) -> float | None:
    return None if value is None else round(float(value), 6)


#: a rank: the processes it ran as (one, or more where it was restarted: a new pid), the earliest first
Rank = list[ProcessPart]


def _ranks(processes: Sequence[ProcessPart]) -> list[Rank]:
    """``processes`` by rank: those of one (group, rank) together (a restarted actor's pids), in order of
    their first process, each rank's by start; a process of third-party spans alone (a vLLM process its rank
    started: :attr:`~lens_rl.offline.read.parts.ProcessPart.borrowed`) is its caller's, as in the ranks table."""
    by: dict[tuple[str, int, bool], Rank] = {}
    for part in processes:
        if part.borrowed:
            continue
        by.setdefault((part.key.group, part.key.rank, part.key.driver), []).append(part)
    return [sorted(each, key=_start) for each in by.values()]


def _start(part: ProcessPart) -> tuple[int, int]:
    return (0 if part.first_ns is None else 1, part.first_ns or 0)


def _keys(ranks: dict[str, list[Rank]]) -> list[tuple[Any, ...]]:
    """The arrays' keys, in :meth:`Windows.keyed`'s order: each rank's busy time by role and rank, then the
    unions by name (:data:`~.pipe_memo.UNIONS`)."""
    keys = [("busy", role, r[0].key.group, r[0].key.rank, r[0].key.driver) for role in ROLES for r in ranks[role]]
    return keys + [(name,) for name in UNIONS]


def _arrays(processes: Sequence[ProcessPart], ranks: dict[str, list[Rank]], since: int | None = None) -> dict[str, Any]:
    """The packed interval arrays the figures are read from: each rank's busy time, each pool's union, any
    pool's, rollout and trainer's, the weight syncs' and syncs with rollout's; ``since``: only the windows
    from it on are read from them (the busy times cut to what reaches it: their unions a few intervals)."""
    busy = {role: [_own(r) if since is None else tail(_own(r), since) for r in ranks[role]] for role in ROLES}
    unions = {role: union_packed(busy[role]) for role in ROLES}
    spans = [s for p in processes if p.pipe for s in p.pipe.syncs]
    syncs = merged_packed([s[0] for s in spans], [s[1] for s in spans])
    return {
        "busy": busy,
        "rollout": unions["rollout"],
        "trainer": unions["trainer"],
        "any": union_packed(unions[role] for role in ROLES),
        "both": union_packed([unions["rollout"], unions["trainer"]]),
        "syncs": syncs,
        "syncs_rollout": union_packed([syncs, unions["rollout"]]),
        "has_rollout": bool(ranks["rollout"]),
    }


def _inside(wall: array, syncs: Any) -> int:
    """How many of the ``(start, end, step)`` spans ran within the merged, packed ``wall``, a span nested in
    another's time (an ``update_weights`` inside ``transfer_and_update_weights``, on any process) counted once,
    with the outer one."""
    spans = sorted(((start, -end) for start, end, _ in syncs if end > start))  # (by start, the longest first)
    if not spans:
        return 0
    starts = np.array([a for a, _ in spans], np.int64)
    ends = -np.array([b for _, b in spans], np.int64)
    before = np.maximum.accumulate(ends)  # (the latest end of the spans up to each: one ending there holds it)
    outer = np.concatenate(([True], ends[1:] > before[:-1]))
    return int((coverage(wall, starts[outer], ends[outer]) > 0).sum())


def _own(rank: Rank) -> array:
    """A rank's productive time: the union of its processes'."""
    return union_packed(p.pipe.productive for p in rank if p.pipe is not None)


def _figures(cover: Any, length: Any, ranks: dict[str, list[Rank]], arrays: dict[str, Any]) -> dict[str, Any]:
    """The figures over a wall of ``length`` ns, ``cover(packed)`` the ns of it an array covers: scalars for one
    wall, numpy arrays for one per step alike. Per role busy and idle shares (the mean over its ranks),
    imbalance, overlap, bubble, weight-sync ns and the pause (ns and share of the wall)."""
    idle: dict[str, Any] = {}
    shares: dict[str, Any] = {}
    safe = np.maximum(length, 1)
    for role in ROLES:
        if ranks[role]:
            shares[role] = sum(cover(own) for own in arrays["busy"][role]) / len(ranks[role]) / safe
            idle[role] = 1 - shares[role]
    r, t = cover(arrays["rollout"]), cover(arrays["trainer"])
    overlap = r + t - cover(arrays["both"])
    sync = cover(arrays["syncs"]) if len(arrays["syncs"]) else 0 * r
    pause = None
    if len(arrays["syncs"]):
        pause = cover(arrays["syncs_rollout"]) - r if arrays["has_rollout"] else sync
    both = "trainer" in idle and "rollout" in idle
    return {
        "busy": shares,
        "idle": idle,
        "imbalance": abs(idle["trainer"] - idle["rollout"]) if both else None,
        "overlap": overlap / safe,
        "bubble": np.maximum(length - cover(arrays["any"]), 0) / safe,
        "sync": sync,
        "pause": pause,
        "pause_share": None if pause is None else pause / safe,
    }


def _pools(ranks: dict[str, list[Rank]], arrays: dict[str, Any], cover: Any, length: int) -> list[dict[str, Any]]:
    """One row per pool with ranks: its groups, busy and idle (means over its ranks), and each rank's busy."""
    out = []
    for role in ROLES:
        if not ranks[role]:
            continue
        each = [cover(own) / length for own in arrays["busy"][role]]
        mean = sum(each) / len(each)
        out.append(
            {
                "pool": role,
                "worker_groups": sorted({r[0].key.group for r in ranks[role]}),
                "busy": round(mean, 6),
                "idle": round(1 - mean, 6),
                "busy_s": round(mean * length / 1e9, 6),
                "ranks": [  # (a restarted rank's pid: its latest)
                    {"worker_group": r[0].key.group, "rank": r[0].key.rank, "pid": r[-1].key.pid, "busy": round(b, 6)}
                    for r, b in zip(ranks[role], each, strict=True)
                ],
            }
        )
    return out


def _per_step(
    each: Windows,
    steady: list[Any],
    ranks: dict[str, list[Rank]],
    arrays: dict[str, Any],
    consumed: list[Any],
    bound: Any,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every complete step's figures (busy per pool, imbalance, overlap, bubble, sync and pause, staleness, the
    step's own verdict) and the verdict per window of :data:`WINDOW` steady steps, each array's coverage of every
    step read at once (the verdicts: the rule's name per step from those columns, no dict of figures each)."""
    order = each.order
    if not order:
        return [], []
    owners, los, his = each.owners, each.los, each.his
    one = len(owners) == len(order)  # (then owners is every step's index, in order)
    memo: dict[int, Any] = {}

    def cover(packed: array) -> Any:
        got = memo.get(id(packed))
        if got is None:
            covered = each.of(packed)  # (a window a step, the common case: each step's sum is its one window's)
            got = covered.astype(np.float64) if one else np.bincount(owners, covered, minlength=len(order))
            memo[id(packed)] = got
        return got

    walls = np.bincount(owners, (his - los).astype(np.float64), minlength=len(order))  # type: ignore[operator]
    got = _figures(cover, walls, ranks, arrays)
    shares = {k: _listed(got[k], 1) for k in ("overlap", "bubble")}
    seconds = {k: _listed(got[k], 1e9) for k in ("sync", "pause")}
    busy = {role: _listed(value, 1) for role, value in got["busy"].items()}
    none: list[Any] = [None] * len(order)
    roles = list(busy)  # (each step's busy, its staleness: made column by column, zipped per step)
    busies = _dicts(roles, list(busy.values()))
    stales = _stales(order, consumed, bound)
    trainer, rollout, pause = (
        none if value is None else np.asarray(value, np.float64).tolist()
        for value in (got["idle"].get("trainer"), got["idle"].get("rollout"), got["pause_share"])
    )
    columns: list[list[Any]] = [
        order,
        _listed(walls, 1e9) or none,
        busies if roles else [{} for _ in order],
        _listed(got["imbalance"], 1) or none,
        shares["overlap"] or none,
        shares["bubble"] or none,
        seconds["sync"] or none,
        seconds["pause"] or none,
        stales or [_NO_STALENESS] * len(order),
        [verdict_name(t, r, p) for t, r, p in zip(trainer, rollout, pause, strict=True)],
    ]
    return _step_dicts(columns), _chunks(order, steady, walls, cover, ranks, arrays)


def _stales(order: list[Any], consumed: list[Any], bound: Any) -> list[Any] | None:
    """Each step's staleness figures, from the versions consumed in it (None: nothing consumed)."""
    by_step: dict[Any, list[Any]] = {}
    for c in consumed:
        by_step.setdefault(c[0], []).append(c)
    return [_stale(by_step.get(step), bound) for step in order] if by_step else None


def _step_dicts(columns: list[list[Any]]) -> list[dict[str, Any]]:
    """The per-step rows, zipped from their columns (step, wall, busy, imbalance, overlap, bubble, sync, pause,
    staleness, verdict)."""
    return [
        {
            "step": step,
            "wall_s": wall_s,
            "busy": busied,
            "imbalance": imbalance,
            "overlap": overlap,
            "bubble": bubble,
            "sync_s": sync_s,
            "pause_s": pause_s,
            "staleness_mean": stale[0],
            "staleness_p90": stale[1],
            "staleness_max": stale[2],
            "staleness_beyond": stale[3],
            "verdict": judged,
        }
        for step, wall_s, busied, imbalance, overlap, bubble, sync_s, pause_s, stale, judged in zip(
            *columns, strict=True
        )
    ]


_NO_STALENESS = (None, None, None, None)


def _dicts(keys: list[str], columns: list[Any]) -> list[dict[str, Any]]:
    """One dict per row of ``columns`` (a column per key, the keys in order): made by a dict display where the
    keys are the pools' few (a run's 10 k steps: 8 -> 2 ms against ``dict(zip(...))`` per row)."""
    if len(keys) == 1:
        (a,), (ca,) = keys, columns
        return [{a: x} for x in ca]
    if len(keys) == 2:
        (a, b), (ca, cb) = keys, columns
        return [{a: x, b: y} for x, y in zip(ca, cb, strict=True)]
    if len(keys) == 3:
        (a, b, c), (ca, cb, cc) = keys, columns
        return [{a: x, b: y, c: z} for x, y, z in zip(ca, cb, cc, strict=True)]
    return [dict(zip(keys, values, strict=True)) for values in zip(*columns, strict=True)]


def _stale(consumed: list[Any] | None, bound: Any) -> tuple[Any, Any, Any, Any]:
    """One step's staleness (mean, p90, max, beyond) from what it consumed; Nones where it consumed none."""
    got = (staleness(consumed, bound) or {}) if consumed else {}
    return got.get("mean"), got.get("p90"), got.get("max"), got.get("beyond")


def _listed(value: Any, unit: float) -> list[float] | None:
    """A per-step numpy array (or a scalar for every step) over ``unit``, rounded to 6 places, as floats."""
    if value is None:
        return None
    return np.round(np.asarray(value, np.float64) / unit, 6).tolist()  # type: ignore[no-any-return]


def _chunks(
    order: list[Any], steady: list[Any], walls: Any, cover: Any, ranks: Any, arrays: Any
) -> list[dict[str, Any]]:
    """The verdict per window of :data:`WINDOW` steady steps: each array's per-step coverage summed per window."""
    at = {step: n for n, step in enumerate(order)}
    picked = np.array([at[s] for s in steady if s in at], np.int64)
    if not len(picked):
        return []
    starts = np.arange(0, len(picked), WINDOW)
    summed = lambda values: np.add.reduceat(np.asarray(values, np.float64)[picked], starts)  # noqa: E731
    got = _figures(lambda packed: summed(cover(packed)), summed(walls), ranks, arrays)
    trainer, rollout, pause = got["idle"].get("trainer"), got["idle"].get("rollout"), got["pause_share"]
    out = []
    for k, first in enumerate(starts.tolist()):
        last = min(first + WINDOW, len(picked)) - 1
        judged = verdict(
            None if trainer is None else float(trainer[k]),
            None if rollout is None else float(rollout[k]),
            None if pause is None else float(pause[k]),
        )
        out.append({"first_step": order[picked[first]], "last_step": order[picked[last]], **judged})
    return out
