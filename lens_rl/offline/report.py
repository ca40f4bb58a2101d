"""``lens-rl report``: one self-contained HTML page that shows where the time went.

Headline figures (job and steady-state goodput, step time, run, model, algorithm, ranks per group), goodput
per step and bucket seconds per step, bucket seconds per worker group and rank (idle made visible), the
phase breakdown, a straggler heatmap (rank x step, time over the group median) with the persistent
stragglers, and a timeline of a window of steps, one row per process, coloured by bucket with hover details.
Built with plotly, its JavaScript inlined: the file opens offline, from disk, with no network fetch
(air-gapped clusters).

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

import html
import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.offline.goodput import analyze_parts, report_from_parts
from lens_rl.offline.parts import BUCKETS, median, step_key
from lens_rl.store import iter_rows, read_head, time_ns

__all__ = ["build_report", "write_report"]

_EXTRA = "pip install 'lens-rl[report]'"
MAX_COLUMNS = 200
MAX_TIMELINE_SPANS = 20_000
#: Above this many ranks in a group, rank charts show the group's mean and its worst ranks only.
MAX_RANKS = 32
WORST_RANKS = 16
COLORS = {"productive": "#2ca02c", "overhead": "#f2b701", "idle": "#9e9e9e", "wasted": "#d62728", None: "#8fb8de"}
#: The heatmap's scale: time over the group median, -100 % .. +100 %, white within the straggler rule's 20 %.
HEAT_LIMIT = 1.0
HEAT_SCALE = [[0.0, "#1a9850"], [0.4, "#ffffff"], [0.6, "#ffffff"], [0.8, "#fc8d59"], [1.0, "#b2182b"]]
HEAT_TICKS = ([-1.0, -0.5, -0.2, 0.0, 0.2, 0.5, 1.0], ["-100%", "-50%", "-20%", "0", "+20%", "+50%", "+100% or more"])


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ImportError(f"lens-rl report needs plotly: {_EXTRA}") from exc
    return go


def step_window(report: Mapping[str, Any], steps: tuple[int, int] | None) -> tuple[int, int] | None:
    """The timeline's steps: ``steps`` as asked (``ValueError`` when the run has none of them), else the
    slowest step and its neighbours, clamped to the steps that exist."""
    known = report.get("step_range")
    if steps is not None:
        if known is not None and (steps[1] < known[0] or steps[0] > known[1]):
            raise ValueError(f"--steps {steps[0]}-{steps[1]} selects no step: the run's steps are {known[0]}-{known[1]}")
        return steps
    slowest = report["slowest_steps"]
    if not slowest or not isinstance(slowest[0]["step"], int) or known is None:
        return None
    step = slowest[0]["step"]
    return max(step - 1, known[0]), min(step + 1, known[1])


def _window_file(path: str | os.PathLike[str], window: tuple[int, int] | None, limit: int,
                 shown: frozenset[tuple[str, int, int]] | None) -> list[dict[str, Any]]:  # fmt: skip
    """The spans of one file inside the step window (steps inherited from parents within the file), of the
    processes ``shown`` ((group, rank, pid); None: every one)."""
    rows = list(iter_rows(path))
    own = {row.s: (row.a or {}).get("rl.step") for _, row in rows}
    parent = {row.s: row.p for _, row in rows}

    def step_of(span_id: Any) -> Any:
        seen = 0
        while span_id is not None and seen < 64:
            step = own.get(span_id)
            if step is not None:
                return step
            span_id, seen = parent.get(span_id), seen + 1
        return None

    out = []
    for head, row in rows:
        key = head.process
        if shown is not None and (key.group, key.rank, key.pid) not in shown:
            continue
        if window is not None:
            step = step_of(row.s)
            if not isinstance(step, int) or not window[0] <= step <= window[1]:
                continue
        attrs = row.a or {}
        out.append({"process": f"{key.group} rank {key.rank} (pid {key.pid})", "group": key.group, "name": str(row.n),
                    "start": time_ns(row.b), "end": time_ns(row.e), "bucket": attrs.get("rl.bucket"),
                    "driver": key.driver, "attrs": {k: v for k, v in list(attrs.items())[:12] if k != "rl.bucket"}})  # fmt: skip
        if len(out) >= limit:
            break
    return out


def _heatmap(parts: Sequence[Any]) -> dict[str, Any]:
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
        columns = [steps[i:i + width] for i in range(0, len(steps), width)]
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
        out[group] = {"ranks": [r for _, r, _ in kept], "steps": labels, "z": [z for _, _, z in kept],
                      "of": len(rows)}  # fmt: skip
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


def _identity(paths: Sequence[Path]) -> dict[str, Any]:
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
    return {"run": first.get("rl.run_id"), "model": first.get("rl.model.name"), "algorithm": first.get("rl.algorithm"),
            "groups": {g: len(r) for g, r in sorted(groups.items())}}  # fmt: skip


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 40}, "height": 360}


def _step_figures(go: Any, report: Mapping[str, Any]) -> list[tuple[str, Any]]:
    step_rows = [r for r in report["steps"] if not r.get("incomplete")]
    if not step_rows:
        return []
    stride = max(1, -(-len(step_rows) // (MAX_COLUMNS * 5)))
    shown = step_rows[::stride]
    xs = [r["step"] for r in shown]
    fig = go.Figure(go.Scatter(x=xs, y=[r["goodput"] for r in shown], mode="lines+markers", name="goodput"))
    fig.update_layout(title="Goodput per step (productive over the step's wall)", yaxis={"tickformat": ".0%", "range": [0, 1]},
                      xaxis_type="category", xaxis_title="step", **_LAYOUT)  # fmt: skip
    bars = go.Figure([go.Bar(x=xs, y=[r["seconds"][b] for r in shown], name=b, marker_color=COLORS[b]) for b in BUCKETS]
                     + [go.Bar(x=xs, y=[r["unattributed_s"] for r in shown], name="unattributed", marker_color="#e0e0e0")])  # fmt: skip
    bars.update_layout(title="Seconds per step, by bucket", barmode="stack", yaxis_title="s", xaxis_type="category",
                       xaxis_title="step", **_LAYOUT)  # fmt: skip
    return [("goodput-per-step", fig), ("bucket-seconds-per-step", bars)]


def _rank_figure(go: Any, report: Mapping[str, Any]) -> tuple[str, Any]:
    """Resource-seconds per rank; a group above MAX_RANKS ranks as its mean, then its worst ranks."""
    rows: list[tuple[str, Mapping[str, float]]] = []
    for group in report["worker_groups"]:
        if group["processes"] > MAX_RANKS:
            mean = {b: group["seconds"][b] / group["processes"] for b in BUCKETS}
            rows.append((f"{group['worker_group']}: mean of {group['processes']} ranks", mean))
    for r in shown_ranks(report["ranks"]):
        rows.append((f"{r['worker_group']} {r['rank']}", r["seconds"]))
    labels = [label for label, _ in rows]
    fig = go.Figure([go.Bar(y=labels, x=[s[b] for _, s in rows], name=b, orientation="h", marker_color=COLORS[b])
                     for b in BUCKETS])  # fmt: skip
    big = [g["worker_group"] for g in report["worker_groups"] if g["processes"] > MAX_RANKS]
    note = f"; {', '.join(big)}: the mean and the {WORST_RANKS} ranks farthest from its median" if big else ""
    fig.update_layout(title=f"Resource-seconds per worker group and rank (a worker's uncovered lifetime is idle{note})",
                      barmode="stack", xaxis_title="s", yaxis={"autorange": "reversed"},
                      **{**_LAYOUT, "height": max(300, 26 * len(rows) + 120)})  # fmt: skip
    return "seconds-per-rank", fig


def _heat_figures(go: Any, parts: Sequence[Any]) -> list[tuple[str, Any]]:
    figures = []
    for group, data in _heatmap(parts).items():
        lo, hi = -HEAT_LIMIT, HEAT_LIMIT
        fig = go.Figure(go.Heatmap(z=data["z"], x=data["steps"], y=[f"rank {r}" for r in data["ranks"]], zmin=lo, zmax=hi,
                                   colorscale=HEAT_SCALE, colorbar={"title": "over median", "tickvals": HEAT_TICKS[0],
                                                                    "ticktext": HEAT_TICKS[1]},
                                   hovertemplate="step %{x}, %{y}: %{z:+.0%} over the median<extra></extra>"))  # fmt: skip
        of = f" (the {len(data['ranks'])} most deviating of {data['of']} ranks)" if len(data["ranks"]) < data["of"] else ""
        fig.update_layout(title=f"Stragglers in {group}: compute time over the group median, rank x step{of}",
                          yaxis={"autorange": "reversed", "type": "category"},
                          **{**_LAYOUT, "height": max(300, 22 * len(data["ranks"]) + 140)})  # fmt: skip
        figures.append((f"stragglers-{group}", fig))
    return figures


def _timeline_figure(go: Any, timeline: list[dict[str, Any]], window: tuple[int, int] | None) -> tuple[str, Any]:
    """One row per process, coloured by bucket; spans with no bucket (umbrellas) drawn first, under their phases."""
    origin = min(s["start"] for s in timeline)
    drivers = {s["process"] for s in timeline if s["driver"]}
    procs = sorted({s["process"] for s in timeline}, key=lambda p: (p not in drivers, p))
    traces = []
    for bucket in (None, *BUCKETS):
        rows = [s for s in timeline if s["bucket"] == bucket]
        if not rows:
            continue
        traces.append(go.Bar(
            y=[s["process"] for s in rows], x=[(s["end"] - s["start"]) / 1e6 for s in rows],
            base=[(s["start"] - origin) / 1e6 for s in rows], orientation="h", name=bucket or "no bucket (umbrellas)",
            marker_color=COLORS[bucket], opacity=0.55 if bucket is None else 0.9, width=0.8 if bucket is None else 0.55,
            customdata=[[s["name"], (s["end"] - s["start"]) / 1e9, json.dumps(s["attrs"], default=str)[:300]]
                        for s in rows],
            hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]:.3f} s<br>%{customdata[2]}<extra></extra>",
        ))  # fmt: skip
    fig = go.Figure(traces)
    where = "all steps" if window is None else (f"step {window[0]}" if window[0] == window[1] else f"steps {window[0]}-{window[1]}")
    fig.update_layout(title=f"Timeline, {where} ({len(timeline)} spans; ms from the window's start)",
                      barmode="overlay", xaxis_title="ms", yaxis={"categoryorder": "array", "categoryarray": procs[::-1]},
                      **{**_LAYOUT, "height": max(320, 34 * len(procs) + 140)})  # fmt: skip
    return "timeline", fig


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

    from lens_rl.offline.parallel import map_files

    parts, stats = analyze_parts(paths, jobs=jobs, use_ray=use_ray, ray_address=ray_address)
    report = report_from_parts(parts, warmup_steps=warmup_steps, files=stats.files, skipped_lines=stats.skipped,
                               notes=stats.notes)  # fmt: skip
    window = step_window(report, steps)
    shown = frozenset((r["worker_group"], r["rank"], r["pid"]) for r in shown_ranks(report["ranks"]))
    timeline: list[dict[str, Any]] = []
    for chunk in map_files(_window_file, paths, window, MAX_TIMELINE_SPANS, shown, jobs=jobs, use_ray=use_ray,
                           ray_address=ray_address, desc="report"):  # fmt: skip
        timeline.extend(chunk[: max(MAX_TIMELINE_SPANS - len(timeline), 0)])
    figures = [*_step_figures(go, report), _rank_figure(go, report), *_heat_figures(go, parts)]
    if timeline:
        figures.append(_timeline_figure(go, timeline, window))
    config = {"displaylogo": False, "responsive": True}
    charts = "\n".join(f'<section id="{name}">{fig.to_html(full_html=False, include_plotlyjs=False, config=config)}</section>'
                       for name, fig in figures)  # fmt: skip
    return _page(report, _identity(paths), charts, get_plotlyjs())


_MAX_PHASE_ROWS = 60


def _page(report: Mapping[str, Any], ident: Mapping[str, Any], charts: str, plotly_js: str) -> str:
    esc = html.escape
    st = report["step_time"]
    groups = ", ".join(f"{esc(g)} x{n}" for g, n in ident["groups"].items())
    phases = "".join(
        f"<tr><td>{esc(str(p['phase']))}</td><td>{esc(str(p['worker_group']))}</td><td>{esc(str(p['bucket'] or '-'))}</td>"
        f"<td>{p['count']}</td><td>{p['total_s']:.2f}</td><td>{p['mean_s'] or 0:.3f}</td><td>{p['p95_s'] or 0:.3f}</td>"
        f"<td>{_pct(p['share'])}</td><td>{_rate(p['tokens_per_s'])}</td></tr>"
        for p in report["phases"][:_MAX_PHASE_ROWS]
    )  # fmt: skip
    more = len(report["phases"]) - _MAX_PHASE_ROWS
    phases += f"<tr><td colspan=9>... {more} more (lens-rl goodput --json)</td></tr>" if more > 0 else ""
    persistent = "".join(f"<li>{esc(p['worker_group'])} rank {p['rank']}: flagged in {p['steps_flagged']} of "
                         f"{p['of_steps']} steps</li>" for p in report["stragglers"]["persistent"]) or "<li>none</li>"  # fmt: skip
    notes = [*report.get("notes", ())]
    if report.get("sampled"):
        notes.append("Sampled run: seconds are those of the sampled phases; ratios are estimates.")
    notes += [f"Unbucketed: {u['phase']!r} ({u['worker_group']}) covers {u['share'] * 100:.0f}% of the steps' wall in no "
              f"bucket" + (f"; did you mean {u['did_you_mean']!r}?" if u["did_you_mean"] else "")
              for u in report.get("unbucketed_phases", ())]  # fmt: skip
    notes_html = "".join(f"<p class=note>{esc(n)}</p>" for n in notes)
    steps_done = sum(not s.get("incomplete") for s in report["steps"])
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
<div class="card">steps<b>{steps_done}</b></div>
</div>
{notes_html}
{charts}
<section id="phases"><h2>Phases</h2><table><tr><th>phase</th><th>group</th><th>bucket</th><th>count</th><th>total s</th>
<th>mean s</th><th>p95 s</th><th>share</th><th>tokens/s</th></tr>{phases}</table>
<p>share: of the job's wall for the driver's phases, of the group's lifetimes for a worker group's.</p></section>
<section id="persistent-stragglers"><h2>Persistent stragglers</h2><ul>{persistent}</ul></section>
</body></html>
"""


def write_report(paths: Sequence[Path], output: str | os.PathLike[str], **options: Any) -> int:
    """Write the page to ``output``; returns its size in bytes."""
    page = build_report(paths, **options)
    Path(output).write_text(page, encoding="utf-8")
    return len(page.encode("utf-8"))
