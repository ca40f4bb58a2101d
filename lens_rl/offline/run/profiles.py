"""The profiler captures of a run: each ``rl.profile`` span with its step, process and file, and for a ``torch``
capture a summary per phase of the window.

A run with no ``profiles/`` folder costs nothing here (no capture was taken: the files are not read). Otherwise
each span file is read once for its ``rl.profile`` spans; a torch capture's phases are the same file's bucketed
spans inside the window. The summary per phase: the time torch ops ran on the CPU (the union of the trace's
``cpu_op`` events inside the phase), the time device kernels ran (``kernel`` events; None when the trace has
none), and the share of the phase with no kernel running (None without kernels: a CPU-only capture).

Example::

    for row in profiles_of(Path("lens_traces/r1")):
        print(row["step"], row["path"], row["summary"])
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path
from typing import Any

from lens_rl.offline.read.intervals import clipped, merge_intervals
from lens_rl.offline.rollup.schema import PhaseSummary, ProfileRow
from lens_rl.store import iter_rows, span_files

__all__ = ["profiles_of", "torch_summary"]

#: The largest trace summarised (its JSON, unpacked): a bigger one is listed without a summary.
SUMMARY_MAX_BYTES = 256 << 20


def profiles_of(run: Path) -> list[ProfileRow]:
    """The captures of the run folder ``run``, by step, group and rank."""
    if not (run / "profiles").is_dir():
        return []
    out: list[ProfileRow] = []
    for path in span_files(run):
        windows: list[Any] = []
        phases: list[Any] = []
        group, rank, pid = "worker", 0, 0
        for head, row in iter_rows(path):
            if row.n == "rl.profile" and row.a is not None and row.b is not None and row.e is not None:
                windows.append(row)
                group, rank, pid = head.process.group, head.process.rank, head.process.pid
            elif row.a is not None and row.a.get("rl.bucket") is not None and row.b is not None and row.e is not None:
                phases.append(row)
        for window in windows:
            out.append(_row(run, window, phases, group, rank, pid))
    out.sort(key=lambda r: (r["step"] if r["step"] is not None else -1, r["worker_group"], r["rank"]))
    return out


def _row(run: Path, window: Any, phases: list[Any], group: str, rank: int, pid: int) -> ProfileRow:
    attributes = window.a
    step = attributes.get("rl.profile.step")
    path = attributes.get("rl.profile.path")
    backend = str(attributes.get("rl.profile.backend", ""))
    inside = isinstance(path, str) and not Path(path).is_absolute() and ".." not in Path(path).parts
    file = run / path if inside else None  # (a path out of the run folder names no capture of it)
    summary: list[PhaseSummary] | None = None
    if backend == "torch" and file is not None and file.is_file():
        within = [
            p
            for p in phases
            if p.n is not None and not p.n.startswith("rl.profile") and p.b < window.e and p.e > window.b
        ]
        summary = torch_summary(file, [(p.n, p.b, p.e) for p in sorted(within, key=lambda p: p.b)])
    return {
        "step": step if isinstance(step, int) else None,
        "worker_group": group,
        "rank": rank,
        "pid": pid,
        "backend": backend,
        "reason": str(attributes.get("rl.profile.reason", "")),
        "path": path if isinstance(path, str) else None,
        "exists": bool(file is not None and file.is_file()),
        "ended_by": str(attributes.get("rl.profile.ended_by", "")),
        "wall_s": (window.e - window.b) / 1e9,
        "summary": summary,
    }


def torch_summary(trace: Path, phases: list[tuple[str, int, int]]) -> list[PhaseSummary] | None:
    """Per phase ``(name, start ns, end ns)``: CPU op seconds, kernel seconds and the share with no kernel
    running, from a gzip'd Chrome trace of ``torch.profiler`` (an object with ``traceEvents``, or their bare
    array); None when the trace cannot be read (no gzip, no JSON, nested past the parser, no list of events, a
    base time that is no finite number). An event whose ``ts`` or ``dur`` is no finite number, or whose
    ``dur`` is negative, is left out: any file, never a traceback."""
    try:
        with gzip.open(trace, "rb") as raw:
            data = raw.read(SUMMARY_MAX_BYTES + 1)
        if len(data) > SUMMARY_MAX_BYTES:
            return None
        body = json.loads(data)
    except (OSError, EOFError, ValueError, RecursionError, zlib.error):  # (a file that is no readable trace)
        return None
    # (a Chrome trace is an object with "traceEvents", or the bare array of its events)
    events = body.get("traceEvents") if isinstance(body, dict) else body
    base = body.get("baseTimeNanoseconds", 0) if isinstance(body, dict) else 0
    if not isinstance(events, list) or not _finite(base):
        return None
    base_ns = int(base)
    cpu: list[tuple[int, int]] = []
    kernels: list[tuple[int, int]] = []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        kind = event.get("cat")
        if kind not in ("cpu_op", "kernel"):
            continue
        ts: Any = event.get("ts")
        dur: Any = event.get("dur", 0)
        if not (_finite(ts) and _finite(dur)) or dur < 0:
            continue  # (an event of no readable time is left out: never a traceback)
        start = base_ns + int(ts * 1000)
        (cpu if kind == "cpu_op" else kernels).append((start, start + int(dur * 1000)))
    cpu_merged, kernel_merged = merge_intervals(cpu), merge_intervals(kernels)
    out: list[PhaseSummary] = []
    for name, lo, hi in phases:
        if hi <= lo:
            continue
        cpu_ns = sum(b - a for a, b in clipped(cpu_merged, lo, hi))
        kernel_ns = sum(b - a for a, b in clipped(kernel_merged, lo, hi))
        out.append(
            {
                "phase": name,
                "wall_s": (hi - lo) / 1e9,
                "cpu_op_s": cpu_ns / 1e9,
                "kernel_s": kernel_ns / 1e9 if kernels else None,
                "no_kernel_share": 1.0 - kernel_ns / (hi - lo) if kernels else None,
            }
        )
    return out


def _finite(value: Any) -> bool:
    """A finite JSON number within int64 once in ns (a trace's time: µs, or the base in ns)."""
    if value.__class__ is int:
        return -(2**62) < value < 2**62  # type: ignore[no-any-return]
    return value.__class__ is float and math.isfinite(value) and abs(value) < 2.0**62  # type: ignore[no-any-return]
