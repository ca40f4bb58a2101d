"""The report's GPU lanes: under the timeline, one lane per rank shown there, its devices' busy % over the
timeline's window (the same ms axis), blank where there is no reading (a device without the counter or
flagged unavailable: never 0 %). Only where the run has GPU samples.

Example::

    figures.append(gpu_lane_figure(go, data.gpu_lanes, data.window))
"""

from __future__ import annotations

from typing import Any

__all__ = ["gpu_lane_figure"]

_SCALE = [[0.0, "#f0f0f0"], [0.05, "#d9d9d9"], [0.5, "#a1d99b"], [1.0, "#2ca02c"]]


def gpu_lane_figure(go: Any, lanes: list[dict[str, Any]], window: tuple[int, int] | None) -> tuple[str, Any] | None:
    """A heat lane per rank (busy % per stretch of the window), None without lanes."""
    if not lanes:
        return None
    where = (
        "all steps"
        if window is None
        else (f"step {window[0]}" if window[0] == window[1] else f"steps {window[0]}-{window[1]}")
    )
    lanes = sorted(lanes, key=lambda lane: lane["process"])
    fig = go.Figure(
        go.Heatmap(
            z=[lane["busy"] for lane in lanes],
            x=lanes[0]["ms"],
            y=[lane["process"] for lane in lanes],
            zmin=0,
            zmax=100,
            colorscale=_SCALE,
            colorbar={"title": "GPU busy %"},
            customdata=[[", ".join(lane["devices"])] * len(lane["ms"]) for lane in lanes],
            hovertemplate="%{y}<br>%{x:.0f} ms: %{z:.0f} % busy<br>%{customdata}<extra></extra>",
            hoverongaps=False,
        )
    )
    fig.update_layout(
        title=f"GPU busy per rank, {where} (the timeline's window and axis; blank: no reading)",
        xaxis_title="ms",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        height=max(200, 34 * len(lanes) + 140),
    )
    return "gpu-lanes", fig
