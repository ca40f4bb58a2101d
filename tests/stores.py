"""Hand-written file stores for tests: v2 files (a header, then span lines) with readable ids and seconds.

The store is the contract between recording and reading, so tests of the offline tools write stores the way
the file exporter does and read them through the same commands a user runs.

Example::

    run = tmp_path / "r1"
    write_process(run, "driver", 0, 1, [span("step", 0, 10, "s", step=1), span("gen", 0, 8, "g", parent="s")])
    report = analyze(span_files(run))
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

#: Where hand-written stores' clocks start: their times are seconds after it (a reader takes only times from
#: 2000 on, as a real clock gives them).
EPOCH_NS = 1_700_000_000 * 10**9


def at_ns(ns: int) -> int:
    """A hand-written time (ns after :data:`EPOCH_NS`) as stored; a real clock's time as it is."""
    return ns + EPOCH_NS if type(ns) is int and -EPOCH_NS < ns < EPOCH_NS // 2 else ns


def span_id(label: str) -> str:
    """A 16-hex-digit span id made from a readable label (the same label, the same id)."""
    return hashlib.sha1(label.encode()).hexdigest()[:16]


def span(
    name: str,
    start_s: float,
    end_s: float,
    label: str,
    *,
    parent: str | None = None,
    remote: bool = False,
    bucket: str | None = None,
    step: Any = None,
    trace: str = "t",
    **attrs: Any,
) -> dict[str, Any]:
    """One v2 span line: ``parent`` is another span's label (``remote``: carried in from another process);
    ``bucket`` and ``step`` become ``rl.bucket`` / ``rl.step``; other keywords are attributes as given
    (``**{"rl.num_tokens": 10}``)."""
    row: dict[str, Any] = {"n": name, "t": hashlib.sha1(trace.encode()).hexdigest()[:32], "s": span_id(label)}
    if parent is not None:
        row["p"] = span_id(parent)
        if remote:
            row["pr"] = True
    row["b"], row["e"] = at_ns(int(round(start_s * 1e9))), at_ns(int(round(end_s * 1e9)))
    a = dict(attrs)
    if bucket is not None:
        a["rl.bucket"] = bucket
    if step is not None:
        a["rl.step"] = step
    if a:
        row["a"] = a
    return row


def header(
    group: str, rank: int, pid: int, *, run: str = "r1", since_s: float = 0.0, root: str | None = None, **resource: Any
) -> dict[str, Any]:
    """A v2 span file's header for one process (``root``: the job root's label, as a driver's header names it)."""
    res = {
        "service.name": "lens-rl",
        "rl.worker_group": group,
        "nv.dl.rank": rank,
        "nv.dl.world_size": 1,
        "process.pid": pid,
        "rl.run_id": run,
        **resource,
    }
    head: dict[str, Any] = {
        "v": 2,
        "header": True,
        "format": "lens_rl.spans/2",
        "kind": "spans",
        "resource": res,
        "pid": pid,
        "since": at_ns(int(since_s * 1e9)),
        "remote_parents": True,
    }
    if root is not None:
        head["root"] = span_id(root)
    return head


def write_process(
    run_dir: Path,
    group: str,
    rank: int,
    pid: int,
    spans: Iterable[Mapping[str, Any]],
    *,
    name: str | None = None,
    **head: Any,
) -> Path:
    """Write one process's span file under ``run_dir`` (its name made as the exporter makes it, unless given)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / (name or f"spans-{group}-{rank}-{pid}.jsonl")
    lines = [json.dumps(header(group, rank, pid, **head)), *(json.dumps(dict(s)) for s in spans)]
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------- spans as dicts (a receiver's shape)


def write_received(spans: Iterable[Mapping[str, Any]], run_dir: Path) -> Path:
    """Write spans of the receiver's dict shape (``name``, ``span_id``, ``parent_span_id``, ``start_ns``,
    ``end_ns``, ``attributes``, ``resource`` ...) as a store: a file per process (resource), a parent in
    another process marked remote, the driver's file (its ``rl.worker_group``) with the driver's role."""
    by_process: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for s in spans:
        res = s.get("resource") or {}
        by_process.setdefault(tuple(sorted((k, str(v)) for k, v in res.items())), []).append(s)
    ids = {key: {s.get("span_id") for s in group} for key, group in by_process.items()}
    everyone = set().union(*ids.values()) if ids else set()
    run_dir.mkdir(parents=True, exist_ok=True)
    for n, (key, group) in enumerate(by_process.items()):
        res = dict(group[0].get("resource") or {})
        pid = int(res.get("process.pid", 1000 + n) or 0)
        head = header(
            str(res.get("rl.worker_group", "worker")),
            int(res.get("nv.dl.rank", 0) or 0),
            pid,
            since_s=min(s["start_ns"] for s in group) / 1e9,
        )
        head["since"] = at_ns(min(s["start_ns"] for s in group))
        head["resource"] = res
        head["role"] = "driver" if res.get("rl.worker_group") == "driver" else "worker"
        lines = [json.dumps(head)]
        for s in group:
            row: dict[str, Any] = {"n": s["name"], "t": s.get("trace_id") or "0" * 32, "s": s["span_id"]}
            parent = s.get("parent_span_id")
            if parent:
                row["p"] = parent
                if parent not in ids[key] and parent in everyone:
                    row["pr"] = True
            row["b"], row["e"] = at_ns(s["start_ns"]), at_ns(s["end_ns"])
            if s.get("attributes"):
                row["a"] = dict(s["attributes"])
            if s.get("status") not in (None, "UNSET"):
                row["st"] = s["status"]
            lines.append(json.dumps(row))
        (run_dir / f"spans-{n}.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def rollup(spans: Iterable[Mapping[str, Any]], **options: Any) -> dict[str, Any]:
    """``lens-rl goodput --json`` of these receiver-shaped spans, written as a store in a scratch folder."""
    import shutil
    import tempfile

    from lens_rl.offline.run.analyze import analyze
    from lens_rl.store import span_files

    scratch = Path(tempfile.mkdtemp(prefix="lens-rl-test-"))
    try:
        return analyze(span_files(write_received(spans, scratch)), jobs=1, **options)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def rollup_recorded(spans: Iterable[Any], **options: Any) -> dict[str, Any]:
    """``lens-rl goodput --json`` of spans a recorder kept (``lens_rl.testing``), written as the file exporter writes."""
    import shutil
    import tempfile

    from lens_rl.offline.run.analyze import analyze
    from lens_rl.store import span_files
    from lens_rl.testing import write_spans

    scratch = Path(tempfile.mkdtemp(prefix="lens-rl-test-"))
    try:
        return analyze(span_files(write_spans(spans, scratch)), jobs=1, **options)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def read_spans(where: Path) -> list[dict[str, Any]]:
    """Every span of a store (a run folder, or one file) in the receiver's dict shape."""
    from lens_rl.store import iter_rows, span_files

    out = []
    for path in [where] if where.is_file() else span_files(where):
        for head, row in iter_rows(path):
            out.append(
                {
                    "name": row.n,
                    "trace_id": row.t,
                    "span_id": row.s,
                    "parent_span_id": row.p,
                    "start_ns": row.b,
                    "end_ns": row.e,
                    "attributes": row.a or {},
                    "status": row.st or "UNSET",
                    "events": [{"name": e.get("n"), "attributes": e.get("a") or {}} for e in row.ev or ()],
                    "resource": head.resource,
                    "path": path,
                }
            )
    return out


def scale_module() -> Any:
    """``benchmarks/scale.py`` loaded by its path (the benchmarks are no package): its store synthesis."""
    spec = importlib.util.spec_from_file_location("lens_scale_bench", Path(__file__).parents[1] / "benchmarks/scale.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def synthesized_store(root: Path, spans: int = 50_000, files: int = 20) -> Path:
    """``benchmarks/scale.py``'s GRPO-shaped store of ``spans`` spans in ``files`` process files (one driver)
    under ``root/run``, plus a file of another shape (v1, which the reader skips with a note); ``root``."""
    scale_module().synthesize(root, spans, files)
    legacy = {
        "v": 1,
        "name": "old_phase",
        "span_id": "f" * 16,
        "trace_id": "a" * 32,
        "parent_span_id": None,
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_001_000_000_000,
        "attributes": {"rl.bucket": "overhead"},
        "resource": {"rl.worker_group": "legacy", "nv.dl.rank": 0, "process.pid": 9},
    }
    (root / "run" / "spans-legacy-0-9.jsonl").write_text(json.dumps(legacy) + "\n")
    return root


def v1_record(
    name: str,
    start_s: float,
    end_s: float,
    *,
    span: str,
    parent: str | None = None,
    group: str = "driver",
    rank: int = 0,
    pid: int = 1,
    **attrs: object,
) -> dict[str, Any]:
    """A span as a recorder holds it (the v1 line shape :func:`rollup` takes), times in seconds."""
    return {
        "v": 1,
        "name": name,
        "span_id": span,
        "parent_span_id": parent,
        "trace_id": "t" * 32,
        "start_ns": int(start_s * 1e9),
        "end_ns": int(end_s * 1e9),
        "attributes": dict(attrs),
        "resource": {"rl.worker_group": group, "nv.dl.rank": rank, "process.pid": pid, "rl.run_id": "r"},
    }


#: worker files of :func:`grow_store`'s run
STORE_WORKERS = 9


def step_lines(step: int) -> dict[str, list[dict[str, Any]]]:
    """One step's spans per file, in the order processes write them (children first)."""
    t = step * 10.0
    out: dict[str, list[dict[str, Any]]] = {"driver": [], **{f"w{w}": [] for w in range(STORE_WORKERS)}}
    for k, (name, bucket) in enumerate(
        (("generation", "productive"), ("policy_training", "productive"), ("weight_sync", "overhead"))
    ):
        out["driver"].append(span(name, t + 3 * k, t + 3 * k + 2.5, f"d{step}-{k}", parent=f"s{step}", bucket=bucket))
    out["driver"].append(span("step", t, t + 9.5, f"s{step}", parent="job", step=step))
    for w in range(STORE_WORKERS):
        k = w % 3
        start = t + 3 * k + 0.1 + 0.01 * w
        out[f"w{w}"].append(
            span("barrier", start + 1.5, start + 2.0, f"b{w}-{step}", parent=f"p{w}-{step}", bucket="idle")
        )
        out[f"w{w}"].append(
            span(
                "train",
                start,
                start + 2.0,
                f"p{w}-{step}",
                parent=f"d{step}-{k}",
                remote=True,
                bucket="productive",
                step=step,
                **{"rl.num_tokens": 100},
            )
        )
    return out


def grow_store(run: Path, first: int, last: int) -> None:
    """A run that grows: steps first..last-1 appended to the driver's file and 9 workers' (each file's header
    written with its first step); one step is a driver umbrella over three phases, each worker a remote child
    of one of them with a nested idle barrier (children written before their parents)."""
    run.mkdir(parents=True, exist_ok=True)
    for step in range(first, last):
        for name, rows in step_lines(step).items():
            path = run / (
                "spans-driver-0-1.jsonl"
                if name == "driver"
                else f"spans-lm_policy-{name[1:]}-{100 + int(name[1:])}.jsonl"
            )
            if not path.exists():
                group, rank, pid = (
                    ("driver", 0, 1) if name == "driver" else ("lm_policy", int(name[1:]), 100 + int(name[1:]))
                )
                extra = {"root": "job", "role": "driver"} if name == "driver" else {}
                path.write_text(json.dumps(header(group, rank, pid, **extra)) + "\n")
            with path.open("a") as handle:
                for row in rows:
                    handle.write(json.dumps(row) + "\n")


def cache_record(payload: bytes) -> bytes:
    """``payload`` as a record of a refresh-cache entry's file: its length (8 bytes, little-endian), then it."""
    return len(payload).to_bytes(8, "little") + payload


def count_records(data: bytes) -> int:
    """How many records (see :func:`cache_record`) a refresh-cache entry's file holds."""
    at = count = 0
    while at < len(data):
        at += 8 + int.from_bytes(data[at : at + 8], "little")
        count += 1
    return count


def twin_ids_store(run: Path, first: str) -> Callable[[], None]:
    """A worker's file under ``run`` with one productive span, and what appends a second whose id is the
    first's upper-case twin (``first``: "lower", the first span's id as lens_rl writes it; "upper", the other
    way round): a store a hostile or foreign writer could leave."""
    run.mkdir(parents=True, exist_ok=True)
    path = run / "spans-w-0-5.jsonl"
    one, two = (
        span("gen", 1, 2, "a", step=1, bucket="productive"),
        span("train", 2, 3, "b", step=1, bucket="productive"),
    )
    one["s"], two["s"] = (one["s"], one["s"].upper()) if first == "lower" else (one["s"].upper(), one["s"])
    path.write_text(json.dumps(header("w", 0, 5)) + "\n" + json.dumps(one) + "\n")

    def append_twin() -> None:
        with path.open("a") as handle:
            handle.write(json.dumps(two) + "\n")

    return append_twin
