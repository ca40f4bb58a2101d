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
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def span_id(label: str) -> str:
    """A 16-hex-digit span id made from a readable label (the same label, the same id)."""
    return hashlib.sha1(label.encode()).hexdigest()[:16]


def span(name: str, start_s: float, end_s: float, label: str, *, parent: str | None = None, remote: bool = False,
         bucket: str | None = None, step: Any = None, trace: str = "t", **attrs: Any) -> dict[str, Any]:  # fmt: skip
    """One v2 span line: ``parent`` is another span's label (``remote``: carried in from another process);
    ``bucket`` and ``step`` become ``rl.bucket`` / ``rl.step``; other keywords are attributes as given
    (``**{"rl.num_tokens": 10}``)."""
    row: dict[str, Any] = {"n": name, "t": hashlib.sha1(trace.encode()).hexdigest()[:32], "s": span_id(label)}
    if parent is not None:
        row["p"] = span_id(parent)
        if remote:
            row["pr"] = True
    row["b"], row["e"] = int(round(start_s * 1e9)), int(round(end_s * 1e9))
    a = dict(attrs)
    if bucket is not None:
        a["rl.bucket"] = bucket
    if step is not None:
        a["rl.step"] = step
    if a:
        row["a"] = a
    return row


def header(group: str, rank: int, pid: int, *, run: str = "r1", since_s: float = 0.0, root: str | None = None,
           **resource: Any) -> dict[str, Any]:  # fmt: skip
    """A v2 span file's header for one process (``root``: the job root's label, as a driver's header names it)."""
    res = {"service.name": "lens-rl", "rl.worker_group": group, "nv.dl.rank": rank, "nv.dl.world_size": 1,
           "process.pid": pid, "rl.run_id": run, **resource}  # fmt: skip
    head: dict[str, Any] = {"v": 2, "header": True, "format": "lens_rl.spans/2", "kind": "spans", "resource": res,
                            "pid": pid, "since": int(since_s * 1e9), "remote_parents": True}  # fmt: skip
    if root is not None:
        head["root"] = span_id(root)
    return head


def write_process(run_dir: Path, group: str, rank: int, pid: int, spans: Iterable[Mapping[str, Any]], *,
                  name: str | None = None, **head: Any) -> Path:  # fmt: skip
    """Write one process's span file under ``run_dir`` (its name made as the exporter makes it, unless given)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / (name or f"spans-{group}-{rank}-{pid}.jsonl")
    lines = [json.dumps(header(group, rank, pid, **head)), *(json.dumps(dict(s)) for s in spans)]
    path.write_text("\n".join(lines) + "\n")
    return path
