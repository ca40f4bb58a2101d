"""``lens-rl status``: what every process of a run is doing now, from its heartbeats.

One row per process of the run's latest attempt (group, rank, host, pid, attempt; ``running``, ``stale``
(no heartbeat for 3 of its intervals, or at once where this host can tell its pid is dead: ``gone``, say a
``Pool`` worker that ``terminate()`` killed) or ``ended`` (said so, or alive until its driver ended: launchers
such as Ray kill their workers without a goodbye); its step; its GPUs' busy percent (``gpu``, :mod:`~lens_rl.offline.show.gpu_live`); its innermost open phase, how
long it has been open against that phase's usual p95 and longest run (a running process only: a stale or
ended one has no open phase, and ``last_phase`` says where it was last seen); ``HUNG`` when the watchdog flagged it;
``GPU IDLE`` when its GPUs have read 0 % past ``gpu_idle_alert_s`` while a phase is open), groups summed,
the driver's step first. A heartbeat with a field of the wrong JSON type (or an ``interval_ms`` outside
1..:data:`INTERVAL_MAX_MS`, or a ``written_ns`` outside the store's plausible times, years 2000 to 2200) is a note and its row says ``unreadable``; one dated more than an interval (and a minute) ahead of this clock is judged by its file's
modification time and its row says ``clock ahead``. Processes of earlier attempts are counted apart
(superseded), never as stale. The
run is ``ok`` when nothing is stale or hung: the command's exit status (0, else 1) is what a cron job or a
Slurm script alerts on. Above :data:`MAX_ROWS` processes, the table shows each group's summary and the
abnormal processes only.

Example::

    report = run_status(Path("lens_traces/run42"))
    print(format_status(report))
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.offline.run.beat_check import INTERVAL_MAX_MS, int64, malformed
from lens_rl.offline.run.live import LIVE_MIN_INTERVAL_MS, gone, heartbeats
from lens_rl.offline.show.formats import age as _secs
from lens_rl.offline.show.formats import text as _shown
from lens_rl.offline.show.gpu_live import gpu_state, gpu_text

__all__ = ["CLOCK_AHEAD_S", "MAX_ROWS", "SCHEMA", "STALE_INTERVALS", "format_status", "malformed", "run_status"]

SCHEMA = "lens_rl.status/1"
#: A process whose heartbeat is older than this many of its intervals is stale (killed, frozen, lost).
STALE_INTERVALS = 3
#: Up to this many processes every row is shown; above, group summaries and the abnormal rows.
MAX_ROWS = 32
#: Abnormal rows listed at most (the rest counted).
MAX_LISTED = 50


#: A heartbeat dated this far ahead of the reader's clock (and more than one of its intervals) was written
#: on a node whose clock runs ahead: it is judged by its file's modification time instead.
CLOCK_AHEAD_S = 60.0


def _innermost(open_phases: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The open phase to show: the latest opened among the flagged ones, else the latest opened."""
    if not open_phases:
        return None
    hung = [p for p in open_phases if p.get("hang")]
    return max(hung or open_phases, key=lambda p: p.get("start_ns") or 0)


def _unreadable_row(beat: Mapping[str, Any]) -> dict[str, Any]:
    """A malformed heartbeat's row: who wrote it, where that reads, and ``unreadable``."""
    resource: Mapping[str, Any] = beat["resource"] if type(beat.get("resource")) is dict else {}

    def field(value: Any, kind: type, default: Any) -> Any:
        return value if (int64(value) if kind is int else type(value) is kind) else default

    return {
        "worker_group": field(resource.get("rl.worker_group"), str, "worker"),
        "rank": field(resource.get("nv.dl.rank"), int, 0),
        "host": field(resource.get("host.name"), str, None),
        "pid": field(beat.get("pid"), int, None),
        "attempt": field(resource.get("rl.attempt"), int, 0),
        "driver": beat.get("role") == "driver",
        "state": "unreadable",
        "heartbeat_age_s": None,
        "step": None,
        "phase": None,
        "hung": False,
        "hangs": 0,
        "open_phases": 0,
        "last_phase": None,
        "gone": False,
        "written_ns": None,
        "interval_ms": 0,
        "clock_ahead": False,
        "gpu": None,
    }


def _row(beat: dict[str, Any], now_ns: int) -> dict[str, Any]:
    resource = beat.get("resource") or {}
    interval_ms = beat.get("interval_ms") or 0
    written = beat.get("written_ns") or 0
    ahead = (written - now_ns) / 1e9 > max(interval_ms / 1000, CLOCK_AHEAD_S)
    mtime = beat.get("mtime_ns")
    if ahead and type(mtime) is int:  # the writer's clock runs ahead: its file's time says when it wrote
        written = mtime
    age_s = max(now_ns - written, 0) / 1e9
    lost = beat.get("state") != "ended" and gone(beat)
    state = "stale" if lost else _state(beat, interval_ms, age_s)
    # only a running process has open phases: what a stale or ended one had open at its last heartbeat is
    # where it was last seen, never open for ever longer
    running = state == "running"
    last_open = beat.get("open") or []
    open_phases = last_open if running else []
    phase = _innermost(last_open)
    last = beat.get("last_step") or {}
    step = phase.get("step") if phase is not None and phase.get("step") is not None else last.get("step")
    if step is None:  # (a worker between its phases: the step of the latest one it ended)
        step = beat.get("phase_step")
    shown = _shown_phase(beat, phase, now_ns, age_s if ahead else None) if phase is not None and running else None
    return {
        "worker_group": str(resource.get("rl.worker_group", "worker")),
        "rank": resource.get("nv.dl.rank", 0),
        "host": resource.get("host.name"),
        "pid": beat.get("pid"),
        "attempt": resource.get("rl.attempt", 0),
        "driver": beat.get("role") == "driver",
        "state": state,
        "heartbeat_age_s": round(age_s, 3),
        "step": step,
        "phase": shown,
        "last_phase": _last_phase(beat, phase) if phase is not None and not running else None,
        "hung": any(p.get("hang") for p in open_phases),
        "hangs": beat.get("hangs", 0),
        "open_phases": len(open_phases),
        "gone": lost,
        "written_ns": written,
        "interval_ms": interval_ms,
        "clock_ahead": ahead,
        "gpu": gpu_state(beat, open_phases=len(open_phases), running=running),
    }


def _last_phase(beat: Mapping[str, Any], phase: Mapping[str, Any]) -> dict[str, Any]:
    """Where a process no longer running was last seen: its innermost phase open at its last heartbeat, and
    how long it had been open then (in the writer's own clock)."""
    opened, written = phase.get("start_ns"), beat.get("written_ns")
    open_s: Any = phase.get("age_s")
    if isinstance(opened, int) and isinstance(written, int):
        open_s = round(max(written - opened, 0) / 1e9, 3)
    return {"name": phase.get("name"), "step": phase.get("step"), "open_s": open_s}


def _state(beat: Mapping[str, Any], interval_ms: int, age_s: float) -> str:
    """``ended`` (its goodbye), ``stale`` (no heartbeat for :data:`STALE_INTERVALS` of its intervals), else
    ``running``."""
    if beat.get("state") == "ended":
        return "ended"
    # (judged by the interval kept: a writer never rewrites its heartbeat more often than every
    # LIVE_MIN_INTERVAL_MS, whatever an older one said)
    if interval_ms and age_s > STALE_INTERVALS * max(interval_ms, LIVE_MIN_INTERVAL_MS) / 1000:
        return "stale"
    return "running"


def _shown_phase(
    beat: Mapping[str, Any], phase: Mapping[str, Any], now_ns: int, ahead_age_s: float | None
) -> dict[str, Any]:
    """The open phase a row shows: how long it has been open, its usual p95 and longest, its timeout, whether
    it hangs. ``ahead_age_s``: the heartbeat's age where the writer's clock runs ahead (then the phase's start
    is in that clock: its age when written, plus the time since, is how long it has been open)."""
    usual = (beat.get("phases") or {}).get(phase.get("name")) or {}
    opened, age = phase.get("start_ns"), phase.get("age_s")
    if ahead_age_s is not None:
        open_s = round(age + ahead_age_s, 3) if isinstance(age, (int, float)) else None
    else:
        open_s = round(max(now_ns - opened, 0) / 1e9, 3) if isinstance(opened, int) else age
    return {
        "name": phase.get("name"),
        "step": phase.get("step"),
        "open_s": open_s,
        "p95_s": usual.get("p95_s"),
        "max_s": usual.get("max_s"),
        "timeout_s": phase.get("timeout_s"),
        "hung": bool(phase.get("hang")),
    }


def _row_or_unreadable(beat: dict[str, Any], now_ns: int, notes: list[str]) -> dict[str, Any]:
    """A heartbeat's row; a malformed one's is ``unreadable``, and named in ``notes``."""
    why = malformed(beat)
    if why is None:
        return _row(beat, now_ns)
    if why == "interval_ms" and type(beat["interval_ms"]) is int:
        why = f"interval_ms {beat['interval_ms']} outside 1..{INTERVAL_MAX_MS}"
    elif why == "written_ns" and type(beat["written_ns"]) is int:  # (past 64 bits too: a time, not a type)
        why = f"written_ns {beat['written_ns']} is outside the plausible years, 2000 to 2200"
    else:
        why += " has the wrong JSON type"
    notes.append(f"{Path(beat['path']).name}: a malformed heartbeat ({why}); unreadable")
    return _unreadable_row(beat)


def _reaped(rows: list[dict[str, Any]]) -> None:
    """A worker alive until its driver ended (its last heartbeat within 3 of its intervals before the driver's
    last one, ``ended``) ended with the job: Ray and other launchers kill their workers without a goodbye.
    One that went quiet earlier stays stale (killed mid-run)."""
    ends = [r["written_ns"] for r in rows if r["driver"] and r["state"] == "ended"]
    if not ends:
        return
    driver_end = max(ends)
    for r in rows:
        if r["state"] == "stale" and not r["driver"]:
            if r["written_ns"] >= driver_end - STALE_INTERVALS * r["interval_ms"] * 1_000_000:
                r["state"], r["ended_with_job"] = "ended", True


def _order(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """The driver first, then by group and rank (numbers in order), then pid."""
    rank = row["rank"]
    return (
        not row["driver"],
        row["worker_group"],
        not isinstance(rank, int),
        rank if isinstance(rank, int) else 0,
        str(rank),
        str(row["pid"]),
    )


def run_status(run_dir: str | Path, now_ns: int | None = None) -> dict[str, Any]:
    """The run's status from its heartbeat files (see the module docstring), as the ``--json`` output."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    beats, notes = heartbeats(run_dir)
    rows = [_row_or_unreadable(beat, now_ns, notes) for beat in beats]
    attempt = max((r["attempt"] for r in rows if isinstance(r["attempt"], int)), default=0)
    current = [r for r in rows if r["attempt"] == attempt]
    _reaped(current)
    current.sort(key=_order)
    driver = next((r for r in current if r["driver"]), None)
    return {
        "schema": SCHEMA,
        "run": str(Path(run_dir).name),
        "attempt": attempt,
        "now_ns": now_ns,
        "ok": not any(r["state"] == "stale" or r["hung"] for r in current),
        "driver_step": driver["step"] if driver is not None else None,
        "processes": current,
        "groups": _groups(current),
        "superseded": len(rows) - len(current),
        "notes": notes,
    }


def _groups(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per worker group of ``rows``: its processes, how many are in each state or hung, its steps' range."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        g = groups.setdefault(
            r["worker_group"],
            {
                "worker_group": r["worker_group"],
                "processes": 0,
                "running": 0,
                "stale": 0,
                "ended": 0,
                "unreadable": 0,
                "hung": 0,
            },
        )
        g["processes"] += 1
        g[r["state"]] += 1
        g["hung"] += r["hung"]
        steps = [s for s in (r["step"], g.get("min_step"), g.get("max_step")) if isinstance(s, int)]
        if steps:
            g["min_step"], g["max_step"] = min(steps), max(steps)
    return list(groups.values())


def _phase_text(phase: Mapping[str, Any] | None, last: Mapping[str, Any] | None = None) -> str:
    if phase is None:
        return "-" if last is None else f"- (last seen in {_shown(last['name'])}, open {_secs(last['open_s'])})"
    text = f"{_shown(phase['name'])} {_secs(phase['open_s'])} / {_secs(phase['p95_s'])} / {_secs(phase['max_s'])}"
    return text + ("  HUNG" if phase["hung"] else "")


def format_status(report: Mapping[str, Any], *, all_rows: bool = False) -> str:
    """The status for people: a headline, the groups, the processes (all of them up to :data:`MAX_ROWS`,
    else the stale and hung ones)."""
    lines = _headline(report)
    lines += ["", f"{'group':24s}{'procs':>7s}{'running':>9s}{'stale':>7s}{'ended':>7s}{'hung':>6s}  steps"]
    for g in report["groups"]:
        steps = f"{g['min_step']}-{g['max_step']}" if "min_step" in g else "-"
        lines.append(
            f"{_shown(g['worker_group'])[:23]:24s}{g['processes']:7d}{g['running']:9d}{g['stale']:7d}{g['ended']:7d}"
            f"{g['hung']:6d}  {steps}"
        )
    lines += _process_lines(report["processes"], all_rows)
    return "\n".join(lines)


def _headline(report: Mapping[str, Any]) -> list[str]:
    """The run, its attempt, its processes by state, ok or not, the driver's step (the notes, the entries not
    read, are the caller's: ``lens-rl status`` says them on stderr)."""
    rows = report["processes"]
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[r["state"]] += 1
    hung = sum(r["hung"] for r in rows)
    gpu_idle = sum(bool(r.get("gpu") and r["gpu"]["idle"]) for r in rows)
    lines = [
        f"run {_shown(report['run'])} · attempt {report['attempt']} · {len(rows)} processes: {counts['running']} running, "
        f"{counts['stale']} stale, {counts['ended']} ended"
        + (f", {counts['unreadable']} unreadable" if counts["unreadable"] else "")
        + (f" · {hung} HUNG" if hung else "")
        + (f" · {gpu_idle} GPU IDLE" if gpu_idle else "")
        + " · "
        + ("ok" if report["ok"] else "NOT OK"),
        f"driver step: {_shown(report['driver_step'])}",
    ]
    if report["superseded"]:
        lines.append(f"({report['superseded']} heartbeat(s) of earlier attempts not counted)")
    return lines


def _process_lines(rows: Sequence[Mapping[str, Any]], all_rows: bool) -> list[str]:
    """The process table: every row up to :data:`MAX_ROWS` (or with ``all_rows``), else the abnormal ones,
    at most :data:`MAX_LISTED` of them listed."""
    shown = rows
    lines = []
    if not all_rows and len(rows) > MAX_ROWS:
        shown = [r for r in rows if r["state"] == "stale" or r["hung"] or (r.get("gpu") and r["gpu"]["idle"])]
        lines += ["", f"abnormal processes ({len(shown)} of {len(rows)}; --all for every one):"]
    else:
        lines.append("")
    lines.append(
        f"{'group':20s}{'rank':>6s}  {'host':14s}{'pid':>8s}{'att':>4s}  {'state':10s}{'beat':>7s}{'step':>7s}"
        f"{'gpu':>6s}  open phase: open for / p95 / longest"
    )
    for r in shown[: len(shown) if all_rows else max(MAX_LISTED, MAX_ROWS)]:
        lines.append(
            f"{_shown(r['worker_group'])[:19]:20s}{_shown(r['rank']):>6s}  {_shown(r['host'] or None)[:13]:14s}{_shown(r['pid']):>8s}"
            f"{_shown(r['attempt']):>4s}  {r['state']:10s}{_secs(r['heartbeat_age_s']):>7s}{_shown(r['step']):>7s}"
            f"{gpu_text(r.get('gpu')):>6s}  {_phase_text(r['phase'], r.get('last_phase'))}"
            + ("  pid gone" if r.get("gone") else "")
            + ("  clock ahead" if r["clock_ahead"] else "")
            + (f"  GPU IDLE {_secs(r['gpu']['idle_s'])}" if r.get("gpu") and r["gpu"]["idle"] else "")
        )
    hidden = len(shown) - (len(shown) if all_rows else max(MAX_LISTED, MAX_ROWS))
    if hidden > 0:
        lines.append(f"  ... {hidden} more (--json, or --all)")
    return lines
