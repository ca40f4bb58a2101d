"""The report's section of profiler captures: each profiled step linked to its file (a path relative to the page),
and a torch capture's summary per phase."""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path

from lens_rl.offline.rollup.schema import ProfileRow

__all__ = ["profiles_section", "with_profiles"]


def profiles_section(captures: Sequence[ProfileRow], run: Path, output: Path) -> str:
    """``<section id="profiles">``: one row per capture, its step linked to its file."""
    esc = html.escape
    rows = []
    for row in captures:
        path = row["path"]
        if path is not None and row["exists"]:
            href = os.path.relpath(run / path, output.resolve().parent)
            link = f'<a href="{esc(Path(href).as_posix())}">{esc(path)}</a>'
        else:
            link = esc(str(path or "-")) + " (missing)"
        phases = "; ".join(
            f"{esc(p['phase'])}: cpu ops {p['cpu_op_s']:.3f}s of {p['wall_s']:.3f}s"
            + ("" if p["kernel_s"] is None else f", kernels {p['kernel_s']:.3f}s")
            + ("" if p["no_kernel_share"] is None else f", no kernel running {p['no_kernel_share']:.0%}")
            for p in row["summary"] or []
        )
        rows.append(
            f"<tr><td>step {esc(str(row['step']))}</td><td>{esc(row['worker_group'])}</td><td>{row['rank']}</td>"
            f"<td>{esc(row['backend'])}</td><td>{esc(row['reason'])}</td><td>{link}</td><td>{phases or '-'}</td></tr>"
        )
    return (
        '<section id="profiles"><h2>Profiled steps</h2><table><tr><th>step</th><th>group</th><th>rank</th>'
        "<th>backend</th><th>why</th><th>capture</th><th>phases in the window</th></tr>"
        + "".join(rows)
        + "</table></section>"
    )


def with_profiles(page: str, run: Path, output: Path) -> str:
    """``page`` with the captures' section before its end (unchanged when the run has none)."""
    from lens_rl.offline.run.profiles import profiles_of

    captures = profiles_of(run)
    if not captures:
        return page
    head, sep, tail = page.rpartition("</body>")
    return f"{head}{profiles_section(captures, run, output)}\n{sep}{tail}" if sep else page
