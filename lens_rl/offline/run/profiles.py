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
    file = run / path if isinstance(path, str) and ".." not in Path(path).parts else None
    summary: list[PhaseSummary] | None = None
    if backend == "torch" and file is not None and file.is_file():
        inside = [
            p
            for p in phases
            if p.n is not None and not p.n.startswith("rl.profile") and p.b < window.e and p.e > window.b
        ]
        summary = torch_summary(file, [(p.n, p.b, p.e) for p in sorted(inside, key=lambda p: p.b)])
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
    running, from a gzip'd Chrome trace of ``torch.profiler``; None when the trace cannot be read."""
    try:
        with gzip.open(trace, "rb") as raw:
            data = raw.read(SUMMARY_MAX_BYTES + 1)
        if len(data) > SUMMARY_MAX_BYTES:
            return None
        body = json.loads(data)
        base_ns = int(body.get("baseTimeNanoseconds", 0))
        cpu: list[tuple[int, int]] = []
        kernels: list[tuple[int, int]] = []
        for event in body.get("traceEvents", []):
            if not isinstance(event, dict) or event.get("ph") != "X":
                continue
            kind = event.get("cat")
            if kind not in ("cpu_op", "kernel"):
                continue
            start = base_ns + int(float(event["ts"]) * 1000)
            (cpu if kind == "cpu_op" else kernels).append((start, start + int(float(event.get("dur", 0)) * 1000)))
    except (OSError, ValueError, TypeError, KeyError, EOFError):
        return None
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
