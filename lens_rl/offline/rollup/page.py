"""What the report's page draws beside the report, pure: the timeline's window of steps, the straggler
heatmap (rank x step of compute time over the group's median), the rank rows shown.

Example::

    window = step_window(report, None)        # the slowest step and its neighbours
    heat = heatmap(parts)                     # per worker group: ranks, step labels, z
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from lens_rl.offline.read.parts import median, step_key
from lens_rl.offline.rollup.schema import GoodputReport

__all__ = ["MAX_COLUMNS", "MAX_RANKS", "WORST_RANKS", "group_ranks", "heatmap", "shown_ranks", "step_window"]

MAX_COLUMNS = 200
#: Above this many ranks in a group, the rank charts show the group's mean and its WORST_RANKS worst ranks.
MAX_RANKS = 32
WORST_RANKS = 16


def step_window(report: GoodputReport, steps: tuple[int, int] | None) -> tuple[int, int] | None:
    """The timeline's steps: ``steps`` as asked (``ValueError`` when the run has none of them), else the
    slowest step and its neighbours; either clamped to the steps that exist (``--steps 5-100`` of a run of
    steps 0-6 is the window 5-6)."""
    known = report.get("step_range")
    if steps is not None:
        if known is not None and (steps[1] < known[0] or steps[0] > known[1]):
            raise ValueError(
                f"--steps {steps[0]}-{steps[1]} selects no step: the run's steps are {known[0]}-{known[1]}"
            )
        return steps if known is None else (max(steps[0], known[0]), min(steps[1], known[1]))
    slowest = report["slowest_steps"]
    if not slowest or not isinstance(slowest[0]["step"], int) or known is None:
        return None
    step = slowest[0]["step"]
    return max(step - 1, known[0]), min(step + 1, known[1])


def heatmap(parts: Sequence[Any]) -> dict[str, Any]:
    """Per worker group: rank x step of compute time over the group's median (downsampled to MAX_COLUMNS
    steps), rows sorted by their mean deviation, worst first; above MAX_RANKS ranks, the WORST_RANKS worst."""
    groups: dict[str, dict[int, dict[Any, float]]] = defaultdict(lambda: defaultdict(dict))
    for part in parts:
        if part.is_driver:
            continue
        group, rank = part.key.group, part.key.rank
        for _phase, step, excl in part.compute_items():
            cell = groups[group][rank]
            cell[step] = cell.get(step, 0) + excl
    out = {}
    for group, by_rank in groups.items():
        steps = sorted({s for cells in by_rank.values() for s in cells}, key=step_key)
        if len(by_rank) < 2 or not steps:
            continue
        medians = {s: median([c[s] for c in by_rank.values() if s in c]) for s in steps}
        width = max(1, -(-len(steps) // MAX_COLUMNS))
        columns = [steps[i : i + width] for i in range(0, len(steps), width)]
        rows = []
        for rank, cells in by_rank.items():
            row = []
            for col in columns:
                values = [cells[s] / medians[s] - 1.0 for s in col if s in cells and medians[s] > 0]
                row.append(round(sum(values) / len(values), 4) if values else None)
            present = [v for v in row if v is not None]
            rows.append((-(sum(present) / len(present)) if present else 0.0, rank, row))
        rows.sort()
        kept = rows if len(rows) <= MAX_RANKS else rows[:WORST_RANKS]
        labels = [str(c[0]) if len(c) == 1 else f"{c[0]}-{c[-1]}" for c in columns]
        out[group] = {"ranks": [r for _, r, _ in kept], "steps": labels, "z": [z for _, _, z in kept], "of": len(rows)}
    return out


def shown_ranks(ranks: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rank rows drawn: every rank of a group of at most MAX_RANKS ranks (a rank's processes of every
    attempt); of a larger group the WORST_RANKS ranks whose goodput lies farthest from the group's median (a
    straggler's, slower, and a starved rank's alike), each by its farthest process."""
    by_group: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in ranks:
        by_group[row["worker_group"]].append(row)
    out: list[Mapping[str, Any]] = []
    for rows in by_group.values():
        if group_ranks(rows) > MAX_RANKS:
            mid = median([r["goodput"] or 0.0 for r in rows])
            farthest: dict[Any, Mapping[str, Any]] = {}
            for r in sorted(rows, key=lambda r: (-abs((r["goodput"] or 0.0) - mid), r["rank"])):
                farthest.setdefault(r["rank"], r)
            rows = list(farthest.values())[:WORST_RANKS]
        out.extend(rows)
    return out


def group_ranks(rows: Sequence[Mapping[str, Any]]) -> int:
    """How many ranks the rank ``rows`` of one group hold (a rank restarted in a later attempt counts once)."""
    return len({r["rank"] for r in rows})
