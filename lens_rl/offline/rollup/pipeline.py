"""The async pipeline: pools and roles, busy and idle, overlap, bubble, weight-sync pause, staleness, verdict.

* **Pools.** Each worker group is a pool with a role: ``rollout`` when most of its productive time is in
  generation-family phases, ``trainer`` when most is training or logprob, else ``other``; a process's
  ``rl.pool`` resource attribute wins.
* **Busy.** On the steady-state steps' wall (the driver's steps after ``warmup_steps``; without steps, the
  run's first to last span): per rank, the union of its productive spans over the wall; per pool, the mean
  over its ranks; ``idle`` = 1 - busy; ``imbalance`` = |idle(trainer) - idle(rollout)|. ``overlap``: where the
  trainer pool's union and the rollout pool's both cover, over the wall; ``bubble``: where no pool works.
  Every pause counts: idle is measured from the union of real spans, never from one window per version.
* **Weight sync.** Spans of the weight-sync family (:data:`lens_rl.buckets.WEIGHT_SYNC_PHASES`), on any
  process, as a union: ``total`` seconds, and ``pause``: the part during which the rollout pool generated
  nothing. Per step too.
* **Staleness** (:mod:`~lens_rl.offline.rollup.staleness`) and the **verdict**
  (:mod:`~lens_rl.offline.rollup.verdict`), per job and per window of :data:`WINDOW` steps.

Example::

    pipeline_row(processes, view, rows, warmup_steps=1, steps=None)["verdict"]["verdict"]   # "rollout-bound"
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from lens_rl.buckets import kind_of
from lens_rl.offline.read.intervals import covered, merge_intervals, pack, union_packed
from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.rollup.staleness import staleness
from lens_rl.offline.rollup.steps import steady_indexes, step_windows
from lens_rl.offline.rollup.verdict import verdict

__all__ = ["ROLES", "WINDOW", "pipeline_row", "roles_of"]

#: Steps per verdict window.
WINDOW = 20
ROLES = ("rollout", "trainer", "other")
_EMPTY = array("q")


def roles_of(processes: Sequence[ProcessPart]) -> dict[str, str]:
    """worker group -> its pool's role: ``rl.pool`` where a process of it says one, else by its productive
    exclusive time (generation-family phases most: rollout; training or logprob most: trainer; else other)."""
    by_kind: dict[str, dict[str, int]] = {}
    said: dict[str, str] = {}
    for part in processes:
        group = part.key.group
        pool = part.device.get("rl.pool")
        if isinstance(pool, str) and pool in ROLES:
            said.setdefault(group, pool)
        kinds = by_kind.setdefault(group, {})
        for (name, bucket), phase in part.phases.items():
            if bucket == "productive":
                kind = kind_of(name) or "other"
                kinds[kind] = kinds.get(kind, 0) + phase.excl_ns
    out = {}
    for group, kinds in by_kind.items():
        total = sum(kinds.values())
        gen, train = kinds.get("generation", 0), kinds.get("training", 0) + kinds.get("logprob", 0)
        role = "rollout" if total and 2 * gen > total else "trainer" if total and 2 * train > total else "other"
        out[group] = said.get(group, role)
    return out


def pipeline_row(
    processes: Sequence[ProcessPart],
    view: Sequence[ProcessPart],
    rows: list[dict[str, Any]],
    warmup_steps: int = 1,
    steps: tuple[int, int] | None = None,
) -> dict[str, Any] | None:
    """The ``pipeline`` section (the module docstring); None when no process has a productive span."""
    if not any(p.pipe is not None and len(p.pipe.productive) for p in processes):
        return None
    roles = roles_of(processes)
    windows = step_windows(list(view), steps)
    steady = [rows[n]["step"] for n in steady_indexes(rows, warmup_steps)]
    wall = merge_intervals(w for step in steady for w in windows.get(step, ()))
    if not wall:
        lo = min((p.first_ns for p in processes if p.first_ns is not None), default=None)
        hi = max((p.last_ns for p in processes if p.last_ns is not None), default=None)
        wall = [(lo, hi)] if lo is not None and hi is not None and hi > lo else []
    if not wall:
        return None
    ranks = {role: [p for p in processes if roles.get(p.key.group) == role] for role in ROLES}
    busy = {role: [_own(p) for p in ranks[role]] for role in ROLES}
    unions = {role: union_packed(busy[role]) for role in ROLES}
    unions["any"] = union_packed(unions[role] for role in ROLES)
    syncs = pack(merge_intervals((a, b) for p in processes if p.pipe for a, b, _ in p.pipe.syncs))
    consumed = [c for p in processes if p.pipe for c in p.pipe.consumed]
    bound = next((p.device.get("rl.max_staleness") for p in view if "rl.max_staleness" in p.device), None)
    job = _figures(wall, ranks, busy, unions, syncs)
    steady_set = set(steady)
    out: dict[str, Any] = {
        "wall_s": round(job["wall"] / 1e9, 6),
        "steps": len(steady),
        "pools": _pools(ranks, busy, wall, job["wall"]),
        "imbalance": job["imbalance"],
        "overlap": job["overlap"],
        "bubble": job["bubble"],
        "weight_sync": {
            "count": _inside(pack(wall), (s for p in processes if p.pipe for s in p.pipe.syncs)),
            "total_s": job["sync_s"],
            "pause_s": job["pause_s"],
            "pause_share": job["pause_share"],
        },
        "staleness": staleness((c for c in consumed if not steady_set or c[0] in steady_set), bound),
    }
    judged = verdict(job["idle"].get("trainer"), job["idle"].get("rollout"), job["pause_share"])
    by_step: dict[Any, list[Any]] = {}
    for c in consumed:
        by_step.setdefault(c[0], []).append(c)
    per_step = []
    for step in [r["step"] for r in rows if not r["incomplete"]]:
        step_wall = windows.get(step) or []
        if step_wall:
            mine = by_step.get(step, [])
            per_step.append(_step_row(step, step_wall, ranks, busy, unions, syncs, mine, bound))
    judged["windows"] = _windows(steady, windows, ranks, busy, unions, syncs)
    out["verdict"] = judged
    out["per_step"] = per_step
    return out


def _inside(wall: array, syncs: Any) -> int:
    """How many of the ``(start, end, step)`` spans ran within the merged, packed ``wall``."""
    return sum(1 for start, end, _ in syncs if end > start and covered([wall], [(start, end)]))


def _own(part: ProcessPart) -> array:
    return part.pipe.productive if part.pipe is not None else _EMPTY


def _figures(
    wall: list[tuple[int, int]],
    ranks: dict[str, list[ProcessPart]],
    busy: dict[str, list[array]],
    unions: dict[str, array],
    syncs: array,
) -> dict[str, Any]:
    """The figures over ``wall`` (intervals): per role busy and idle shares (the mean over its ranks),
    imbalance, overlap, bubble, weight-sync total and pause."""
    length = sum(b - a for a, b in wall)
    idle: dict[str, float] = {}
    shares: dict[str, float] = {}
    for role in ROLES:
        if ranks[role]:
            shares[role] = sum(covered([own], wall) for own in busy[role]) / len(busy[role]) / length
            idle[role] = 1 - shares[role]
    r, t = unions["rollout"], unions["trainer"]
    overlap = covered([r], wall) + covered([t], wall) - covered([r, t], wall) if len(r) and len(t) else 0
    anyone = covered([unions["any"]], wall)
    sync = covered([syncs], wall) if len(syncs) else 0
    pause = (covered([syncs, r], wall) - covered([r], wall)) if len(syncs) and ranks["rollout"] else None
    if len(syncs) and not ranks["rollout"]:
        pause = sync  # (no rollout pool: nothing generated during the sync)
    both = "trainer" in idle and "rollout" in idle
    return {
        "wall": length,
        "busy": shares,
        "idle": idle,
        "imbalance": round(abs(idle["trainer"] - idle["rollout"]), 6) if both else None,
        "overlap": round(overlap / length, 6),
        "bubble": round(max(length - anyone, 0) / length, 6),
        "sync_s": round(sync / 1e9, 6),
        "pause_s": None if pause is None else round(pause / 1e9, 6),
        "pause_share": None if pause is None else round(pause / length, 6),
    }


def _pools(
    ranks: dict[str, list[ProcessPart]], busy: dict[str, list[array]], wall: list[tuple[int, int]], length: int
) -> list[dict[str, Any]]:
    """One row per pool with ranks: its groups, busy and idle (means over its ranks), and each rank's busy."""
    out = []
    for role in ROLES:
        if not ranks[role]:
            continue
        each = [covered([own], wall) / length for own in busy[role]]
        mean = sum(each) / len(each)
        out.append(
            {
                "pool": role,
                "worker_groups": sorted({p.key.group for p in ranks[role]}),
                "busy": round(mean, 6),
                "idle": round(1 - mean, 6),
                "busy_s": round(mean * length / 1e9, 6),
                "ranks": [
                    {"worker_group": p.key.group, "rank": p.key.rank, "pid": p.key.pid, "busy": round(b, 6)}
                    for p, b in zip(ranks[role], each, strict=True)
                ],
            }
        )
    return out


def _step_row(
    step: Any,
    wall: list[tuple[int, int]],
    ranks: dict[str, list[ProcessPart]],
    busy: dict[str, list[array]],
    unions: dict[str, array],
    syncs: array,
    consumed: list[Any],
    bound: Any,
) -> dict[str, Any]:
    """One step's figures: busy per pool, overlap, bubble, weight-sync seconds and pause, staleness."""
    got = _figures(wall, ranks, busy, unions, syncs)
    stale = staleness(consumed, bound) or {}
    return {
        "step": step,
        "wall_s": round(got["wall"] / 1e9, 6),
        "busy": {role: round(value, 6) for role, value in got["busy"].items()},
        "overlap": got["overlap"],
        "bubble": got["bubble"],
        "sync_s": got["sync_s"],
        "pause_s": got["pause_s"],
        "staleness_mean": stale.get("mean"),
        "staleness_p90": stale.get("p90"),
        "staleness_max": stale.get("max"),
        "staleness_beyond": stale.get("beyond"),
    }


def _windows(
    steady: list[Any],
    windows: dict[Any, list[tuple[int, int]]],
    ranks: dict[str, list[ProcessPart]],
    busy: dict[str, list[array]],
    unions: dict[str, array],
    syncs: array,
) -> list[dict[str, Any]]:
    """The verdict per window of :data:`WINDOW` steady steps."""
    out = []
    for at in range(0, len(steady), WINDOW):
        chunk = steady[at : at + WINDOW]
        wall = merge_intervals(w for step in chunk for w in windows.get(step, ()))
        if not wall:
            continue
        got = _figures(wall, ranks, busy, unions, syncs)
        judged = verdict(got["idle"].get("trainer"), got["idle"].get("rollout"), got["pause_share"])
        out.append({"first_step": chunk[0], "last_step": chunk[-1], **judged})
    return out
