"""``lens-rl report``: one self-contained HTML page that shows where the time went.

Headline figures (job and steady-state goodput, step time, run, model, algorithm,
ranks per group), goodput per step and bucket seconds per step, bucket seconds per
worker group and rank (idle made visible), the phase breakdown, a straggler heatmap
(rank x step, time over the group median) with the persistent stragglers, and a
timeline of a window of steps, one row per process, coloured by bucket with hover
details. Built with plotly, its JavaScript inlined: the file opens offline, from disk,
with no network fetch (air-gapped clusters). Aggregates cover every step (downsampled
to at most :data:`MAX_COLUMNS` columns); the timeline covers a window (default: the
slowest step and its neighbours) of at most :data:`MAX_TIMELINE_SPANS` spans, so a
1 M-span run gives a page of a few MB, built with the streaming reader in bounded memory.

Example::

    lens-rl report lens_traces -o report.html --steps 100-105
"""

from __future__ import annotations

import html
import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.goodput import BUCKETS, analyze_parts, report_from_parts
from lens_rl.store import iter_file_records, process_of, time_ns

__all__ = ["build_report", "write_report"]

_EXTRA = "pip install 'lens-rl[report]'"
MAX_COLUMNS = 200
MAX_TIMELINE_SPANS = 20_000
COLORS = {"productive": "#2ca02c", "overhead": "#f2b701", "idle": "#9e9e9e", "wasted": "#d62728", None: "#8fb8de"}


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ImportError(f"lens-rl report needs plotly: {_EXTRA}") from exc
    return go


def _step_window(report: Mapping[str, Any], steps: tuple[int, int] | None) -> tuple[int, int] | None:
    if steps is not None:
        return steps
    slowest = report["slowest_steps"]
    if not slowest or not isinstance(slowest[0]["step"], int):
        return None
    step = slowest[0]["step"]
    return step - 1, step + 1


def _window_file(path: str | os.PathLike[str], window: tuple[int, int] | None, limit: int) -> list[dict[str, Any]]:
    """The spans of one file inside the step window (steps inherited from parents within the file)."""
    records = list(iter_file_records(path))
    own = {r.get("span_id"): (r.get("attributes") or {}).get("rl.step") for r in records}
    parent = {r.get("span_id"): r.get("parent_span_id") for r in records}

    def step_of(span_id: Any) -> Any:
        seen = 0
        while span_id is not None and seen < 64:
            step = own.get(span_id)
            if step is not None:
                return step
            span_id, seen = parent.get(span_id), seen + 1
        return None

    out = []
    for rec in records:
        if window is not None:
            step = step_of(rec.get("span_id"))
            if not isinstance(step, int) or not window[0] <= step <= window[1]:
                continue
        group, rank, pid = process_of(rec)
        attrs = rec.get("attributes") or {}
        out.append({"process": f"{group} rank {rank} (pid {pid})", "group": group, "name": str(rec.get("name")),
                    "start": time_ns(rec.get("start_ns")), "end": time_ns(rec.get("end_ns")),
                    "bucket": attrs.get("rl.bucket"),
                    "attrs": {k: v for k, v in list(attrs.items())[:12] if k != "rl.bucket"}})  # fmt: skip
        if len(out) >= limit:
            break
    return out


def _heatmap(parts: Sequence[Any], report: Mapping[str, Any]) -> dict[str, Any]:
    """Per worker group: rank x step of compute time over the group's median (downsampled to MAX_COLUMNS steps)."""
    from lens_rl._parts import median, step_key

    groups: dict[str, dict[int, dict[Any, float]]] = defaultdict(lambda: defaultdict(dict))
    for part in parts:
        if part.is_driver:
            continue
        group, rank, _ = part.key
        for _phase, step, excl_s in part.compute_items():
            cell = groups[group][rank]
            cell[step] = cell.get(step, 0.0) + excl_s
    out = {}
    for group, by_rank in groups.items():
        steps = sorted({s for cells in by_rank.values() for s in cells}, key=step_key)
        if len(by_rank) < 2 or not steps:
            continue
        medians = {s: median([c[s] for c in by_rank.values() if s in c]) for s in steps}
        ranks = sorted(by_rank)
        width = max(1, -(-len(steps) // MAX_COLUMNS))
        columns = [steps[i:i + width] for i in range(0, len(steps), width)]
        z = []
        for rank in ranks:
            row = []
            for col in columns:
                values = [by_rank[rank][s] / medians[s] - 1.0 for s in col if s in by_rank[rank] and medians[s] > 0]
                row.append(round(sum(values) / len(values), 4) if values else None)
            z.append(row)
        labels = [str(c[0]) if len(c) == 1 else f"{c[0]}-{c[-1]}" for c in columns]
        out[group] = {"ranks": ranks, "steps": labels, "z": z}
    return out


def _identity(paths: Sequence[Path]) -> dict[str, Any]:
    """Run id, model and algorithm from the driver's header (or any file's), and ranks per group."""
    ident: dict[str, Any] = {"groups": defaultdict(set)}
    for path in paths:
        group, rank = path.name.split("-")[1:3]
        ident["groups"][group].add(rank)
    for path in sorted(paths, key=lambda p: not p.name.startswith("spans-driver-")):
        for rec in iter_file_records(path):
            res = rec.get("resource") or {}
            ident.update(run=res.get("rl.run_id"), model=res.get("rl.model.name"), algorithm=res.get("rl.algorithm"))
            break
        if ident.get("run"):
            break
    ident["groups"] = {g: len(r) for g, r in sorted(ident["groups"].items())}
    return ident


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def build_report(
    paths: Sequence[Path],
    *,
    steps: tuple[int, int] | None = None,
    warmup_steps: int = 1,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
) -> str:
    """The HTML page for these span files (see the module docstring)."""
    go = _plotly()
    from plotly.offline import get_plotlyjs

    from lens_rl.analysis import map_files

    parts, stats = analyze_parts(paths, jobs=jobs, use_ray=use_ray, ray_address=ray_address)
    report = report_from_parts(parts, warmup_steps=warmup_steps, files=stats.files, skipped_lines=stats.skipped)
    window = _step_window(report, steps)
    timeline: list[dict[str, Any]] = []
    for chunk in map_files(_window_file, paths, window, MAX_TIMELINE_SPANS, jobs=jobs, use_ray=use_ray,
                           ray_address=ray_address, desc="report"):  # fmt: skip
        timeline.extend(chunk[: max(MAX_TIMELINE_SPANS - len(timeline), 0)])
    ident = _identity(paths)
    figures: list[tuple[str, Any]] = []
    layout = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 40}, "height": 360}

    step_rows = report["steps"]
    if step_rows:
        stride = max(1, -(-len(step_rows) // (MAX_COLUMNS * 5)))
        shown = step_rows[::stride]
        xs = [r["step"] for r in shown]
        fig = go.Figure(go.Scatter(x=xs, y=[r["goodput"] for r in shown], mode="lines+markers", name="goodput"))
        fig.update_layout(title="Goodput per step", yaxis={"tickformat": ".0%", "range": [0, 1]}, xaxis_type="category",
                          xaxis_title="step", **layout)  # fmt: skip
        figures.append(("goodput-per-step", fig))
        fig = go.Figure([go.Bar(x=xs, y=[r["seconds"][b] for r in shown], name=b, marker_color=COLORS[b])
                         for b in BUCKETS] + [go.Bar(x=xs, y=[r["unattributed_s"] for r in shown], name="unattributed",
                                                     marker_color="#e0e0e0")])  # fmt: skip
        fig.update_layout(title="Seconds per step, by bucket", barmode="stack", yaxis_title="s", xaxis_type="category",
                          xaxis_title="step", **layout)  # fmt: skip
        figures.append(("bucket-seconds-per-step", fig))

    ranks = report["ranks"]
    labels = [f"{r['worker_group']} {r['rank']}" for r in ranks]
    fig = go.Figure([go.Bar(y=labels, x=[r["seconds"][b] for r in ranks], name=b, orientation="h", marker_color=COLORS[b])
                     for b in BUCKETS])  # fmt: skip
    fig.update_layout(title="Resource-seconds per worker group and rank (a worker's uncovered lifetime is idle)",
                      barmode="stack", xaxis_title="s", **{**layout, "height": max(300, 26 * len(ranks) + 120)})  # fmt: skip
    figures.append(("seconds-per-rank", fig))

    for group, data in _heatmap(parts, report).items():
        fig = go.Figure(go.Heatmap(z=data["z"], x=data["steps"], y=[f"rank {r}" for r in data["ranks"]],
                                   colorscale="RdYlGn_r", zmid=0, colorbar={"title": "over median", "tickformat": ".0%"},
                                   hovertemplate="step %{x}, %{y}: %{z:.0%} over the median<extra></extra>"))  # fmt: skip
        fig.update_layout(title=f"Stragglers in {group}: compute time over the group median (rank x step)",
                          **{**layout, "height": max(300, 22 * len(data["ranks"]) + 140)})  # fmt: skip
        figures.append((f"stragglers-{group}", fig))

    if timeline:
        origin = min(s["start"] for s in timeline)
        procs = sorted({s["process"] for s in timeline}, key=lambda p: (not p.startswith("driver"), p))
        traces = []
        for bucket in (*BUCKETS, None):
            rows = [s for s in timeline if s["bucket"] == bucket]
            if not rows:
                continue
            traces.append(go.Bar(
                y=[s["process"] for s in rows], x=[(s["end"] - s["start"]) / 1e6 for s in rows],
                base=[(s["start"] - origin) / 1e6 for s in rows], orientation="h", name=bucket or "no bucket",
                marker_color=COLORS[bucket], opacity=0.85,
                customdata=[[s["name"], (s["end"] - s["start"]) / 1e9, json.dumps(s["attrs"], default=str)[:300]]
                            for s in rows],
                hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]:.3f} s<br>%{customdata[2]}<extra></extra>",
            ))  # fmt: skip
        fig = go.Figure(traces)
        where = "all steps" if window is None else f"steps {window[0]}-{window[1]}"
        fig.update_layout(title=f"Timeline, {where} ({len(timeline)} spans; ms from the window's start)",
                          barmode="overlay", xaxis_title="ms", yaxis={"categoryorder": "array", "categoryarray": procs[::-1]},
                          **{**layout, "height": max(320, 34 * len(procs) + 140)})  # fmt: skip
        figures.append(("timeline", fig))

    config = {"displaylogo": False, "responsive": True}
    charts = "\n".join(f'<section id="{name}">{fig.to_html(full_html=False, include_plotlyjs=False, config=config)}</section>'
                       for name, fig in figures)  # fmt: skip
    return _page(report, ident, charts, get_plotlyjs(), window)


def _page(report: Mapping[str, Any], ident: Mapping[str, Any], charts: str, plotly_js: str,
          window: tuple[int, int] | None) -> str:  # fmt: skip
    esc = html.escape
    st = report["step_time"]
    groups = ", ".join(f"{esc(g)} x{n}" for g, n in ident["groups"].items())
    phases = "".join(
        f"<tr><td>{esc(p['phase'])}</td><td>{esc(str(p['bucket'] or '-'))}</td><td>{p['count']}</td>"
        f"<td>{p['total_s']:.2f}</td><td>{p['mean_s'] or 0:.3f}</td><td>{p['p95_s'] or 0:.3f}</td>"
        f"<td>{_pct(p['share'])}</td><td>{_rate(p['tokens_per_s'])}</td></tr>"
        for p in report["phases"][:40]
    )
    persistent = "".join(f"<li>{esc(p['worker_group'])} rank {p['rank']}: flagged in {p['steps_flagged']} of "
                         f"{p['of_steps']} steps</li>" for p in report["stragglers"]["persistent"]) or "<li>none</li>"  # fmt: skip
    sampled = "<p class=note>Sampled run: seconds are those of the sampled phases; ratios are estimates.</p>" if report.get(
        "sampled") else ""  # fmt: skip
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>lens_rl report {esc(str(ident.get('run') or ''))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
.headline {{ display: flex; gap: 18px; flex-wrap: wrap; }}
.card {{ border: 1px solid #ddd; border-radius: 8px; padding: 10px 16px; min-width: 150px; }}
.card b {{ display: block; font-size: 26px; }}
table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border-bottom: 1px solid #eee; padding: 3px 10px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }} .note {{ color: #a15c00; }}
</style>
<script>{plotly_js}</script></head>
<body>
<h1>Where the time went</h1>
<p>run <b>{esc(str(ident.get('run') or '-'))}</b> &middot; model {esc(str(ident.get('model') or '-'))} &middot;
algorithm {esc(str(ident.get('algorithm') or '-'))} &middot; {groups} &middot; {report['spans']:,} spans in {report['files']} files</p>
<div class="headline">
<div class="card" id="headline-goodput">goodput (whole job)<b>{_pct(report['goodput'])}</b></div>
<div class="card" id="headline-steady">steady state (after {report['warmup_steps']} step)<b>{_pct(report['steady_state_goodput'])}</b></div>
<div class="card">step time p50<b>{_secs(st['p50_s'])}</b></div>
<div class="card">step time p95<b>{_secs(st['p95_s'])}</b></div>
<div class="card">steps<b>{len(report['steps'])}</b></div>
</div>
{sampled}
{charts}
<section id="phases"><h2>Phases</h2><table><tr><th>phase</th><th>bucket</th><th>count</th><th>total s</th><th>mean s</th>
<th>p95 s</th><th>share of wall</th><th>tokens/s</th></tr>{phases}</table></section>
<section id="persistent-stragglers"><h2>Persistent stragglers</h2><ul>{persistent}</ul></section>
</body></html>
"""


def write_report(paths: Sequence[Path], output: str | os.PathLike[str], **options: Any) -> int:
    """Write the page to ``output``; returns its size in bytes."""
    page = build_report(paths, **options)
    Path(output).write_text(page, encoding="utf-8")
    return len(page.encode("utf-8"))
