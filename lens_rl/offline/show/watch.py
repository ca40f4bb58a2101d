"""``lens-rl watch``: a live terminal view of a run, refreshed through the cache (a look costs what is new).

Each frame: the run's headline (goodput, steady state, step time), its processes (running, stale, ended,
hung, per group, from the heartbeats), the last steps, and the suspected hangs (a stale process with the phase
it was last seen in and ``pid gone`` where this host can tell, as ``status`` shows it). Drawn with rich; ``--once``
prints one frame and exits (for a log, a pipe, a non-terminal) with ``status``'s exit status (1: a process
is stale or hung), and names each entry it could not read in one line on stderr, as every reading command
does (the live view shows them in its frame, which a line on stderr would be drawn over); Ctrl-C quits
cleanly.

Example::

    lens-rl watch /shared/lens_traces --interval 30
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from lens_rl._errors import require
from lens_rl.offline.show.formats import percent as _pct
from lens_rl.offline.show.formats import text as _shown
from lens_rl.offline.show.formats import wall as _secs

__all__ = ["LAST_STEPS", "frame", "group_gpu_busy", "watch"]

#: Step rows a frame shows.
LAST_STEPS = 8
#: Notes (files not read, malformed heartbeats) a frame shows.
MAX_NOTES = 10
#: The width a frame is drawn at into a pipe or a file (no ``COLUMNS``): every cell whole.
PIPE_WIDTH = 250


def _need_rich() -> None:
    require("rich", "analysis", "lens-rl watch")


def frame(run_dir: Path, *, jobs: int | None = None) -> Any:
    """One frame for the run in ``run_dir``: a rich renderable."""
    return _look(run_dir, jobs)[0]


def _look(run_dir: Path, jobs: int | None, said: list[str] | None = None) -> tuple[Any, bool]:
    """One frame, and whether the run is ok (no process stale or hung: what ``status`` exits 0 on).
    ``said``: where the notes (entries not read) go instead of the frame (None: in the frame)."""
    from lens_rl.offline.run.live import goodput_now, has_heartbeats
    from lens_rl.offline.show.status import run_status

    _need_rich()
    from rich.console import Group
    from rich.text import Text

    report, notes = goodput_now(run_dir, jobs)
    status = run_status(run_dir) if has_heartbeats(run_dir) else None
    parts: list[Any] = [Text(f"lens-rl watch  {_shown(run_dir.name)}  {time.strftime('%H:%M:%S')}", style="bold")]
    if report is not None:
        parts.append(_headline(report))
        if report.get("pipeline"):  # the async pipeline's verdict and the figures that decided it
            from lens_rl.offline.show.pipeline import pipeline_line

            parts.append(Text(pipeline_line(report)))
    if status is not None:
        parts.append(_processes(status))
    if report is not None and report["steps"]:
        parts.append(_last_steps(report))
    if status is not None:
        parts.append(_hangs(status))
    if report is None and status is None:
        parts.append(Text("nothing recorded yet (no span or heartbeat file)"))
    notes += status["notes"] if status is not None else []
    if said is None:
        parts += _notes(notes)
    else:
        said += notes
    return Group(*parts), status is None or status["ok"]


def _cell(value: Any) -> Any:
    """A store's value as a table cell: its control characters escaped (:func:`~lens_rl.offline.show.formats.text`),
    and plain text, never read as rich markup (a group named ``[/]`` is shown as it is)."""
    from rich.text import Text

    return Text(_shown(value))


def _table(columns: tuple[str, ...], left: tuple[str, ...] = (), **options: Any) -> Any:
    """A rich table of ``columns``, right-justified but those in ``left``."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE, **options)
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right", no_wrap=column in left)
    return table


def _headline(report: Any) -> Any:
    """The run's goodput (and its GPU goodput beside it, where it has GPU samples), steady state, step time,
    steps, restarts and spans."""
    st = report["step_time"]
    gpu = report.get("gpu")
    columns = ("goodput", *(("GPU goodput",) if gpu else ()), "steady state", "step p50", "step p95", "steps")
    head = _table((*columns, "restarts", "spans"), show_header=True)
    head.add_row(
        _pct(report["goodput"]),
        *((_pct(gpu["goodput"]["goodput"]),) if gpu else ()),
        _pct(report["steady_state_goodput"]),
        _secs(st["p50_s"]),
        _secs(st["p95_s"]),
        str(sum(not s.get("incomplete") for s in report["steps"])),
        str(report["job"].get("restarts", 0)),
        f"{report['spans']:,}",
    )
    return head


def _processes(status: Any) -> Any:
    """The processes per worker group: running, stale, ended, hung, the steps they are at and, where a process
    has GPUs, their busy (:func:`group_gpu_busy`)."""
    busy = group_gpu_busy(status["processes"])
    columns = ("group", "processes", "running", "stale", "ended", "hung", "steps") + (("gpu busy",) if busy else ())
    procs = _table(columns, ("group",), title="processes")
    for g in status["groups"]:
        steps = f"{g['min_step']}-{g['max_step']}" if "min_step" in g else "-"
        style = "red" if g["stale"] or g["hung"] else None
        gpu = busy.get(g["worker_group"])
        procs.add_row(
            _cell(g["worker_group"]),
            str(g["processes"]),
            str(g["running"]),
            str(g["stale"]),
            str(g["ended"]),
            str(g["hung"]),
            steps,
            *((("-" if gpu is None else f"{gpu:.0%}"),) if busy else ()),
            style=style,
        )
    return procs


def group_gpu_busy(processes: list[Any]) -> dict[str, float | None]:
    """worker group -> the mean GPU busy (a fraction 0..1) of its running processes with a reading (None: none has
    one); empty where no process of the run has GPUs."""
    readings: dict[str, list[float]] = {}
    for r in processes:
        gpu = r.get("gpu")
        if gpu is None:
            continue
        got = readings.setdefault(r["worker_group"], [])
        if r["state"] == "running" and gpu.get("busy") is not None:
            got.append(gpu["busy"])
    return {group: sum(got) / len(got) if got else None for group, got in readings.items()}


def _last_steps(report: Any) -> Any:
    """The last :data:`LAST_STEPS` step rows (an incomplete one dimmed)."""
    last = _table(
        ("step", "wall", "goodput", "productive", "overhead", "idle", "wasted", "unattributed"),
        title=f"the last {LAST_STEPS} steps",
    )
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
    return last


def _hangs(status: Any) -> Any:
    """The suspected hangs and stale processes (at most 20), or a line saying there is none. A stale process
    has no open phase: as in ``status``, its row says where it was last seen (the phase open at its last
    heartbeat, open for how long then) and ``pid gone`` where this host can tell its pid is dead."""
    from rich.text import Text

    hung = [r for r in status["processes"] if r["hung"] or r["state"] == "stale" or (r.get("gpu") or {}).get("idle")]
    if not hung:
        return Text("no suspected hang, no stale process, no idle GPU", style="green")
    columns = ("group", "rank", "host", "pid", "state", "phase", "open for", "usual p95")
    alarms = _table(columns, columns, title="suspected hangs, stale processes, idle GPUs", style="red")
    for r in hung[:20]:
        phase = r["phase"] or {}
        last = r.get("last_phase") if r["phase"] is None else None
        state = "HUNG" if r["hung"] else r["state"] if r["state"] == "stale" else "GPU IDLE"
        alarms.add_row(
            _cell(r["worker_group"]),
            _cell(r["rank"]),
            _cell(r["host"] or None),
            _cell(r["pid"]),
            state + (", pid gone" if r.get("gone") else ""),
            _cell(phase.get("name")) if last is None else Text(f"last seen in {_shown(last['name'])}"),
            _secs((phase if last is None else last).get("open_s")),
            _secs(phase.get("p95_s")),
        )
    return alarms


def _notes(notes: list[str]) -> list[Any]:
    """At most :data:`MAX_NOTES` notes, dimmed, and how many more there are."""
    from rich.text import Text

    out = [Text(f"note: {_shown(note)}", style="dim") for note in notes[:MAX_NOTES]]
    if len(notes) > MAX_NOTES:
        out.append(Text(f"... {len(notes) - MAX_NOTES} more notes (lens-rl status, lens-rl goodput)", style="dim"))
    return out


def _pipe_width() -> int | None:
    """The console's width: the terminal's (rich's own measure) or ``COLUMNS``; into a pipe or a file, wide
    enough that no cell is cut (rich draws a non-terminal 80 columns wide, a stale row's last-seen phase and the
    alarms' columns then end in an ellipsis in a log)."""
    if "COLUMNS" in os.environ or sys.stdout.isatty():
        return None
    return PIPE_WIDTH


def watch(run_dir: Path, *, interval: float = 10.0, once: bool = False, jobs: int | None = None) -> int:
    """Draw the run every ``interval`` seconds until Ctrl-C (``once``: one frame); returns the exit status."""
    _need_rich()
    from rich.console import Console
    from rich.live import Live

    console = Console(width=_pipe_width())
    if once:
        notes: list[str] = []
        shown, ok = _look(run_dir, jobs, notes)
        for note in notes:
            print(f"lens-rl: {note}", file=sys.stderr)
        console.print(shown)
        return 0 if ok else 1
    try:
        with Live(frame(run_dir, jobs=jobs), console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(frame(run_dir, jobs=jobs))
    except KeyboardInterrupt:
        return 0
