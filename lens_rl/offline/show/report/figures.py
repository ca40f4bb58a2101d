"""The report's plotly figures: goodput and bucket seconds per step, seconds per rank, the straggler heatmaps
and the timeline. Each takes plotly's ``graph_objects`` module and returns ``(section id, figure)``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from lens_rl.offline.rollup.schema import BUCKETS, GoodputReport
from lens_rl.offline.run.timeline import MAX_COLUMNS, MAX_RANKS, WORST_RANKS, group_ranks

__all__ = [
    "COLORS",
    "HEAT_LIMIT",
    "attempts_figure",
    "critical_figure",
    "heat_figures",
    "rank_figure",
    "requests_figure",
    "step_figures",
    "timeline_figure",
]

COLORS = {"productive": "#2ca02c", "overhead": "#f2b701", "idle": "#9e9e9e", "wasted": "#d62728", None: "#8fb8de"}
# 2ca02c", "overhead": "#f2b701", "idle": "#9e9e9e", "wasted": "#d62728", None: "#8fb8de"}
#: The heatmap's scale: time over the group median, -100 % .. +100 %, white within the straggler rule's 20 %.
HEAT_LIMIT = 1.0
HEAT_SCALE = [[0.0, "#1a9850"], [0.4, "#ffffff"], [0.6, "#ffffff"], [0.8, "#fc8d59"], [1.0, "#b2182b"]]
HEAT_TICKS = ([-1.0, -0.5, -0.2, 0.0, 0.2, 0.5, 1.0], ["-100%", "-50%", "-20%", "0", "+20%", "+50%", "+100% or more"])

_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 40}, "height": 360}


def step_figures(go: Any, report: GoodputReport) -> list[tuple[str, Any]]:
    step_rows = [r for r in report["steps"] if not r.get("incomplete")]
    if not step_rows:
        return []
    stride = max(1, -(-len(step_rows) // (MAX_COLUMNS * 5)))
    shown = step_rows[::stride]
    xs = [r["step"] for r in shown]
    fig = go.Figure(go.Scatter(x=xs, y=[r["goodput"] for r in shown], mode="lines+markers", name="goodput"))
    fig.update_layout(
        title="Goodput per step (productive over the step's wall)",
        yaxis={"tickformat": ".0%", "range": [0, 1]},
        xaxis_type="category",
        xaxis_title="step",
        **_LAYOUT,
    )
    bars = go.Figure(
        [go.Bar(x=xs, y=[r["seconds"][b] for r in shown], name=b, marker_color=COLORS[b]) for b in BUCKETS]
        + [go.Bar(x=xs, y=[r["unattributed_s"] for r in shown], name="unattributed", marker_color="#e0e0e0")]
    )
    _per_step_stack(bars, "Seconds per step, by bucket")
    return [("goodput-per-step", fig), ("bucket-seconds-per-step", bars)]


def rank_figure(go: Any, report: GoodputReport, shown: Sequence[Mapping[str, Any]]) -> tuple[str, Any]:
    """Resource-seconds per rank (the rank rows ``shown``); a group above MAX_RANKS ranks as its mean, then
    its worst ranks."""
    rows: list[tuple[str, Mapping[str, float]]] = []
    counts = {
        g["worker_group"]: group_ranks([r for r in report["ranks"] if r["worker_group"] == g["worker_group"]])
        for g in report["worker_groups"]
    }
    big = [g["worker_group"] for g in report["worker_groups"] if counts[g["worker_group"]] > MAX_RANKS]
    for group in report["worker_groups"]:
        if group["worker_group"] in big:
            mean = {b: group["seconds"][b] / group["processes"] for b in BUCKETS}
            n, of = counts[group["worker_group"]], group["processes"]
            rows.append(
                (f"{group['worker_group']}: mean of {n} ranks" + (f" ({of} processes)" if of != n else ""), mean)
            )
    several = len(report.get("attempts", ())) > 1  # (a rank's process of each attempt: a row each)
    for r in shown:
        label = f"{r['worker_group']} {r['rank']}"
        rows.append((label + (f" (attempt {r.get('attempt', 0)})" if several else ""), r["seconds"]))
    labels = [label for label, _ in rows]
    fig = go.Figure(
        [go.Bar(y=labels, x=[s[b] for _, s in rows], name=b, orientation="h", marker_color=COLORS[b]) for b in BUCKETS]
    )
    note = f"; {', '.join(big)}: the mean and the {WORST_RANKS} ranks farthest from its median" if big else ""
    fig.update_layout(
        title=f"Resource-seconds per worker group and rank (a worker's uncovered lifetime is idle{note})",
        barmode="stack",
        xaxis_title="s",
        yaxis={"autorange": "reversed"},
        **{**_LAYOUT, "height": max(300, 26 * len(rows) + 120)},
    )
    return "seconds-per-rank", fig


def heat_figures(go: Any, heat: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """One heatmap per worker group of ``heat`` (:func:`~lens_rl.offline.rollup.page.heatmap`'s)."""
    figures = []
    for group, data in heat.items():
        lo, hi = -HEAT_LIMIT, HEAT_LIMIT
        fig = go.Figure(
            go.Heatmap(
                z=data["z"],
                x=data["steps"],
                y=[f"rank {r}" for r in data["ranks"]],
                zmin=lo,
                zmax=hi,
                colorscale=HEAT_SCALE,
                colorbar={"title": "over median", "tickvals": HEAT_TICKS[0], "ticktext": HEAT_TICKS[1]},
                hovertemplate="step %{x}, %{y}: %{z:+.0%} over the median<extra></extra>",
            )
        )
        of = (
            f" (the {len(data['ranks'])} most deviating of {data['of']} ranks)"
            if len(data["ranks"]) < data["of"]
            else ""
        )
        fig.update_layout(
            title=f"Stragglers in {group}: compute time over the group median, rank x step{of}",
            yaxis={"autorange": "reversed", "type": "category"},
            **{**_LAYOUT, "height": max(300, 22 * len(data["ranks"]) + 140)},
        )
        figures.append((f"stragglers-{group}", fig))
    return figures


#: Spans nested deeper than this are drawn with this level's (a bounded number of traces).
_MAX_LEVEL = 16


def timeline_figure(go: Any, timeline: list[dict[str, Any]], window: tuple[int, int] | None) -> tuple[str, Any]:
    """One row per process, coloured by bucket; each span drawn over its parent (by depth in its file's tree,
    outermost first), so a step whose phases are productive looks productive whatever its umbrella's or an
    enclosing phase's bucket."""
    drivers = {s["process"] for s in timeline if s["driver"]}
    procs = sorted({s["process"] for s in timeline}, key=lambda p: (p not in drivers, p))
    fig = go.Figure(_depth_traces(go, timeline))
    where = _window_text(window)
    fig.update_layout(
        title=f"Timeline, {where} ({len(timeline)} spans; ms from the window's start)",
        barmode="overlay",
        xaxis_title="ms",
        yaxis={"categoryorder": "array", "categoryarray": procs[::-1]},
        **{**_LAYOUT, "height": max(320, 34 * len(procs) + 140)},
    )
    return "timeline", fig


def _depth_traces(go: Any, timeline: list[dict[str, Any]]) -> list[Any]:
    """A bar trace per (depth, bucket), outermost first (ms from the earliest start); each bucket named once
    in the legend."""
    origin = min(s["start"] for s in timeline)
    traces = []
    levels = sorted({min(s.get("depth", 0), _MAX_LEVEL) for s in timeline})
    named: set[Any] = set()
    for level in levels:
        for bucket in (None, *BUCKETS):
            rows = [s for s in timeline if s["bucket"] == bucket and min(s.get("depth", 0), _MAX_LEVEL) == level]
            if not rows:
                continue
            traces.append(
                go.Bar(
                    y=[s["process"] for s in rows],
                    x=[(s["end"] - s["start"]) / 1e6 for s in rows],
                    base=[(s["start"] - origin) / 1e6 for s in rows],
                    orientation="h",
                    name=bucket or "no bucket (umbrellas)",
                    legendgroup=bucket or "none",
                    showlegend=bucket not in named,
                    marker_color=COLORS[bucket],
                    opacity=0.55 if bucket is None else 0.9,
                    width=0.8 if bucket is None else 0.55,
                    customdata=[
                        [s["name"], (s["end"] - s["start"]) / 1e9, json.dumps(s["attrs"], default=str)[:300]]
                        for s in rows
                    ],
                    hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]:.3f} s<br>%{customdata[2]}<extra></extra>",
                )
            )
            named.add(bucket)
    return traces


def _window_text(window: tuple[int, int] | None) -> str:
    """The timeline's steps, in words."""
    if window is None:
        return "all steps"
    return f"step {window[0]}" if window[0] == window[1] else f"steps {window[0]}-{window[1]}"


ENDED_COLORS = {"shutdown": "#2ca02c", "error": "#d62728", "lost": "#7f7f7f"}


def attempts_figure(go: Any, report: GoodputReport, parts: Sequence[Any]) -> tuple[str, Any] | None:
    """The attempts on one time axis (s from the job's start): each attempt's run coloured by how it ended,
    the downtime before it, the stretches a later attempt ran again, the error it ended with. None for a
    single attempt."""
    attempts = report.get("attempts", ())
    if len(attempts) <= 1:
        return None
    view = [p for p in parts if p.is_driver] or list(parts)
    origin = min((p.first_ns for p in parts if p.first_ns is not None), default=0)
    traces = [*_attempt_runs(go, attempts), *_downtimes(go, attempts), *_reruns(go, view, origin)]
    traces += _errors(go, attempts)
    fig = go.Figure(traces)
    why = report["job"]["wasted_reasons"]
    fig.update_layout(
        title=(
            f"Attempts: {len(attempts)} ({why['rerun']:.1f} s re-run, {why['restart']:.1f} s downtime; "
            "s from the job's start)"
        ),
        barmode="overlay",
        xaxis_title="s",
        yaxis={"autorange": "reversed", "type": "category"},
        **{**_LAYOUT, "height": max(260, 46 * len(attempts) + 140)},
    )
    return "attempts", fig


def _attempt_runs(go: Any, attempts: Sequence[Any]) -> list[Any]:
    """Each attempt's run, one bar trace per way it ended (coloured by :data:`ENDED_COLORS`)."""
    traces = []
    for ended, color in ENDED_COLORS.items():
        rows = [a for a in attempts if a["ended"] == ended]
        if rows:
            traces.append(
                go.Bar(
                    y=[f"attempt {a['attempt']}" for a in rows],
                    x=[a["wall_s"] for a in rows],
                    base=[a["start_s"] for a in rows],
                    orientation="h",
                    name=f"run, ended: {ended}",
                    marker_color=color,
                    opacity=0.75,
                    customdata=[[_steps(a), a.get("error", {}).get("message", "")] for a in rows],
                    hovertemplate="%{y}: steps %{customdata[0]}<br>%{x:.1f} s %{customdata[1]}<extra></extra>",
                )
            )
    return traces


def _downtimes(go: Any, attempts: Sequence[Any]) -> list[Any]:
    """The downtime before each attempt that had one (wasted: restart), as one bar trace (or none)."""
    gaps = [a for a in attempts if a["downtime_before_s"] > 0]
    if not gaps:
        return []
    return [
        go.Bar(
            y=[f"attempt {a['attempt']}" for a in gaps],
            x=[a["downtime_before_s"] for a in gaps],
            base=[(a["start_s"] or 0.0) - a["downtime_before_s"] for a in gaps],
            orientation="h",
            name="downtime (wasted: restart)",
            marker_color="#bdbdbd",
            marker_pattern_shape="/",
            hovertemplate="downtime before %{y}: %{x:.1f} s<extra></extra>",
        )
    ]


def _reruns(go: Any, view: Sequence[Any], origin: int) -> list[Any]:
    """The stretches of ``view``'s processes a later attempt ran again (wasted: rerun), s from ``origin`` (ns),
    as one thin bar trace (or none)."""
    reruns = [(p.key.attempt, a, b) for p in view for a, b in zip(p.rerun[::2], p.rerun[1::2], strict=True)]
    if not reruns:
        return []
    return [
        go.Bar(
            y=[f"attempt {attempt}" for attempt, _, _ in reruns],
            x=[(b - a) / 1e9 for _, a, b in reruns],
            base=[(a - origin) / 1e9 for _, a, _ in reruns],
            orientation="h",
            name="re-run later (wasted: rerun)",
            marker_color="#ff7f0e",
            width=0.35,
            hovertemplate="run again by a later attempt: %{x:.2f} s<extra></extra>",
        )
    ]


def _errors(go: Any, attempts: Sequence[Any]) -> list[Any]:
    """A marker where each attempt that ended in an error ended, the error in its hover (or none)."""
    errors = [a for a in attempts if a["ended"] == "error"]
    if not errors:
        return []
    return [
        go.Scatter(
            y=[f"attempt {a['attempt']}" for a in errors],
            x=[(a["start_s"] or 0.0) + a["wall_s"] for a in errors],
            mode="markers",
            marker={"symbol": "x", "size": 14, "color": "#000000"},
            name="error",
            text=[f"{a['error']['type']}: {a['error']['message']}"[:200] for a in errors],
            hovertemplate="%{text}<extra></extra>",
        )
    ]


def _steps(attempt: Mapping[str, Any]) -> str:
    return "-" if attempt["first_step"] is None else f"{attempt['first_step']}-{attempt['last_step']}"


#: (group, phase) series drawn in the critical-path figure; the rest are summed as "other".
CRITICAL_SERIES = 8


def critical_figure(go: Any, report: GoodputReport) -> tuple[str, Any] | None:
    """Critical-path seconds per step, stacked by (group, phase): the few that held the most steps up, the
    rest as other. None without a critical path (no driver steps)."""
    critical = report.get("critical_path") or {}
    steps = critical.get("steps") or []
    if not steps:
        return None
    top = [(r["worker_group"], r["phase"]) for r in critical["phases"][:CRITICAL_SERIES]]
    stride = max(1, -(-len(steps) // (MAX_COLUMNS * 5)))
    shown = steps[::stride]
    xs = [r["step"] for r in shown]
    per_step = {r["step"]: r.get("by_phase") or {} for r in shown}
    traces = []
    for group, phase in top:
        key = f"{group} {phase}"
        traces.append(go.Bar(x=xs, y=[per_step[x].get(key, 0.0) for x in xs], name=key))
    others = [max(r["critical_s"] - sum(per_step[r["step"]].get(f"{g} {p}", 0.0) for g, p in top), 0.0) for r in shown]
    if any(v > 1e-9 for v in others):
        traces.append(go.Bar(x=xs, y=others, name="other", marker_color="#cccccc"))
    fig = go.Figure(traces)
    _per_step_stack(fig, "Critical path per step: what each step waited on, by group and phase")
    return "critical-path", fig


def requests_figure(go: Any, report: Mapping[str, Any]) -> tuple[str, Any] | None:
    """Per worker group, a request's median and p95 seconds in queue, to first token and end to end: whether
    generation waits on the queue or on compute. None without request spans."""
    rows = report.get("requests") or []
    if not rows:
        return None
    xs = [str(r["worker_group"]) for r in rows]
    traces = [
        go.Bar(x=xs, y=[r[key] or 0.0 for r in rows], name=name)
        for key, name in (
            ("queue_p95_s", "queue p95"),
            ("ttft_p50_s", "first token p50"),
            ("ttft_p95_s", "first token p95"),
            ("e2e_p50_s", "end to end p50"),
            ("e2e_p95_s", "end to end p95"),
        )
    ]
    fig = go.Figure(traces)
    fig.update_layout(
        title="vLLM requests per worker group: time in queue, to first token, end to end (s)",
        barmode="group",
        yaxis_title="s",
        xaxis_title="worker group",
        **_LAYOUT,
    )
    return "requests", fig


def _per_step_stack(fig: Any, title: str) -> None:
    """The layout of a figure of seconds stacked per step (one category a step)."""
    fig.update_layout(
        title=title, barmode="stack", yaxis_title="s", xaxis_type="category", xaxis_title="step", **_LAYOUT
    )
