"""Stragglers: per worker group, step and phase, a rank whose exclusive time in a compute phase exceeds the
group's median by more than 20 % and by more than 3 median absolute deviations; persistent when flagged in
at least half of its steps. Degrading ranks: per (group, rank, phase), the median over the latest window
of steps against that rank's own best window, score = best / latest; under 0.8 a rank is degrading even
when every rank slows alike (which the cross-rank rule cannot see). Idle phases (collective waits: ``wait``, ``barrier``) are not compared: in a
synchronous collective the ranks even out there, so compute is what tells them apart.

Example::

    stragglers(parts, steps=None)["persistent"]    # [{"worker_group", "rank", "steps_flagged", "of_steps"}]
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lens_rl.offline.read.parts import ProcessPart, Series, median, step_key
from lens_rl.offline.rollup.bulk import window_medians

__all__ = ["DEGRADING_SCORE", "DEGRADING_WINDOW", "STRAGGLER_MADS", "STRAGGLER_RATIO", "in_range", "stragglers"]

STRAGGLER_RATIO = 1.2
STRAGGLER_MADS = 3.0
#: Steps per window of the degrading score, and the score under which a rank is degrading.
DEGRADING_WINDOW = 20
DEGRADING_SCORE = 0.8


def in_range(step: Any, steps: tuple[int, int] | None) -> bool:
    """Whether ``step`` is in the selection ``steps`` (A, B inclusive; None: every step)."""
    return steps is None or (isinstance(step, int) and steps[0] <= step <= steps[1])


def stragglers(
    parts: list[ProcessPart], steps: tuple[int, int] | None, window: int = DEGRADING_WINDOW
) -> dict[str, Any]:
    """The SPEC's straggler rule, one (group, phase) column at a time over the parts' own
    step -> ns maps (no run-sized table: a 1,000-rank, 100 k-step run stays in memory)."""
    per_step: list[dict[str, Any]] = []
    degrading: list[dict[str, Any]] = []
    flagged: dict[tuple[str, int], set[Any]] = defaultdict(set)
    rank_steps: dict[tuple[str, int], list[Mapping[Any, int]]] = defaultdict(list)
    for (group, phase), by_rank_maps in _columns(parts).items():
        maps = {rank: _rank_map(found) for rank, found in by_rank_maps.items()}
        for rank, by_step in maps.items():
            rank_steps[(group, rank)].append(by_step)
            row = _degrading_row(group, rank, phase, by_step, steps, window)
            if row is not None:
                degrading.append(row)
        if len(maps) >= 2:
            _flag_column(group, phase, maps, steps, per_step, flagged)
    per_step.sort(key=lambda s: (s["worker_group"], step_key(s["step"]), s["phase"], s["rank"]))
    persistent = []
    for (group, rank), steps_flagged in sorted(flagged.items()):
        of_steps = _of_steps(rank_steps[(group, rank)], steps)
        if of_steps and len(steps_flagged) * 2 >= of_steps:
            persistent.append(
                {"worker_group": group, "rank": rank, "steps_flagged": len(steps_flagged), "of_steps": of_steps}
            )
    degrading.sort(key=lambda d: (d["score"], d["worker_group"], d["rank"], str(d["phase"])))
    return {"per_step": per_step, "persistent": persistent, "degrading": degrading}


def _columns(parts: list[ProcessPart]) -> dict[tuple[str, str], dict[int, list[Mapping[Any, int]]]]:
    """The workers' compute phases as (group, phase) -> rank -> its step -> ns maps (one per pid it ran as)."""
    columns: dict[tuple[str, str], dict[int, list[Mapping[Any, int]]]] = defaultdict(dict)
    for part in parts:
        if part.is_driver:
            continue
        group, rank = part.key.group, part.key.rank
        for phase, by_step in part.compute.items():
            columns[(group, phase)].setdefault(rank, []).append(by_step)
    return columns


def _rank_map(found: list[Mapping[Any, int]]) -> Mapping[Any, int]:
    """A rank's step -> ns map: a rank seen under several pids (a restart) has its time added up (a Series
    still where every step is an int: its ranks then compare as one table)."""
    merged = found[0]
    for by_step in found[1:]:
        merged = Series.merged(merged, by_step)
    return merged


def _degrading_row(
    group: str, rank: int, phase: str, by_step: Mapping[Any, int], steps: tuple[int, int] | None, window: int
) -> dict[str, Any] | None:
    """A rank's phase's row in ``degrading`` when its score is under :data:`DEGRADING_SCORE`, else None."""
    score = _degrading(by_step, steps, window)
    if score is None or score[0] >= DEGRADING_SCORE:
        return None
    return {
        "worker_group": group,
        "rank": rank,
        "phase": phase,
        "score": round(score[0], 6),
        "best_s": round(score[1] / 1e9, 6),
        "latest_s": round(score[2] / 1e9, 6),
        "window": window,
    }


def _flag_column(
    group: str,
    phase: str,
    maps: Mapping[int, Mapping[Any, int]],
    steps: tuple[int, int] | None,
    per_step: list[dict[str, Any]],
    flagged: dict[tuple[str, int], set[Any]],
) -> None:
    """The straggler rule over one (group, phase) column of two ranks or more, step by step."""
    aligned = _aligned(maps)
    if aligned is not None:  # every rank has the same integer steps: every step at once, as a table
        _flag_table(*aligned, steps, group, phase, per_step, flagged)
        return
    for step in set().union(*(m.keys() for m in maps.values())):
        if not in_range(step, steps):
            continue
        present = [rank for rank, m in maps.items() if step in m]
        if len(present) >= 2:
            _flag(step, group, phase, present, [maps[rank][step] for rank in present], per_step, flagged)


def _of_steps(maps: Sequence[Mapping[Any, int]], steps: tuple[int, int] | None) -> int:
    """How many distinct steps (of the selection ``steps``) a rank's compute phases ran."""
    if steps is None and all(type(m) is Series for m in maps):  # (integer steps, each once a Series)
        return len(set().union(*(m.steps for m in maps)))  # type: ignore[attr-defined]
    return len({step_key(step) for m in maps for step in m if in_range(step, steps)})


def _degrading(by_step: Mapping[Any, int], steps: tuple[int, int] | None, window: int) -> tuple[float, int, int] | None:
    """(score, best window's median, latest window's median) of one rank's phase over its integer steps in
    order: windows of ``window`` steps counted back from the latest; None with fewer than two windows."""
    if isinstance(by_step, Series) and steps is None:  # its steps sorted already: its values as they are
        values: Any = by_step.ns
    else:
        keys = sorted(s for s in by_step if type(s) is int and in_range(s, steps))
        values = [by_step[s] for s in keys]
    if window < 1 or len(values) < 2 * window:
        return None
    medians = window_medians(values, window)
    latest, best = medians[0], min(medians)
    if latest <= 0:
        return None
    return best / latest, int(best), int(latest)


def _flag(
    step: Any,
    group: str,
    phase: str,
    ranks: Sequence[int],
    values: list[float],
    per_step: list[dict[str, Any]],
    flagged: dict[tuple[str, int], set[Any]],
) -> None:
    """The SPEC's straggler rule at one step of one (group, phase): each rank over 1.2x the median
    and more than 3 MADs above it is flagged."""
    med = median(values)
    top = max(values)
    if med <= 0 or top <= STRAGGLER_RATIO * med:  # no rank over the ratio: no MAD needed
        return
    mad = median([abs(v - med) for v in values])
    if top - med <= STRAGGLER_MADS * mad:  # not even the slowest is that far out
        return
    for rank, value in zip(ranks, values, strict=True):
        if value > STRAGGLER_RATIO * med and value - med > STRAGGLER_MADS * mad:
            _flagged(step, group, rank, phase, value / med, per_step, flagged)


def _flagged(
    step: Any,
    group: str,
    rank: int,
    phase: str,
    ratio: float,
    per_step: list[dict[str, Any]],
    flagged: dict[tuple[str, int], set[Any]],
) -> None:
    """One straggler: its row (``ratio``: its time over the median) and its step among its rank's flagged."""
    per_step.append(
        {"step": step, "worker_group": group, "rank": rank, "phase": phase, "over_median": round(ratio - 1.0, 6)}
    )
    flagged[(group, rank)].add(step_key(step))


def _flag_table(
    ranks: list[int],
    step_list: array,
    value_arrays: list[array],
    steps: tuple[int, int] | None,
    group: str,
    phase: str,
    per_step: list[dict[str, Any]],
    flagged: dict[tuple[str, int], set[Any]],
) -> None:
    """:func:`_flag` at every step of a (group, phase) whose ranks share their integer steps, a column per
    step of a (rank x step) table. The arithmetic is :func:`_flag`'s, value for value: an odd count of ranks
    keeps the median an integer as ``median`` does, and ns are exact in float64 (under 2**53, 104 days)."""
    if not step_list:
        return
    table = np.stack([np.frombuffer(values, dtype=np.int64) for values in value_arrays])
    ordered = _ordered(table, top=True)
    med = _middle(ordered)
    candidate = (med > 0) & (ordered[-1] > STRAGGLER_RATIO * med)
    if steps is not None:
        step_of = np.frombuffer(step_list, dtype=np.int64)
        candidate &= (step_of >= steps[0]) & (step_of <= steps[1])
    at = np.flatnonzero(candidate)  # the steps where a rank is over the ratio: only they need their MAD
    if not at.size:
        return
    column, med = table[:, at], med[at]
    mad = _middle(_ordered(np.abs(column - med)))
    over = (column > STRAGGLER_RATIO * med) & (column - med > STRAGGLER_MADS * mad)
    rows, cols = np.nonzero(over)
    found = zip(
        rows.tolist(),
        column[rows, cols].tolist(),
        med[cols].tolist(),
        np.frombuffer(step_list, dtype=np.int64)[at[cols]].tolist(),
        strict=True,
    )
    add = per_step.append  # (:func:`_flagged`, inline: a run's thousands of stragglers, a call less each)
    for row, value, middle, step in found:  # (Python's own division, as _flag's)
        rank = ranks[row]
        add(
            {
                "step": step,
                "worker_group": group,
                "rank": rank,
                "phase": phase,
                "over_median": round(value / middle - 1.0, 6),
            }
        )
        flagged[(group, rank)].add(step_key(step))


def _ordered(table: Any, top: bool = False) -> Any:
    """``table`` with each column's middle value(s) (and, ``top``, its largest last) where a column-sorted
    table has them: what :func:`_middle` and ``[-1]`` read, by selection instead of a sort."""
    mid = len(table) // 2
    kth = {mid, mid - 1 if len(table) % 2 == 0 else mid} | ({len(table) - 1} if top else set())
    return np.partition(table, sorted(kth), axis=0)


def _middle(ordered: Any) -> Any:
    """The median of each column of a column-sorted table, or one :func:`_ordered` (``median``'s rule: the
    middle value, or the mean of the two middle values)."""
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _aligned(maps: Mapping[int, Mapping[Any, int]]) -> tuple[list[int], Any, list[Any]] | None:
    """(ranks, steps, value arrays) when every map is a Series over the very same steps."""
    series = list(maps.values())
    if not all(isinstance(m, Series) for m in series):
        return None
    first = series[0].steps  # type: ignore[attr-defined]
    if not all(m.steps == first for m in series[1:]):  # type: ignore[attr-defined]
        return None
    return list(maps), first, [m.ns for m in series]  # type: ignore[attr-defined]
