"""The report page's GPU block: the job's GPU goodput as a card beside the clock's, and a section of busy and
idle by the device per (group, phase) and per rank, with the devices that have no reading: the goodput
table's GPU block (:mod:`lens_rl.offline.show.gpu_table`, the same cells) as HTML. Nothing where the run has
no GPU samples.

Example::

    cards += gpu_card(report)
    sections += gpu_section(report)
"""

from __future__ import annotations

import html
from typing import Any

from lens_rl.offline.show.formats import percent
from lens_rl.offline.show.gpu_table import COLUMNS, cells, shown_ranks, unread

__all__ = ["MAX_PHASE_ROWS", "gpu_card", "gpu_section"]

#: GPU phase rows on the page (past it, how many more: a page of any run stays a few screens tall)
MAX_PHASE_ROWS = 60


def gpu_card(report: Any) -> str:
    """The headline card of the job's GPU goodput (productive seconds weighted by GPU busy over the wall's
    GPU-seconds), or nothing."""
    gpu = report.get("gpu")
    if not gpu:
        return ""
    good = gpu["goodput"]
    return (
        f'<div class="card" id="headline-gpu-goodput">GPU goodput ({good["devices"]} GPUs)'
        f"<b>{percent(good['goodput'])}</b></div>"
    )


def _row(first: list[str], row: Any) -> str:
    return "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (*first, *cells(row))) + "</tr>"


def gpu_section(report: Any) -> str:
    """The GPU section: a table of the phases' and one of the ranks' GPU figures, the devices with no reading."""
    gpu = report.get("gpu")
    if not gpu:
        return ""
    heads = "".join(f"<th>{name}</th>" for name, _width in COLUMNS)
    phases = "".join(
        _row([str(p["phase"]), str(p["worker_group"]), str(p["bucket"] or "-"), f"{p['total_s']:.2f}"], p)
        for p in gpu["phases"][:MAX_PHASE_ROWS]
    )
    more = len(gpu["phases"]) - MAX_PHASE_ROWS
    if more > 0:
        phases += f"<tr><td colspan={4 + len(COLUMNS)}>... {more} more (lens-rl goodput --json)</td></tr>"
    shown, note = shown_ranks(gpu["ranks"])
    ranks = "".join(_row([f"{r['worker_group']} rank {r['rank']}", ", ".join(r["devices"])], r) for r in shown)
    missing = "".join(f"<li>{html.escape(line)}</li>" for line in unread(gpu))
    return (
        '<section id="gpu"><h2>GPU by phase</h2><table><tr><th>phase</th><th>group</th><th>bucket</th>'
        f"<th>total s</th>{heads}</tr>{phases}</table>"
        f"<h2>GPU by rank{html.escape(note)}</h2><table><tr><th>rank</th><th>devices</th>{heads}</tr>{ranks}</table>"
        "<p>gpu busy: time-weighted utilisation while the phase ran; idle: seconds its GPUs read 0 %, summed as "
        "total is; mem: peak memory used; SM, tensor: activity where the GPU reports it; unavailable: no reading"
        f"</p>{f'<ul>{missing}</ul>' if missing else ''}</section>"
    )
