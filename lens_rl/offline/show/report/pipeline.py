"""The report's async-pipeline card and per-step figure, from the report's ``pipeline``
(:mod:`lens_rl.offline.rollup.pipeline`); nothing without it.

Example::

    card = pipeline_card(report)               # HTML: the verdict, busy per pool, overlap, pause, staleness
    name, fig = pipeline_figure(go, report)    # busy per pool, imbalance (its verdict), overlap, pause, staleness
"""

from __future__ import annotations

import html
from typing import Any

from lens_rl.offline.rollup.schema import GoodputReport
from lens_rl.offline.show.pipeline import pipeline_line

__all__ = ["pipeline_card", "pipeline_figure"]

#: Per-step points drawn at most (a longer run is strided).
MAX_POINTS = 2000


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def pipeline_card(report: GoodputReport) -> str:
    """The headline card: the verdict in large, and below it busy per pool, overlap, bubble, the sync pause,
    the staleness and what to move."""
    pipe = report.get("pipeline")
    if not pipe:
        return ""
    esc = html.escape
    verdict = pipe["verdict"]
    pools = ", ".join(f"{p['pool']} busy {_pct(p['busy'])}" for p in pipe["pools"])
    sync = pipe["weight_sync"]
    stale = pipe["staleness"]
    extra = f"; staleness mean {stale['mean']:.2f}, max {stale['max']}" if stale else ""
    return (
        f'<div class="card" id="headline-pipeline">pipeline (async RL)<b>{esc(verdict["verdict"] or "no verdict")}</b>'
        f"<small>{esc(pools)}; overlap {_pct(pipe['overlap'])}, bubble {_pct(pipe['bubble'])}; weight-sync pause "
        f"{_pct(sync['pause_share'])}{esc(extra)}<br>{esc(pipeline_line(report))}<br>move: {esc(verdict['move'])}"
        "</small></div>"
    )


def pipeline_figure(go: Any, report: GoodputReport) -> tuple[str, Any] | None:
    """Per step: each pool's busy share, the imbalance (its points say the step's verdict), the overlap and
    bubble (lines, shares of the step's wall), the weight-sync pause (bars, seconds) and the mean staleness (a
    line on its own axis). None without steps."""
    pipe = report.get("pipeline")
    rows = pipe["per_step"] if pipe else []
    if not rows:
        return None
    stride = max(1, -(-len(rows) // MAX_POINTS))
    shown = rows[::stride]
    xs = [r["step"] for r in shown]
    pools = sorted({pool for r in shown for pool in r["busy"]})
    traces = [go.Scatter(x=xs, y=[r["busy"].get(pool) for r in shown], name=f"{pool} busy") for pool in pools]
    if any(r.get("imbalance") is not None or r.get("verdict") for r in shown):  # (a kept report may predate them)
        traces.append(
            go.Scatter(
                x=xs,
                y=[r.get("imbalance") for r in shown],
                name="imbalance",
                text=[r.get("verdict") or "no verdict" for r in shown],
                hovertemplate="step %{x}: imbalance %{y:.1%}, %{text}<extra></extra>",
                line={"dash": "longdash"},
            )
        )
    traces.append(go.Scatter(x=xs, y=[r["overlap"] for r in shown], name="overlap", line={"dash": "dot"}))
    traces.append(go.Scatter(x=xs, y=[r["bubble"] for r in shown], name="bubble", line={"dash": "dash"}))
    traces.append(go.Bar(x=xs, y=[r["pause_s"] or 0.0 for r in shown], name="sync pause (s)", yaxis="y2", opacity=0.4))
    if any(r["staleness_mean"] is not None for r in shown):
        traces.append(go.Scatter(x=xs, y=[r["staleness_mean"] for r in shown], name="staleness mean", yaxis="y2"))
    fig = go.Figure(traces)
    fig.update_layout(
        title="Pipeline per step: busy per pool, imbalance (hover: the verdict), overlap and bubble (share of the "
        "step), sync pause and staleness",
        xaxis_title="step",
        yaxis={"title": "share of the step's wall", "range": [0, 1.05]},
        yaxis2={"title": "s / versions", "overlaying": "y", "side": "right"},
        height=380,
        margin={"l": 60, "r": 60, "t": 50, "b": 40},
    )
    return "pipeline", fig
