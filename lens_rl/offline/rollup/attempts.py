"""One job across its attempts: which step runs a later attempt superseded, the downtime between attempts,
and how each attempt ended.

A run's processes carry ``rl.attempt`` (their headers say it). Across attempts:

* **Re-runs.** A step number that a later attempt runs again was lost: its earlier runs are *superseded*
  (:func:`superseded_steps`, found before the files are reduced, from the view's own ``rl.step`` values)
  and reduced apart, as wasted time (reason ``rerun``) on every process that ran them. The final run of
  each step is the one every other figure uses.
* **Downtime.** The gap between an attempt's last recorded end (any process) and the next attempt's start
  (its earliest ``rl.job`` start (a launch span starts it), header ``since`` or span) is wasted, reason
  ``restart``; attempts that overlap (the old workers still writing as the new driver starts) count none.
* **How it ended.** ``error`` when the driver's ``rl.job`` ended with status ERROR (its exception's type and
  message are kept), ``shutdown`` when it ended otherwise, ``lost`` when there is none (killed, OOM).

Example::

    superseded_steps({0: {0, 1, 2, 3}, 1: {2, 3, 4}})    # {0: frozenset({2, 3})}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from lens_rl.buckets import goodput_of
from lens_rl.offline.read.parts import ProcessPart, step_key
from lens_rl.offline.rollup.sampled import estimated_goodput

__all__ = ["Attempts", "attempts_of", "superseded_steps"]


def superseded_steps(steps: Mapping[int, set[Any]]) -> dict[int, frozenset[Any]]:
    """attempt -> the steps it ran that a later attempt ran again (attempts without any left out)."""
    out: dict[int, frozenset[Any]] = {}
    later: set[Any] = set()
    for attempt in sorted(steps, reverse=True):
        lost = frozenset(steps[attempt] & later)
        if lost:
            out[attempt] = lost
        later |= steps[attempt]
    return out


class Attempts:
    """The attempts of a run: one row each (the ``--json`` ``attempts``), the downtime between them (ns),
    the job's first start and last end over all of them, and whether any two overlap."""

    __slots__ = ("rows", "restart_ns", "start_ns", "end_ns", "overlapping")

    def __init__(
        self, rows: list[dict[str, Any]], restart_ns: int, start_ns: int | None, end_ns: int | None, overlapping: bool
    ) -> None:
        self.rows = rows
        self.restart_ns = restart_ns
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.overlapping = overlapping

    @property
    def several(self) -> bool:
        return len(self.rows) > 1


def _ended(drivers: Sequence[ProcessPart]) -> tuple[str, dict[str, str] | None]:
    for part in drivers:
        if part.job_error is not None:
            return "error", part.job_error
    return ("shutdown", None) if any(part.jobs for part in drivers) else ("lost", None)


def _goodput(drivers: Sequence[ProcessPart], members: Sequence[ProcessPart], wall: int) -> float | None:
    """An attempt's goodput: its drivers' productive time over its wall, else (no driver) its processes'
    resource seconds'; a sampled run's estimated as the job's is (:mod:`lens_rl.offline.rollup.sampled`)."""
    if drivers:
        if wall <= 0:
            return None
        return estimated_goodput(drivers, sum(p.bucket_ns["productive"] for p in drivers) / wall, wall)
    summed: dict[str, float] = defaultdict(float)
    for p in members:
        for bucket, seconds in p.seconds().items():
            summed[bucket] += seconds
    return estimated_goodput(members, goodput_of(summed), sum(summed.values()) * 1e9)


def attempts_of(processes: Sequence[ProcessPart], view: Sequence[ProcessPart], is_driver: bool) -> Attempts:
    """The run's attempts, from its process parts (``view``: the job view's parts, the drivers when there are
    any). Each row: ``attempt``, ``start_s`` (from the job's start), ``wall_s``, ``first_step``,
    ``last_step``, ``resumed_from_step`` (a later attempt's first step), ``rerun_steps`` (the steps it ran
    that a later attempt ran again), ``rerun_s``, ``downtime_before_s``, ``ended``, ``error`` (when it
    ended in one), ``goodput``."""
    members: dict[int, list[ProcessPart]] = defaultdict(list)
    for part in processes:
        members[part.key.attempt].append(part)
    viewed: dict[int, list[ProcessPart]] = defaultdict(list)
    for part in view:
        viewed[part.key.attempt].append(part)
    spans: dict[int, tuple[int, int]] = {}
    for attempt, parts in members.items():
        firsts = [t for t in (p.first_ns for p in parts) if t is not None]
        lasts = [t for t in (p.last_ns for p in parts) if t is not None]
        if firsts and lasts:
            spans[attempt] = (min(firsts), max(lasts))
    order = sorted(spans)
    start = min((spans[a][0] for a in order), default=None)
    end = max((spans[a][1] for a in order), default=None)
    rows, restart_ns, overlapping, previous_end = [], 0, False, None
    for n, attempt in enumerate(order):
        lo, hi = spans[attempt]
        gap = 0
        if previous_end is not None:
            if lo < previous_end:
                overlapping = True
            else:
                gap = lo - previous_end
        restart_ns += gap
        previous_end = hi if previous_end is None else max(previous_end, hi)
        parts = viewed.get(attempt, [])
        steps = sorted({s for p in parts for s in (*p.steps, *p.rerun_steps) if type(s) is int}, key=step_key)
        ended, error = _ended([p for p in members[attempt] if p.is_driver])
        wall = hi - lo
        row: dict[str, Any] = {
            "attempt": attempt,
            "start_s": round((lo - start) / 1e9, 6) if start is not None else None,
            "wall_s": round(wall / 1e9, 6),
            "first_step": steps[0] if steps else None,
            "last_step": steps[-1] if steps else None,
            "resumed_from_step": steps[0] if steps and n > 0 else None,
            "rerun_steps": sorted({s for p in parts for s in p.rerun_steps}, key=step_key),
            "rerun_s": round(sum(p.rerun_ns for p in parts) / 1e9, 6),
            "downtime_before_s": round(gap / 1e9, 6),
            "ended": ended,
            "goodput": _goodput(parts if is_driver else [], members[attempt], wall),
        }
        if error is not None:
            row["error"] = error
        rows.append(row)
    return Attempts(rows, restart_ns, start, end, overlapping)
