"""What the report's page draws, read from the span files: the timeline's window and its spans, the
straggler heatmap, the ranks shown, the run's identity from the headers."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.offline.read.parts import median, step_key
from lens_rl.offline.read.tree import depths, rows_tree
from lens_rl.offline.rollup.schema import GoodputReport
from lens_rl.store import iter_rows, read_head, time_ns

__all__ = [
    "MAX_COLUMNS",
    "MAX_RANKS",
    "MAX_TIMELINE_SPANS",
    "WORST_RANKS",
    "heatmap",
    "identity",
    "shown_ranks",
    "step_window",
    "window_file",
]

MAX_COLUMNS = 200
MAX_TIMELINE_SPANS = 20_000
#: Above this many ranks in a group, the rank charts show the group's mean and its WORST_RANKS worst ranks.
MAX_RANKS = 32
WORST_RANKS = 16


def step_window(report: GoodputReport, steps: tuple[int, int] | None) -> tuple[int, int] | None:
    """The timeline's steps: ``steps`` as asked (``ValueError`` when the run has none of them), else the
    slowest step and its neighbours, clamped to the steps that exist."""
    known = report.get("step_range")
    if steps is not None:
        if known is not None and (steps[1] < known[0] or steps[0] > known[1]):
            raise ValueError(
                f"--steps {steps[0]}-{steps[1]} selects no step: the run's steps are {known[0]}-{known[1]}"
            )
        return steps
    slowest = report["slowest_steps"]
    if not slowest or not isinstance(slowest[0]["step"], int) or known is None:
        return None
    step = slowest[0]["step"]
    return max(step - 1, known[0]), min(step + 1, known[1])


def window_file(
    path: str | os.PathLike[str],
    window: tuple[int, int] | None,
    limit: int,
    shown: frozenset[tuple[str, int, int]] | None,
) -> list[dict[str, Any]]:
    """The spans of one file inside the step window (each span's step by the tree rule, as every command
    decides it: :mod:`lens_rl.offline.read.tree`), of the processes ``shown`` ((group, rank, pid); None:
    every one)."""
    rows = list(iter_rows(path))
    parents, steps, _cycles = rows_tree([row for _, row in rows])
    out: list[dict[str, Any]] = []
    kept: list[int] = []  # (each drawn span's row)
    for n, (head, row) in enumerate(rows):
        key = head.process
        if shown is not None and (key.group, key.rank, key.pid) not in shown:
            continue
        if window is not None:
            step = steps[n]
            if type(step) is not int or not window[0] <= step <= window[1]:
                continue
        attrs = row.a or {}
        out.append(
            {
                "process": f"{key.group} rank {key.rank} (pid {key.pid})",
                "group": key.group,
                "name": str(row.n),
                "start": time_ns(row.b),
                "end": time_ns(row.e),
                "bucket": attrs.get("rl.bucket"),
                "driver": key.driver,
                "attrs": {k: v for k, v in list(attrs.items())[:12] if k != "rl.bucket"},
            }
        )
        kept.append(n)
        if len(out) >= limit:
            break
    depth = depths(parents, kept)
    least: dict[str, int] = {}  # (depth counted from each process's outermost span drawn)
    for item, n in zip(out, kept, strict=True):
        least[item["process"]] = min(least.get(item["process"], depth[n]), depth[n])
    for item, n in zip(out, kept, strict=True):
        item["depth"] = depth[n] - least[item["process"]]
    return out


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
    """The rank rows drawn: every rank of a group of at most MAX_RANKS; of a larger group the WORST_RANKS
    whose goodput lies farthest from the group's median (a straggler's, slower, and a starved rank's alike)."""
    by_group: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in ranks:
        by_group[row["worker_group"]].append(row)
    out: list[Mapping[str, Any]] = []
    for rows in by_group.values():
        if len(rows) > MAX_RANKS:
            mid = median([r["goodput"] or 0.0 for r in rows])
            rows = sorted(rows, key=lambda r: (-abs((r["goodput"] or 0.0) - mid), r["rank"]))[:WORST_RANKS]
        out.extend(rows)
    return out


def identity(paths: Sequence[Path]) -> dict[str, Any]:
    """Run id, model and algorithm from the driver's header (or any file's), and ranks per group: from the
    files' headers, never their names."""
    groups: dict[str, set[int]] = defaultdict(set)
    first: dict[str, Any] = {}
    driver = False
    for path in paths:
        head, _ = read_head(path)
        if head is None:
            continue
        groups[head.process.group].add(head.process.rank)
        if not first or (head.process.driver and not driver):
            first, driver = head.resource, head.process.driver
    return {
        "run": first.get("rl.run_id"),
        "model": first.get("rl.model.name"),
        "algorithm": first.get("rl.algorithm"),
        "groups": {g: len(r) for g, r in sorted(groups.items())},
    }
