"""``lens-rl watch``: a live terminal view of a run, refreshed through the cache (a look costs what is new).

Each frame: the run's headline (goodput, steady state, step time), its processes (running, stale, ended,
hung, per group, from the heartbeats), the last steps, and the suspected hangs. Drawn with rich; ``--once``
prints one frame and exits (for a log, a pipe, a non-terminal) with ``status``'s exit status (1: a process
is stale or hung); Ctrl-C quits cleanly.

Example::

    lens-rl watch /shared/lens_traces --interval 30
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lens_rl._errors import require
from lens_rl.offline.show.formats import percent as _pct
from lens_rl.offline.show.formats import wall as _secs

__all__ = ["LAST_STEPS", "frame", "watch"]

#: Step rows a frame shows.
LAST_STEPS = 8
#: Notes (files not read, malformed heartbeats) a frame shows.
MAX_NOTES = 10


def _need_rich() -> None:
    require("rich", "analysis", "lens-rl watch")


def frame(run_dir: Path, *, jobs: int | None = None) -> Any:
    """One frame for the run in ``run_dir``: a rich renderable."""
    return _look(run_dir, jobs)[0]


def _look(run_dir: Path, jobs: int | None) -> tuple[Any, bool]:
    """One frame, and whether the run is ok (no process stale or hung: what ``status`` exits 0 on)."""
    from lens_rl.offline.run.live import goodput_now, has_heartbeats
    from lens_rl.offline.show.status import run_status

    _need_rich()
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    report, notes = goodput_now(run_dir, jobs)
    status = run_status(run_dir) if has_heartbeats(run_dir) else None
    title = Text(f"lens-rl watch  {run_dir.name}  {time.strftime('%H:%M:%S')}", style="bold")
    parts.append(title)
    if report is not None:
        st = report["step_time"]
        head = Table(box=box.SIMPLE, show_header=True)
        for column in ("goodput", "steady state", "step p50", "step p95", "steps", "restarts", "spans"):
            head.add_column(column, justify="right")
        head.add_row(
            _pct(report["goodput"]),
            _pct(report["steady_state_goodput"]),
            _secs(st["p50_s"]),
            _secs(st["p95_s"]),
            str(sum(not s.get("incomplete") for s in report["steps"])),
            str(report["job"].get("restarts", 0)),
            f"{report['spans']:,}",
        )
        parts.append(head)
    if status is not None:
        procs = Table(title="processes", box=box.SIMPLE)
        for column in ("group", "processes", "running", "stale", "ended", "hung", "steps"):
            procs.add_column(column, justify="right" if column != "group" else "left")
        for g in status["groups"]:
            steps = f"{g['min_step']}-{g['max_step']}" if "min_step" in g else "-"
            style = "red" if g["stale"] or g["hung"] else None
            procs.add_row(
                g["worker_group"],
                str(g["processes"]),
                str(g["running"]),
                str(g["stale"]),
                str(g["ended"]),
                str(g["hung"]),
                steps,
                style=style,
            )
        parts.append(procs)
    if report is not None and report["steps"]:
        last = Table(title=f"the last {LAST_STEPS} steps", box=box.SIMPLE)
        for column in ("step", "wall", "goodput", "productive", "overhead", "idle", "wasted", "unattributed"):
            last.add_column(column, justify="right")
        for row in report["steps"][-LAST_STEPS:]:
            seconds = row["seconds"]
            last.add_row(
                str(row["step"]),
                _secs(row["wall_s"]),
                _pct(row["goodput"]),
                *(_secs(seconds[b]) for b in ("productive", "overhead", "idle", "wasted")),
                _secs(row["unattributed_s"]),
                style="dim" if row.get("incomplete") else None,
            )
        parts.append(last)
    if status is not None:
        hung = [r for r in status["processes"] if r["hung"] or r["state"] == "stale"]
        if hung:
            alarms = Table(title="suspected hangs and stale processes", box=box.SIMPLE, style="red")
            for column in ("group", "rank", "host", "pid", "state", "phase", "open for", "usual p95"):
                alarms.add_column(column)
            for r in hung[:20]:
                phase = r["phase"] or {}
                alarms.add_row(
                    r["worker_group"],
                    str(r["rank"]),
                    str(r["host"] or "-"),
                    str(r["pid"]),
                    "HUNG" if r["hung"] else r["state"],
                    str(phase.get("name", "-")),
                    _secs(phase.get("open_s")),
                    _secs(phase.get("p95_s")),
                )
            parts.append(alarms)
        else:
            parts.append(Text("no suspected hang, no stale process", style="green"))
    if report is None and status is None:
        parts.append(Text("nothing recorded yet (no span or heartbeat file)"))
    notes += status["notes"] if status is not None else []
    for note in notes[:MAX_NOTES]:
        parts.append(Text(f"note: {note}", style="dim"))
    if len(notes) > MAX_NOTES:
        parts.append(Text(f"... {len(notes) - MAX_NOTES} more notes (lens-rl status, lens-rl goodput)", style="dim"))
    return Group(*parts), status is None or status["ok"]


def watch(run_dir: Path, *, interval: float = 10.0, once: bool = False, jobs: int | None = None) -> int:
    """Draw the run every ``interval`` seconds until Ctrl-C (``once``: one frame); returns the exit status."""
    _need_rich()
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if once:
        shown, ok = _look(run_dir, jobs)
        console.print(shown)
        return 0 if ok else 1
    try:
        with Live(frame(run_dir, jobs=jobs), console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(frame(run_dir, jobs=jobs))
    except KeyboardInterrupt:
        return 0
