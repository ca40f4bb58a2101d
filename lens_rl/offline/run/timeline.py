"""The report page's passes over the files: the timeline (the spans of a window of steps, each span's step
by the tree rule), the run's identity from the headers; and :func:`page_data`, everything the page draws,
read once (the goodput parts through the refresh cache, the timeline in one parallel map).

Example::

    data = page_data(paths, steps=(100, 105), cache=cache_folder(run_dir))
    data.timeline                             # at most MAX_TIMELINE_SPANS spans of steps 100-105
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lens_rl.offline.read.tree import CAPTURE, depths, rows_tree
from lens_rl.offline.rollup.page import (
    MAX_COLUMNS,
    MAX_RANKS,
    WORST_RANKS,
    group_ranks,
    heatmap,
    shown_ranks,
    step_window,
)
from lens_rl.offline.rollup.schema import GoodputReport
from lens_rl.offline.run.analyze import analyze_parts, rolled_up
from lens_rl.offline.run.gpu import gpu_lanes, with_gpu
from lens_rl.offline.run.gpu_ahead import join_ahead, read_ahead
from lens_rl.offline.run.index import complete_end
from lens_rl.offline.run.parallel import map_files
from lens_rl.offline.run.window import file_mark, keep, reused
from lens_rl.store import iter_rows, read_head, time_ns

__all__ = [
    "MAX_COLUMNS",
    "MAX_RANKS",
    "MAX_TIMELINE_SPANS",
    "WORST_RANKS",
    "PageData",
    "group_ranks",
    "identity",
    "page_data",
    "shown_ranks",
    "step_window",
    "window_file",
    "window_file_marked",
]

MAX_TIMELINE_SPANS = 20_000


@dataclass
class PageData:
    """What the report's page draws: the report, the processes' parts (the attempts figure reads their
    first times), the timeline's window and spans, the heatmap, the rank rows shown, the run's identity."""

    report: GoodputReport
    parts: Sequence[Any]
    window: tuple[int, int] | None
    timeline: list[dict[str, Any]]
    heat: dict[str, Any]
    ranks: list[Mapping[str, Any]]
    identity: dict[str, Any]
    #: a GPU lane per rank of the timeline (:func:`lens_rl.offline.run.gpu.gpu_lanes`; none without samples)
    gpu_lanes: list[dict[str, Any]] = field(default_factory=list)


def page_data(
    paths: Sequence[Path],
    *,
    steps: tuple[int, int] | None = None,
    warmup_steps: int = 1,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    cache: str | None = None,
) -> PageData:
    """Everything the page of these span files draws. ``ValueError`` when no readable span is there (an
    empty page would read as a run that did nothing) or ``steps`` selects none of the run's steps."""
    ahead = read_ahead(paths, cache, jobs)  # (the sample files read while the span files are)
    parts, stats = analyze_parts(paths, jobs=jobs, use_ray=use_ray, ray_address=ray_address, cache=cache)
    joining = join_ahead(paths, parts, stats, cache, jobs, ahead)  # (joined while the rollup merges the parts)
    report = rolled_up(parts, stats, cache, warmup_steps=warmup_steps)
    gpu = joining.result()
    report = with_gpu(report, gpu)
    if not report["spans"]:
        raise ValueError(
            f"no readable lens_rl spans ({report['files']} files, {report['skipped_lines']} bad lines); no page written"
        )
    window = step_window(report, steps)
    ranks = shown_ranks(report["ranks"])
    shown = frozenset((r["worker_group"], r["rank"], r["pid"]) for r in ranks)
    drawn = None if cache is None else reused(cache, paths, window)
    if drawn is None:  # (kept: every process's spans, the shown ones taken below)
        drawn = _draw(paths, window, None if cache is not None else shown, cache, jobs, use_ray, ray_address)
    processes = {f"{group} rank {rank} (pid {pid})" for group, rank, pid in shown}
    timeline = _rerun([item for item in drawn if item["process"] in processes][:MAX_TIMELINE_SPANS], report)
    lanes = gpu_lanes(gpu, timeline)
    return PageData(report, parts, window, timeline, heatmap(parts), ranks, identity(paths), lanes)


def _draw(
    paths: Sequence[Path],
    window: tuple[int, int] | None,
    shown: frozenset[tuple[str, int, int]] | None,
    cache: str | None,
    jobs: int | None,
    use_ray: bool,
    ray_address: str | None,
) -> list[dict[str, Any]]:
    """The timeline's spans of the processes ``shown`` (None: every one), each file read whole, at most
    :data:`MAX_TIMELINE_SPANS`; kept in the cache folder ``cache`` for the next look (when none was cut)."""
    timeline: list[dict[str, Any]] = []
    marks: list[dict[str, Any] | None] = []
    for chunk, mark in map_files(
        window_file_marked,
        paths,
        window,
        MAX_TIMELINE_SPANS,
        shown,
        jobs=jobs,
        use_ray=use_ray,
        ray_address=ray_address,
        desc="report",
    ):
        marks.append(mark if len(timeline) + len(chunk) < MAX_TIMELINE_SPANS else None)
        timeline.extend(chunk[: max(MAX_TIMELINE_SPANS - len(timeline), 0)])
    if cache is not None:
        keep(cache, window, timeline, marks)
    return timeline


def window_file(
    path: str | os.PathLike[str],
    window: tuple[int, int] | None,
    limit: int,
    shown: frozenset[tuple[str, int, int]] | None,
) -> list[dict[str, Any]]:
    """The spans of one file inside the step window (each span's step by the tree rule, as every command
    decides it: :mod:`lens_rl.offline.read.tree`), of the processes ``shown`` ((group, rank, pid); None:
    every one)."""
    return _drawn(iter_rows(path), window, limit, shown)[0]


def window_file_marked(
    path: str | os.PathLike[str],
    window: tuple[int, int] | None,
    limit: int,
    shown: frozenset[tuple[str, int, int]] | None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """:func:`window_file`'s spans and what a kept timeline keeps of the file
    (:func:`lens_rl.offline.run.window.file_mark`; None where its spans were cut at ``limit``)."""
    try:
        end = complete_end(path, os.stat(path).st_size)  # (before the read: what is drawn reaches at least here)
    except OSError:
        return window_file(path, window, limit, shown), None
    out, rows, parents, kept = _drawn(iter_rows(path), window, limit, shown)
    if len(out) >= limit:
        return out, None
    try:
        return out, file_mark(path, rows, parents, kept, end)
    except OSError:
        return out, None


def _drawn(
    found: Iterable[tuple[Any, Any]], window: tuple[int, int] | None, limit: int, shown: Any
) -> tuple[list[dict[str, Any]], list[tuple[Any, Any]], Any, list[int]]:
    """The drawn spans of a file's ``found`` rows, the rows, their tree's parents, and the rows drawn."""
    rows = list(found)
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
        out.append(_item(key, row, steps[n]))
        kept.append(n)
        if len(out) >= limit:
            break
    _depths(out, kept, parents)
    return out, rows, parents, kept


def _depths(out: list[dict[str, Any]], kept: list[int], parents: Any) -> None:
    """Each drawn span's depth, counted from its process's outermost span drawn."""
    depth = depths(parents, kept)
    least: dict[str, int] = {}
    for item, n in zip(out, kept, strict=True):
        least[item["process"]] = min(least.get(item["process"], depth[n]), depth[n])
    for item, n in zip(out, kept, strict=True):
        item["depth"] = depth[n] - least[item["process"]]


def _item(key: Any, row: Any, step: Any) -> dict[str, Any]:
    """One drawn span (``step``: its step by the tree rule)."""
    attrs = row.a or {}
    return {
        "process": f"{key.group} rank {key.rank} (pid {key.pid})",
        "group": key.group,
        "attempt": key.attempt,
        "step": step if type(step) is int else None,
        "name": str(row.n),
        "start": time_ns(row.b),
        "end": time_ns(row.e),
        "bucket": attrs.get("rl.bucket") if row.n != CAPTURE else None,  # (a capture's window: a container)
        "driver": key.driver,
        "attrs": {k: v for k, v in list(attrs.items())[:12] if k != "rl.bucket"},
    }


def _rerun(timeline: list[dict[str, Any]], report: GoodputReport) -> list[dict[str, Any]]:
    """The timeline with the spans of a step's superseded run (a later attempt ran it again) coloured
    ``wasted``, as every figure counts them, and said so on hover; the final run keeps its buckets."""
    lost = {(row["attempt"], step) for row in report.get("attempts", []) for step in row["rerun_steps"]}
    if not lost:
        return timeline
    out = []
    for item in timeline:
        if (item.get("attempt"), item.get("step")) in lost:
            attrs = {"rerun": "run again by a later attempt: wasted", **item["attrs"]}
            item = {**item, "bucket": "wasted" if item["bucket"] is not None else None, "attrs": attrs}
        out.append(item)
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
