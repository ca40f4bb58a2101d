"""The report's HTML page around its figures: the headline cards, the notes, the phase table (and the GPU
tables where the run has GPU samples) and the persistent stragglers."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from lens_rl.offline.rollup.schema import GoodputReport
from lens_rl.offline.show.formats import percent as _pct
from lens_rl.offline.show.formats import seconds as _secs
from lens_rl.offline.show.formats import share
from lens_rl.offline.show.report.gpu_tables import gpu_card, gpu_section
from lens_rl.offline.show.report.pipeline import pipeline_card

__all__ = ["page"]


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


_MAX_PHASE_ROWS = 60


def page(report: GoodputReport, ident: Mapping[str, Any], charts: str, plotly_js: str) -> str:
    """The whole page: the headline cards, the notes, ``charts`` (the figures' HTML), the phase table and the
    stragglers, with ``plotly_js`` inlined (self-contained, offline)."""
    esc = html.escape
    st = report["step_time"]
    groups = ", ".join(f"{esc(g)} x{n}" for g, n in ident["groups"].items())
    phases = _phase_rows(report)
    degrading, persistent = _stragglers(report)
    notes_html = "".join(f"<p class=note>{esc(n)}</p>" for n in _notes(report))
    steps_done = sum(not s.get("incomplete") for s in report["steps"])
    attempts = report.get("attempts", ())
    warmup = f"after {report['warmup_steps']} step" + (" of each attempt" if len(attempts) > 1 else "")
    restarts = _restarts_card(report)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>lens_rl report {esc(str(ident.get("run") or ""))}</title>
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
<p>run <b>{esc(str(ident.get("run") or "-"))}</b> &middot; model {esc(str(ident.get("model") or "-"))} &middot;
algorithm {esc(str(ident.get("algorithm") or "-"))} &middot; {groups} &middot; {report["spans"]:,} spans in {report["files"]} files</p>
<div class="headline">
<div class="card" id="headline-goodput">goodput (whole job)<b>{_pct(report["goodput"])}</b></div>
{gpu_card(report)}
<div class="card" id="headline-steady">steady state ({warmup})<b>{_pct(report["steady_state_goodput"])}</b></div>
<div class="card">step time p50<b>{_secs(st["p50_s"])}</b></div>
<div class="card">step time p95<b>{_secs(st["p95_s"])}</b></div>
<div class="card">steps<b>{steps_done}</b></div>
<div class="card" id="headline-throughput">tokens/s/GPU end to end<b>{_rate(report.get("throughput", {}).get("e2e_tokens_per_s_per_gpu"))}</b></div>
{restarts}
{pipeline_card(report)}
</div>
{notes_html}
{charts}
<section id="phases"><h2>Phases</h2><table><tr><th>phase</th><th>group</th><th>bucket</th><th>count</th><th>total s</th>
<th>exclusive s</th><th>mean s</th><th>p95 s</th><th>share</th><th>tokens/s</th></tr>{phases}</table>
<p>total: inclusive; exclusive and share: the phase's own time, less its nested phases'; share of the job's wall
for the driver's phases, of the group's lifetimes for a worker group's.</p></section>
{gpu_section(report)}
<section id="persistent-stragglers"><h2>Persistent stragglers</h2><ul>{persistent}</ul></section>
<section id="degrading-ranks"><h2>Degrading ranks</h2><p>each rank's latest window of steps against its own best
(under 0.8: it slowed, even if every rank slowed alike)</p><ul>{degrading}</ul></section>
</body></html>
"""


def _phase_rows(report: GoodputReport) -> str:
    """The phase table's rows (at most :data:`_MAX_PHASE_ROWS`, then how many more)."""
    esc = html.escape
    phases = "".join(
        f"<tr><td>{esc(str(p['phase']))}</td><td>{esc(str(p['worker_group']))}</td><td>{esc(str(p['bucket'] or '-'))}</td>"
        f"<td>{p['count']}</td><td>{p['total_s']:.2f}</td><td>{p.get('exclusive_s') or 0:.2f}</td>"
        f"<td>{p['mean_s'] or 0:.3f}</td><td>{p['p95_s'] or 0:.3f}</td>"
        f"<td>{_pct(p['share'])}</td><td>{_rate(p['tokens_per_s'])}</td></tr>"
        for p in report["phases"][:_MAX_PHASE_ROWS]
    )
    more = len(report["phases"]) - _MAX_PHASE_ROWS
    return phases + (f"<tr><td colspan=9>... {more} more (lens-rl goodput --json)</td></tr>" if more > 0 else "")


def _stragglers(report: GoodputReport) -> tuple[str, str]:
    """The degrading ranks' and the persistent stragglers' list items (``none`` where there is none)."""
    esc = html.escape
    degrading = "".join(
        f"<li>{esc(str(d['worker_group']))} rank {d['rank']} {esc(str(d['phase']))}: score {d['score']:.2f} "
        f"(its latest {d['window']} steps' median {d['latest_s']:.3f} s against its best {d['best_s']:.3f} s)</li>"
        for d in report["stragglers"].get("degrading", ())[:_MAX_PHASE_ROWS]
    )
    persistent = "".join(
        f"<li>{esc(p['worker_group'])} rank {p['rank']}: flagged in {p['steps_flagged']} of {p['of_steps']} steps</li>"
        for p in report["stragglers"]["persistent"]
    )
    return degrading or "<li>none</li>", persistent or "<li>none</li>"


def _notes(report: GoodputReport) -> list[str]:
    """The report's notes, a sampled run's caveat, the unbucketed phases and the warnings, one line each."""
    notes = [*report.get("notes", ())]
    if report.get("sampled"):
        notes.append("Sampled run: seconds are those of the sampled phases; ratios are estimates.")
    notes += [
        f"Unbucketed: {u['phase']!r} ({u['worker_group']}) covers {share(u['share'])} of the steps' wall in no "
        f"bucket" + (f"; did you mean {u['did_you_mean']!r}?" if u["did_you_mean"] else "")
        for u in report.get("unbucketed_phases", ())
    ]
    notes += [f"Warning: {w['message']}" for w in report.get("warnings", ())]
    return notes


def _restarts_card(report: GoodputReport) -> str:
    """A job of several attempts: the card of their count and the seconds lost to restarts (else nothing)."""
    attempts = report.get("attempts", ())
    if len(attempts) <= 1:
        return ""
    why = report["job"]["wasted_reasons"]
    return (
        f'<div class="card" id="headline-attempts">attempts ({why["rerun"] + why["restart"]:.1f} s lost to '
        f"restarts)<b>{len(attempts)}</b></div>"
    )
