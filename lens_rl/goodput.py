"""Goodput rollup: exclusive bucket time per job, step, worker group and rank.

Goodput = productive / (productive + overhead + idle + wasted) seconds.

* **Exclusive time.** Within one process, a bucketed span's time is its duration minus
  the time its nearest bucketed descendants cover (their union, clipped to it), so a
  checkpoint inside a training phase counts once, as overhead.
* **Views.** The job figure is the driver's wall-clock view (its own spans: the loop
  as it waited on workers); with no driver spans, all processes are summed. Worker
  groups and ranks get a resource-seconds view: each process's own spans.
* **Steps.** A span belongs to the step of its own ``rl.step`` attribute, else its
  nearest ancestor's. A step's wall time is its umbrella spans' (unbucketed spans
  carrying ``rl.step``), else first start to last end; what no bucketed span covers
  is ``unattributed_s``.

JSON schema (``lens-rl goodput --json``), ``"schema": "lens_rl.goodput/1"``::

    {"schema", "goodput": float | null,         # the job-level ratio
     "job": {"view": "driver" | "all processes", "seconds": {bucket: s},
             "wall_s", "unattributed_s", "goodput"},
     "steps": [{"step", "seconds", "wall_s", "unattributed_s", "goodput"}],
     "worker_groups": [{"worker_group", "processes", "seconds", "goodput"}],
     "ranks": [{"worker_group", "rank", "pid", "seconds", "goodput"}],
     "runs": [run_id], "spans": int, "files": int, "skipped_lines": int}

Example::

    report = rollup(iter_span_records("lens_traces/run42"))
    print(report["goodput"])
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from lens_rl.buckets import Bucket, exclusive_time, union_length
from lens_rl.exporters.file import process_of

__all__ = ["BUCKETS", "SCHEMA", "format_table", "goodput_ratio", "rollup", "spans_to_records"]

SCHEMA = "lens_rl.goodput/1"
BUCKETS: tuple[str, ...] = tuple(b.value for b in Bucket)


def goodput_ratio(seconds: Mapping[str, float]) -> float | None:
    """productive / (productive + overhead + idle + wasted); None when nothing is bucketed."""
    total = sum(seconds.get(b, 0.0) for b in BUCKETS)
    return seconds.get("productive", 0.0) / total if total > 0 else None


def _union_s(intervals: Iterable[tuple[int, int]]) -> float:
    return union_length(intervals) / 1e9


def _clip(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


class _Span:
    __slots__ = ("rec", "start", "end", "bucket", "step", "children", "parent")

    def __init__(self, rec: Mapping[str, Any]) -> None:
        self.rec = rec
        self.start = int(rec.get("start_ns") or 0)
        self.end = max(int(rec.get("end_ns") or 0), self.start)
        attrs = rec.get("attributes") or {}
        bucket = attrs.get("rl.bucket")
        self.bucket = bucket if bucket in BUCKETS else None
        self.step = attrs.get("rl.step")
        self.children: list[_Span] = []
        self.parent: _Span | None = None


class _Process:
    """One process's spans as a forest, with exclusive bucket time per span."""

    def __init__(self, key: tuple[str, int, int], records: list[Mapping[str, Any]]) -> None:
        self.key = key
        self.spans = [_Span(r) for r in records]
        by_id = {s.rec.get("span_id"): s for s in self.spans}
        for span in self.spans:
            parent = by_id.get(span.rec.get("parent_span_id"))
            if parent is not None and parent is not span:
                span.parent = parent
                parent.children.append(span)
        for span in self.spans:  # inherit the step from the nearest ancestor that has one
            if span.step is None:
                node = span.parent
                while node is not None and node.step is None:
                    node = node.parent
                span.step = node.step if node is not None else None

    @staticmethod
    def _bucketed_below(span: _Span) -> list[_Span]:
        out: list[_Span] = []
        stack = list(span.children)
        while stack:
            child = stack.pop()
            if child.bucket is not None:
                out.append(child)
            else:
                stack.extend(child.children)
        return out

    def exclusive(self) -> list[tuple[_Span, float]]:
        """(bucketed span, exclusive seconds) for every bucketed span."""
        out = []
        for span in self.spans:
            if span.bucket is None:
                continue
            inner = [(c.start, c.end) for c in self._bucketed_below(span)]
            out.append((span, exclusive_time(span.start, span.end, inner) / 1e9))
        return out

    def seconds(self) -> dict[str, float]:
        totals = dict.fromkeys(BUCKETS, 0.0)
        for span, excl in self.exclusive():
            totals[span.bucket] += excl  # type: ignore[index]
        return totals


def _bucket_dict(seconds: Mapping[str, float]) -> dict[str, float]:
    return {b: round(seconds.get(b, 0.0), 6) for b in BUCKETS}


def _steps(processes: list[_Process]) -> list[dict[str, Any]]:
    seconds: dict[Any, dict[str, float]] = defaultdict(lambda: dict.fromkeys(BUCKETS, 0.0))
    umbrellas: dict[Any, list[_Span]] = defaultdict(list)
    members: dict[Any, list[_Span]] = defaultdict(list)
    for proc in processes:
        for span, excl in proc.exclusive():
            if span.step is not None:
                seconds[span.step][span.bucket] += excl  # type: ignore[index]
        for span in proc.spans:
            if span.step is None:
                continue
            members[span.step].append(span)
            if span.bucket is None and (span.rec.get("attributes") or {}).get("rl.step") is not None:
                umbrellas[span.step].append(span)
    rows = []
    for step in sorted(members, key=lambda s: (str(type(s)), s)):
        frames = umbrellas.get(step) or []
        if frames:
            windows = [(s.start, s.end) for s in frames]
        else:
            windows = [(min(s.start for s in members[step]), max(s.end for s in members[step]))]
        wall_s = _union_s(windows)
        covered = _union_s(
            iv for lo, hi in windows for iv in _clip(((s.start, s.end) for s in members[step] if s.bucket), lo, hi)
        )
        rows.append({
            "step": step,
            "seconds": _bucket_dict(seconds[step]),
            "wall_s": round(wall_s, 6),
            "unattributed_s": round(max(wall_s - covered, 0.0), 6),
            "goodput": goodput_ratio(seconds[step]),
        })  # fmt: skip
    return rows


def rollup(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The goodput report (see the module docstring's schema) for these span records."""
    by_process: dict[tuple[str, int, int], list[Mapping[str, Any]]] = defaultdict(list)
    runs: set[str] = set()
    count = 0
    for rec in records:
        count += 1
        by_process[process_of(rec)].append(rec)
        run = (rec.get("resource") or {}).get("rl.run_id")
        if run is not None:
            runs.add(str(run))
    processes = [_Process(k, v) for k, v in sorted(by_process.items())]
    driver = [p for p in processes if p.key[0] == "driver"]
    view = driver or processes
    job_seconds = dict.fromkeys(BUCKETS, 0.0)
    for proc in view:
        for bucket, value in proc.seconds().items():
            job_seconds[bucket] += value
    jobs = [s for p in view for s in p.spans if s.rec.get("name") == "rl.job"]
    job_wall = _union_s((s.start, s.end) for s in jobs) if jobs else None
    job_covered = (
        _union_s(iv for j in jobs for p in view for iv in _clip(((s.start, s.end) for s in p.spans if s.bucket), j.start, j.end))
        if jobs else None
    )  # fmt: skip
    groups: dict[str, dict[str, Any]] = {}
    ranks = []
    for proc in processes:
        group, rank, pid = proc.key
        secs = proc.seconds()
        entry = groups.setdefault(group, {"worker_group": group, "processes": 0, "seconds": dict.fromkeys(BUCKETS, 0.0)})
        entry["processes"] += 1
        for bucket, value in secs.items():
            entry["seconds"][bucket] += value
        ranks.append({"worker_group": group, "rank": rank, "pid": pid, "seconds": _bucket_dict(secs),
                      "goodput": goodput_ratio(secs)})  # fmt: skip
    group_rows = []
    for entry in groups.values():
        group_rows.append({**entry, "seconds": _bucket_dict(entry["seconds"]), "goodput": goodput_ratio(entry["seconds"])})
    ratio = goodput_ratio(job_seconds)
    return {
        "schema": SCHEMA,
        "goodput": ratio,
        "job": {
            "view": "driver" if driver else "all processes",
            "seconds": _bucket_dict(job_seconds),
            "wall_s": None if job_wall is None else round(job_wall, 6),
            "unattributed_s": None if job_wall is None else round(max(job_wall - (job_covered or 0.0), 0.0), 6),
            "goodput": ratio,
        },
        "steps": _steps(view),
        "worker_groups": sorted(group_rows, key=lambda r: (r["worker_group"] != "driver", r["worker_group"])),
        "ranks": sorted(ranks, key=lambda r: (r["worker_group"] != "driver", r["worker_group"], r["rank"], r["pid"])),
        "runs": sorted(runs),
        "spans": count,
    }


def spans_to_records(spans: Iterable[Any]) -> list[dict[str, Any]]:
    """File-store records for finished OpenTelemetry spans (e.g. from the pytest fixture)."""
    from lens_rl.exporters.file import span_record

    return [span_record(s) for s in spans]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:5.1f}%"


def format_table(report: Mapping[str, Any]) -> str:
    """The report as a human-readable table."""
    lines = []
    head = f"{'':28s}" + "".join(f"{b:>12s}" for b in BUCKETS) + f"{'goodput':>10s}"

    def row(label: str, seconds: Mapping[str, float], ratio: float | None, extra: str = "") -> str:
        return f"{label:28s}" + "".join(f"{seconds.get(b, 0.0):11.2f}s" for b in BUCKETS) + f"{_pct(ratio):>10s}{extra}"

    job = report["job"]
    lines.append(f"goodput {_pct(report['goodput']).strip()}  (job view: {job['view']}; "
                 f"runs: {', '.join(report['runs']) or '-'}; spans: {report['spans']})")  # fmt: skip
    lines.append("")
    lines.append(head)
    wall = "" if job["wall_s"] is None else f"   wall {job['wall_s']:.2f}s, unattributed {job['unattributed_s']:.2f}s"
    lines.append(row("job", job["seconds"], job["goodput"], wall))
    if report["steps"]:
        lines.append("")
        for step in report["steps"]:
            extra = f"   wall {step['wall_s']:.2f}s, unattributed {step['unattributed_s']:.2f}s"
            lines.append(row(f"step {step['step']}", step["seconds"], step["goodput"], extra))
    lines.append("")
    for group in report["worker_groups"]:
        lines.append(row(f"group {group['worker_group']} (x{group['processes']})", group["seconds"], group["goodput"]))
    lines.append("")
    for rank in report["ranks"]:
        lines.append(row(f"  {rank['worker_group']} rank {rank['rank']}", rank["seconds"], rank["goodput"]))
    return "\n".join(lines)
