"""Chrome trace-event JSON from the file store, for Perfetto UI (ui.perfetto.dev) or chrome://tracing.

One process per worker group and rank (named ``"<group> rank <r> (pid <p>)"``, the
driver first), one track per thread (named as the thread was: ``MainThread``,
``ThreadPoolExecutor-0_1``), one complete event (``"ph": "X"``) per span with its
attributes in ``args``, and a flow arrow (``"ph": "s"`` / ``"f"``) from a span to each
child that ran in another process (a driver's call into a worker). Phases are coloured by bucket through the
trace-event colour names (``cname``: productive ``good``, overhead ``yellow``, idle
``grey``, wasted ``terrible``, unbucketed ``generic_work``) and carry the bucket as
their category (``cat``), so they can be filtered by it.

Example::

    doc = to_chrome_trace(iter_span_records("lens_traces/run42"))
    json.dump(doc, open("trace.json", "w"))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lens_rl.store import process_of

__all__ = ["BUCKET_COLORS", "to_chrome_trace"]

BUCKET_COLORS = {"productive": "good", "overhead": "yellow", "idle": "grey", "wasted": "terrible", None: "generic_work"}


def _json_safe(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return str(value)


def to_chrome_trace(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``{"traceEvents": [...]}`` document for these span records."""
    records = list(records)
    procs: dict[tuple[str, int, int], int] = {}
    threads: dict[tuple[int, Any], int] = {}
    keys = {process_of(rec) for rec in records}
    for i, key in enumerate(sorted(keys, key=lambda k: (k[0] != "driver", k))):
        procs[key] = i + 1
    origin = min((int(r.get("start_ns") or 0) for r in records), default=0)
    events: list[dict[str, Any]] = []
    where: dict[Any, tuple[int, int, int, int]] = {}
    for (group, rank, pid), num in procs.items():
        events.append({"ph": "M", "name": "process_name", "pid": num, "tid": 0,
                       "args": {"name": f"{group} rank {rank} (pid {pid})"}})  # fmt: skip
        events.append({"ph": "M", "name": "process_sort_index", "pid": num, "tid": 0, "args": {"sort_index": num}})
    for rec in records:
        attrs = rec.get("attributes") or {}
        pid = procs[process_of(rec)]
        thread = rec.get("thread") or "main"
        if (pid, thread) not in threads:
            threads[(pid, thread)] = len([t for t in threads if t[0] == pid]) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": threads[(pid, thread)],
                           "args": {"name": rec.get("thread_name") or f"thread {thread}"}})  # fmt: skip
        bucket = attrs.get("rl.bucket")
        start = int(rec.get("start_ns") or 0)
        end = max(int(rec.get("end_ns") or start), start)
        args = {k: _json_safe(v) for k, v in attrs.items()}
        args.update(trace_id=rec.get("trace_id"), span_id=rec.get("span_id"), parent_span_id=rec.get("parent_span_id"),
                    status=rec.get("status"))  # fmt: skip
        events.append({
            "ph": "X", "name": str(rec.get("name")), "cat": bucket or "phase",
            "pid": pid, "tid": threads[(pid, thread)],
            "ts": (start - origin) / 1000.0, "dur": (end - start) / 1000.0,
            "cname": BUCKET_COLORS.get(bucket, "generic_work"), "args": args,
        })  # fmt: skip
        where[rec.get("span_id")] = (pid, threads[(pid, thread)], start, end)
    flows = 0
    for rec in records:  # calls that crossed processes: an arrow from the caller's span to the callee's
        parent = where.get(rec.get("parent_span_id"))
        child = where.get(rec.get("span_id"))
        if parent is None or child is None or parent[0] == child[0]:
            continue
        flows += 1
        ts = (min(max(child[2], parent[2]), parent[3]) - origin) / 1000.0
        events.append({"ph": "s", "id": flows, "name": "call", "cat": "flow", "pid": parent[0], "tid": parent[1],
                       "ts": ts})  # fmt: skip
        events.append({"ph": "f", "bp": "e", "id": flows, "name": "call", "cat": "flow", "pid": child[0],
                       "tid": child[1], "ts": (child[2] - origin) / 1000.0})  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": "lens_rl"}}
