"""The async pipeline for people: the goodput table's ``pipeline`` section and watch's line, from the report's
``pipeline`` (:mod:`lens_rl.offline.rollup.pipeline`); nothing without it.

Example::

    print("\n".join(format_pipeline(report)))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lens_rl.offline.rollup.schema import GoodputReport

__all__ = ["format_pipeline", "pipeline_line"]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _num(value: Any) -> str:
    return "-" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value))


def format_pipeline(report: GoodputReport) -> list[str]:
    """The table's pipeline section: pools (busy, idle), overlap, bubble, weight sync, staleness, the verdict
    with its figures and what to move, and the windows whose verdict differs from the job's."""
    pipe = report.get("pipeline")
    if not pipe:
        return []
    if pipe["steps"] or not pipe["per_step"]:
        over = f"the steady-state wall: {pipe['wall_s']:.2f}s, {pipe['steps']} steps"
    else:  # (every step read is a warm-up one: their wall, said as such)
        over = f"the warm-up steps' wall (no steady-state step): {pipe['wall_s']:.2f}s, {len(pipe['per_step'])} steps"
    lines = [
        "",
        f"pipeline (async RL: who waits for whom, over {over})",
        f"{'  pool':12s}{'groups':28s}{'ranks':>6s}{'busy':>8s}{'idle':>8s}{'busy s':>10s}",
    ]
    for pool in pipe["pools"]:
        groups = ", ".join(pool["worker_groups"])
        lines.append(
            f"  {pool['pool']:10s}{groups[:27]:28s}{len(pool['ranks']):>6d}{_pct(pool['busy']):>8s}"
            f"{_pct(pool['idle']):>8s}{pool['busy_s']:10.2f}"
        )
    lines.append(
        f"  overlap {_pct(pipe['overlap'])}   bubble {_pct(pipe['bubble'])}   imbalance {_pct(pipe['imbalance'])}"
    )
    sync = pipe["weight_sync"]
    if sync["count"] or sync["total_s"]:
        lines.append(
            f"  weight sync: {sync['count']} sync(s), {sync['total_s']:.2f}s in all, pause {_num(sync['pause_s'])}s "
            f"({_pct(sync['pause_share'])} of the wall: the rollout pool generated nothing)"
        )
    stale = pipe["staleness"]
    if stale:
        bound = stale["bound"]
        bounds = f"bounds {', '.join(map(str, bound))}" if isinstance(bound, list) else f"bound {bound}"
        beyond = "" if stale["beyond"] is None else f", {_pct(stale['beyond'])} of trajectories beyond the {bounds}"
        lines.append(
            f"  staleness (policy - trajectory version, token-weighted): mean {_num(stale['mean'])}, "
            f"p90 {_num(stale['p90'])}, max {_num(stale['max'])}{beyond}"
        )
    lines.append(f"  {pipeline_line(report)}")
    verdict = pipe["verdict"]
    lines.append(f"  move: {verdict['move']}")
    odd = [w for w in verdict["windows"] if w["verdict"] != verdict["verdict"]]
    for w in odd[:5]:
        lines.append(f"  steps {w['first_step']}-{w['last_step']}: {w['verdict']} ({_figures(w['figures'])})")
    if len(odd) > 5:
        lines.append(f"  ... {len(odd) - 5} more windows differ (--json pipeline.verdict.windows)")
    return lines


def pipeline_line(report: GoodputReport) -> str:
    """One line: the verdict and the figures that decided it (watch's frame shows it)."""
    pipe = report.get("pipeline")
    if not pipe:
        return ""
    verdict = pipe["verdict"]
    return f"verdict: {verdict['verdict'] or 'none'} ({_figures(verdict['figures'])})"


def _figures(figures: Mapping[str, Any]) -> str:
    return (
        f"trainer idle {_pct(figures['trainer_idle'])}, rollout idle {_pct(figures['rollout_idle'])}, "
        f"sync pause {_pct(figures['sync_pause_share'])}"
    )
