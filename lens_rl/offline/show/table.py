"""``lens-rl goodput``'s table: the report (:func:`lens_rl.offline.rollup.goodput.report_from_parts`) for people.

At most 20 step rows unless every one is asked for; the job and steady state first, then the steps, the
phases of every group, each group and rank, and the stragglers.

Example::

    print(format_table(analyze(span_files("lens_traces/run42"))))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lens_rl.offline.rollup.schema import BUCKETS, GoodputReport
from lens_rl.offline.show.formats import percent as _pct
from lens_rl.offline.show.formats import seconds as _secs
from lens_rl.offline.show.formats import share, text
from lens_rl.offline.show.gpu_table import gpu_lines
from lens_rl.offline.show.pipeline import format_pipeline
from lens_rl.offline.show.requests import format_requests

__all__ = ["MAX_STEP_ROWS", "format_table"]

MAX_STEP_ROWS = 20


def format_table(report: GoodputReport, *, all_steps: bool = False) -> str:
    """The report as a human-readable table: at most 20 step rows unless ``all_steps``; what a store's names
    hold that a terminal would act on (an escape, a newline) is shown escaped, never sent to it."""
    lines = _headline(report)
    lines += ["", _HEAD, _row("job", report["job"]["seconds"], report["job"]["goodput"], _wall(report["job"]))]
    lines += _selection_lines(report)
    lines += _attempt_lines(report)
    lines += _step_lines(report, all_steps)
    lines += _phase_table(report)
    lines += gpu_lines(report)  # (none where the run has no GPU samples)
    warnings = report.get("warnings") or ()
    if warnings:
        lines += ["", *(f"warning: {w['message']}" for w in warnings)]
    lines += _critical_lines(report)
    lines += _throughput_lines(report)
    lines += format_requests(report)
    lines += format_pipeline(report)
    lines += _group_lines(report)
    lines += _straggler_lines(report)
    return "\n".join(map(text, lines))  # (a store's names with their control characters escaped: one line each)


def _step_lines(report: GoodputReport, all_steps: bool) -> list[str]:
    """The step rows: every one with ``all_steps``, else the first and last :data:`MAX_STEP_ROWS` / 2."""
    steps = report["steps"]
    if not steps:
        return []
    lines = [""]
    many = not all_steps and len(steps) > MAX_STEP_ROWS
    shown = [*steps[: MAX_STEP_ROWS // 2], None, *steps[-(MAX_STEP_ROWS // 2) :]] if many else steps
    for step in shown:
        if step is None:
            lines.append(f"  ... {len(steps) - MAX_STEP_ROWS} more steps (--steps all, or --steps A-B)")
            continue
        mark = " (incomplete: its umbrella never ended)" if step.get("incomplete") else ""
        if step.get("error"):
            mark = f" (failed: {step['error']['type'] or 'an error'})"
        if len(report.get("attempts", ())) > 1:
            mark = f"   attempt {step['attempt']}" + mark
        lines.append(_row(f"step {step['step']}", step["seconds"], step["goodput"], _wall(step) + mark))
    return lines


_HEAD = f"{'':30s}" + "".join(f"{b:>12s}" for b in BUCKETS) + f"{'goodput':>10s}"


def _row(label: str, seconds: Mapping[str, float], ratio: float | None, extra: str = "") -> str:
    return f"{label:30s}" + "".join(f"{seconds.get(b, 0.0):11.2f}s" for b in BUCKETS) + f"{_pct(ratio):>10s}{extra}"


def _wall(row: Mapping[str, Any]) -> str:
    if row.get("wall_s") is None:
        return ""
    unattributed = row.get("unattributed_s")
    return f"   wall {row['wall_s']:.2f}s" + ("" if unattributed is None else f", unattributed {unattributed:.2f}s")


def _selection_lines(report: GoodputReport) -> list[str]:
    """With ``--steps A-B``: the selected steps' row, and what stays job-wide."""
    picked = report.get("selection")
    if picked is None:
        return []
    a, b = picked["steps"]
    return [
        _row(f"steps {a}-{b}", picked["seconds"], picked["goodput"], _wall(picked)),
        f"  (the job row is job-wide, start-up included; the attempts and requests too; every other "
        f"figure covers steps {a}-{b}'s {picked['complete_steps']} complete step(s))",
    ]


def _headline(report: GoodputReport) -> list[str]:
    job = report["job"]
    picked = report.get("selection")
    scope = (
        "productive over the whole job's wall, start-up included"
        if picked is None
        else f"productive over the wall of steps {picked['steps'][0]}-{picked['steps'][1]}; figures cover these steps"
    )
    lines = [
        f"goodput {_pct(report['goodput']).strip()} ({scope})   "
        f"steady state {_pct(report['steady_state_goodput']).strip()} "
        + (
            f"(each attempt's steps after its first {report['warmup_steps']})"
            if len(report.get("attempts", ())) > 1
            else f"(steps after the first {report['warmup_steps']})"
        ),
        f"job view: {job['view']}; runs: {', '.join(report['runs']) or '-'}; spans: {report['spans']}"
        + (
            "; SAMPLED run: seconds are those of the sampled phases, ratios are estimates"
            if report.get("sampled")
            else ""
        ),
    ]
    st = report["step_time"]
    if st["max_s"] is not None:
        slow = ", ".join(f"{s['step']} ({s['wall_s']:.2f}s)" for s in report["slowest_steps"])
        lines.append(
            f"step time p50 {_secs(st['p50_s'])}  p95 {_secs(st['p95_s'])}  max {_secs(st['max_s'])};"
            f"  slowest steps: {slow}"
        )
    lines += [f"note: {note}" for note in report.get("notes", ())]
    return lines


def _attempt_lines(report: GoodputReport) -> list[str]:
    """With more than one attempt: why time was wasted, then one line per attempt (its steps, how it ended,
    what a later attempt ran again, the downtime before it)."""
    attempts = report.get("attempts", ())
    if len(attempts) <= 1:
        return []
    why = report["job"]["wasted_reasons"]
    lines = [
        f"  wasted: {why['rerun']:.2f}s re-run steps, {why['restart']:.2f}s downtime between attempts, "
        f"{why['phases']:.2f}s in wasted phases; {report['job']['restarts']} restart(s)",
        "",
        f"{'attempt':10s}{'start':>10s}{'wall':>10s}{'steps':>14s}{'goodput':>9s}  ended",
    ]
    for a in attempts:
        steps = "-" if a["first_step"] is None else f"{a['first_step']}-{a['last_step']}"
        ended = a["ended"]
        if a.get("error"):
            ended += f" ({a['error']['type']}: {a['error']['message']})"[:100]
        extra = f"; downtime before {a['downtime_before_s']:.2f}s" if a["downtime_before_s"] else ""
        if a["rerun_steps"]:
            rerun = a["rerun_steps"]
            listed = ", ".join(map(str, rerun[:6])) + (", ..." if len(rerun) > 6 else "")
            extra += f"; steps {listed} run again later ({a['rerun_s']:.2f}s wasted)"
        lines.append(
            f"{a['attempt']:<10d}{a['start_s']:9.2f}s{a['wall_s']:9.2f}s{steps:>14s}{_pct(a['goodput']):>9s}  "
            f"{ended}{extra}"
        )
    return lines


def _phase_table(report: GoodputReport) -> list[str]:
    if not report["phases"]:
        return []
    lines = [
        "",
        f"{'phase':30s}{'group':>16s}{'bucket':>12s}{'count':>8s}{'total':>11s}{'excl':>10s}{'mean':>10s}"
        f"{'p95':>10s}{'share':>8s}{'tokens/s':>11s}",
        "  (total: inclusive; excl and share: its own time, less its nested phases'; share of the job's wall for",
        "   the driver's phases, of the group's lifetimes for a worker group's)",
    ]
    if report.get("selection") is not None:  # (--steps A-B: the steps' spans; no durations per step: no p95)
        lines[-2:] = [
            "  (the selected steps' spans; total: inclusive; excl and share: its own time, less its nested phases';",
            "   share of the steps' wall for the driver's phases, of it times the group's processes for a group's)",
        ]
    for ph in report["phases"]:
        tps = "-" if ph["tokens_per_s"] is None else f"{ph['tokens_per_s']:.0f}"
        lines.append(
            f"{str(ph['phase'])[:29]:30s}{str(ph['worker_group'])[:15]:>16s}{str(ph['bucket'] or '-'):>12s}"
            f"{ph['count']:8d}{ph['total_s']:10.2f}s{ph.get('exclusive_s') or 0:9.2f}s{ph['mean_s'] or 0:9.3f}s"
            f"{_secs(ph['p95_s']):>10s}"
            f"{_pct(ph['share']):>8s}{tps:>11s}"
        )
    for un in report.get("unbucketed_phases", ()):
        hint = f"; did you mean {un['did_you_mean']!r}?" if un["did_you_mean"] else ""
        lines.append(
            f"  unbucketed: {un['phase']!r} ({un['worker_group']}) covers {share(un['share'])} of the "
            f"steps' wall and counts in no bucket (pass bucket=, or name it as the table does{hint})"
        )
    return lines


#: Critical-path rows shown (the rest in --json).
CRITICAL_ROWS = 10


def _critical_lines(report: GoodputReport) -> list[str]:
    """What held the steps up: the critical path's top (group, phase) rows and the most frequent top stretch."""
    critical = report.get("critical_path") or {}
    phases, steps = critical.get("phases") or [], critical.get("steps") or []
    if not phases:
        return []
    lines = [
        "",
        f"critical path (what the steps waited on, {len(steps)} steps){'':8s}{'critical':>10s}{'of wall':>9s}"
        f"{'exposed':>9s}",
        "  (exposed: the share of the phase's own time the steps waited on; the rest overlapped other work)",
    ]
    for row in phases[:CRITICAL_ROWS]:
        label = f"  {row['worker_group']} {row['phase']} ({row['bucket'] or 'no bucket'})"
        exposed = share(row["exposed_share"])
        lines.append(f"{label[:56]:56s}{row['critical_s']:9.2f}s{_pct(row['critical_share']):>9s}{exposed:>9s}")
    if len(phases) > CRITICAL_ROWS:
        lines.append(f"  ... {len(phases) - CRITICAL_ROWS} more (--json critical_path)")
    return lines + _top_stretch(steps)


def _top_stretch(steps: list[Any]) -> list[str]:
    """The (group, rank, phase) that held the longest stretch of the most steps, in a line (none: no step says)."""
    tops: dict[tuple[str, Any, str], int] = {}
    for step in steps:
        top = step.get("top")
        if top:
            key = (top["worker_group"], top["rank"], top["phase"])
            tops[key] = tops.get(key, 0) + 1
    if not tops:
        return []
    (group, rank, phase), count = max(tops.items(), key=lambda kv: (kv[1], str(kv[0])))
    return [f"  the longest stretch of {count} of {len(steps)} steps: {group} rank {rank} {phase}"]


def _throughput_lines(report: GoodputReport) -> list[str]:
    """Tokens per second (per GPU) of the phases that count tokens, MFU where known, and end to end."""
    rows = [p for p in report["phases"] if p.get("tokens_per_s") is not None]
    throughput = report.get("throughput") or {}
    if not rows and not throughput.get("e2e_tokens_per_s_per_gpu"):
        return []
    e2e = throughput.get("e2e_tokens_per_s_per_gpu")
    lines = [
        "",
        f"throughput: {throughput.get('gpus', 0)} GPUs; end to end "
        + ("-" if e2e is None else f"{e2e:.1f}")
        + " tokens/s/GPU (a step's tokens over its wall and the job's GPUs)",
    ]
    if rows:
        lines.append(f"{'  phase':40s}{'group':>16s}{'bucket':>12s}{'tokens/s':>12s}{'per GPU':>12s}{'MFU':>8s}")
    for p in rows:
        per_gpu = "-" if p.get("tokens_per_s_per_gpu") is None else f"{p['tokens_per_s_per_gpu']:.1f}"
        mfu = "-" if p["mfu"] is None else f"{p['mfu'] * 100:.1f}%"
        lines.append(
            f"  {str(p['phase'])[:37]:38s}{str(p['worker_group'])[:15]:>16s}{str(p['bucket'] or '-'):>12s}"
            f"{p['tokens_per_s']:12.1f}{per_gpu:>12s}{mfu:>8s}"
        )
    return lines


def _group_lines(report: GoodputReport) -> list[str]:
    job = report["job"]
    lines = [
        "",
        "per worker group and rank: resource-seconds (a worker's uncovered lifetime is idle"
        + ("; concurrent phases overlap, so seconds can sum to more than wall time" if report.get("concurrent") else "")
        + ")",
    ]
    over = "lifetime" if report.get("selection") is None else "steps wall"
    if over != "lifetime":
        lines[-1] = lines[-1].replace("uncovered lifetime", "uncovered share of the steps' wall")
    for group in report["worker_groups"]:
        label = f"group {group['worker_group']} (x{group['processes']})"
        if group["worker_group"] == "driver" and job["view"] == "driver":
            lines.append(
                f"{label:30s}the {'job' if over == 'lifetime' else 'steps'} row above is its wall-clock view; {over} {group['wall_s']:.2f}s"
            )
            continue
        lines.append(_row(label, group["seconds"], group["goodput"], f"   {over} {group['wall_s']:.2f}s"))
    return lines + _rank_lines(report)


def _rank_lines(report: GoodputReport) -> list[str]:
    """A row per rank's process (past 32 ranks, the 16 rows with the lowest goodput: a rank restarted in a later
    attempt counts once, each of its processes a row); the driver's not, in the driver's view."""
    ranks, view = report["ranks"], report["job"]["view"]
    distinct = len({(r["worker_group"], r["rank"]) for r in ranks})
    shown_ranks = ranks if distinct <= 32 else sorted(ranks, key=lambda r: r["goodput"] or 0.0)[:16]
    lines = [f"  (the 16 rows with the lowest goodput of {distinct} ranks)"] if distinct > 32 else []
    for rank in shown_ranks:
        if rank["worker_group"] == "driver" and view == "driver":
            continue
        lines.append(_row(f"  {rank['worker_group']} rank {rank['rank']}", rank["seconds"], rank["goodput"]))
    return lines


def _straggler_lines(report: GoodputReport) -> list[str]:
    strag = report["stragglers"]
    degrading = strag.get("degrading") or []
    lines: list[str] = []
    if strag["per_step"]:
        persistent = (
            ", ".join(
                f"{p['worker_group']} rank {p['rank']} ({p['steps_flagged']}/{p['of_steps']} steps)"
                for p in strag["persistent"]
            )
            or "none"
        )
        lines += [
            "",
            f"stragglers: {len(strag['per_step'])} (rank, step, phase) over the group median; persistent: {persistent}",
        ]
        for s in sorted(strag["per_step"], key=lambda s: -s["over_median"])[:5]:
            lines.append(
                f"  step {s['step']}: {s['worker_group']} rank {s['rank']} {s['phase']} "
                f"+{s['over_median'] * 100:.0f}% over the median"
            )
    if degrading:
        lines += ["", f"degrading ranks: {len(degrading)} (the latest window of steps against the rank's own best)"]
        for d in degrading[:10]:
            lines.append(
                f"  {d['worker_group']} rank {d['rank']} {d['phase']}: score {d['score']:.2f} "
                f"(best {d['window']}-step median {d['best_s']:.3f}s, latest {d['latest_s']:.3f}s)"
            )
        if len(degrading) > 10:
            lines.append(f"  ... {len(degrading) - 10} more (--json stragglers.degrading)")
    return lines
