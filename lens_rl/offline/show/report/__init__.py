"""``lens-rl report``: one self-contained HTML page that shows where the time went.

Headline figures (job and steady-state goodput, step time, run, model, algorithm, ranks per group), goodput
per step and bucket seconds per step, bucket seconds per worker group and rank (idle made visible), the
phase breakdown, a straggler heatmap (rank x step, time over the group median) with the persistent
stragglers, and a timeline of a window of steps, one row per process, coloured by bucket with hover details.
Built with plotly, its JavaScript inlined: the file opens offline, from disk, with no network fetch
(air-gapped clusters). The page's bytes are a function of the store and the options only (each chart's id
comes from its place on the page, nothing states when it was built): two reports of one store, through the
cache or with ``--no-cache``, are the same file.

It reads right at any size. Aggregates cover every step (downsampled to at most :data:`MAX_COLUMNS`
columns); the timeline covers a window of steps that exist (default: the slowest step and its neighbours)
of at most :data:`MAX_TIMELINE_SPANS` spans, umbrellas drawn under their phases. The heatmap's colour scale
is fixed and symmetric around the straggler rule (white within +-20 %, saturated at +-100 %). Above
:data:`MAX_RANKS` ranks in a group, the rank charts show the group's mean and its :data:`WORST_RANKS` worst
ranks (the heatmap sorted by deviation), so a 2,000-rank run's page stays a few screens tall.

Example::

    lens-rl report lens_traces -o report.html --steps 100-105
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lens_rl._errors import require
from lens_rl.offline.run.gpu import sample_files
from lens_rl.offline.run.kept import kept_page
from lens_rl.offline.run.timeline import (
    MAX_COLUMNS,
    MAX_RANKS,
    MAX_TIMELINE_SPANS,
    WORST_RANKS,
    page_data,
    shown_ranks,
    step_window,
)
from lens_rl.offline.show.report.figures import (
    HEAT_LIMIT,
    attempts_figure,
    critical_figure,
    heat_figures,
    rank_figure,
    requests_figure,
    step_figures,
    timeline_figure,
)
from lens_rl.offline.show.report.gpu_lane import gpu_lane_figure
from lens_rl.offline.show.report.page import page
from lens_rl.offline.show.report.pipeline import pipeline_figure

__all__ = [
    "HEAT_LIMIT",
    "MAX_COLUMNS",
    "MAX_RANKS",
    "MAX_TIMELINE_SPANS",
    "WORST_RANKS",
    "build_report",
    "shown_ranks",
    "step_window",
    "write_report",
]


def _plotly() -> Any:
    return require("plotly.graph_objects", "report", "lens-rl report")


def build_report(paths: Sequence[Path], **options: Any) -> str:
    """The HTML page for these span files (see the module docstring); ``options`` are
    :func:`~lens_rl.offline.run.timeline.page_data`'s (``steps``, ``warmup_steps``, ``jobs``, ``use_ray``,
    ``ray_address``, ``cache``)."""
    go = _plotly()
    from plotly.offline import get_plotlyjs

    data = page_data(paths, **options)
    report = data.report
    drawn: list[tuple[str, Any] | None] = [
        attempts_figure(go, report, data.parts),
        *step_figures(go, report),
        critical_figure(go, report),
        requests_figure(go, report),
        pipeline_figure(go, report),
        rank_figure(go, report, data.ranks),
        *heat_figures(go, data.heat),
    ]
    figures = [figure for figure in drawn if figure is not None]  # (a single attempt, no driver steps)
    if data.timeline:
        figures.append(timeline_figure(go, data.timeline, data.window))
        lanes = gpu_lane_figure(go, data.gpu_lanes, data.window)  # (under it: a GPU lane per rank, with samples)
        if lanes is not None:
            figures.append(lanes)
    config = {"displaylogo": False, "responsive": True}
    # each chart's element id comes from its place on the page (plotly's default is a random uuid): the page's
    # bytes are a function of the store and the options only, so two reports of one store are one file
    charts = "\n".join(
        f'<section id="{name}">'
        f"{fig.to_html(full_html=False, include_plotlyjs=False, config=config, div_id=f'chart-{i}-{name}')}"
        "</section>"
        for i, (name, fig) in enumerate(figures)
    )
    return page(report, data.identity, charts, get_plotlyjs())


def write_report(paths: Sequence[Path], output: str | os.PathLike[str], **options: Any) -> int:
    """Write the page to ``output``; returns its size in bytes. With ``cache`` (the refresh cache's folder),
    the page of an unchanged store is the one kept there by the last look, else built and kept."""
    key = (options.get("steps"), options.get("warmup_steps", 1))
    kept = [*paths, *sample_files(paths)[0]]  # (its sample files too: a page of grown samples is built again)
    page = kept_page(options.get("cache"), kept, key, lambda: build_report(paths, **options))
    if paths:  # each profiled step linked to its capture (a run without profiles/ is not read again)
        from lens_rl.offline.show.report.profiles import with_profiles

        page = with_profiles(page, Path(paths[0]).parent, Path(output))
    Path(output).write_text(page, encoding="utf-8")
    return len(page.encode("utf-8"))
