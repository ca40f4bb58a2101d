"""Recorded spans written as a file store: what the offline tools read, from spans a test recorded in memory.

The lines are the file exporter's own (:func:`lens_rl.export.lines.span_lines`), under a header per
process, so a test of the offline tools reads exactly what a job would have written.

Example::

    with lens_rl.testing.recording(worker_group="driver") as rec:
        ...
    report = analyze(span_files(write_spans(rec.spans, tmp_path)))
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lens_rl.export.lines import json_line, span_lines
from lens_rl.store import file_name, header

__all__ = ["write_spans"]


def write_spans(spans: Iterable[Any], run_dir: str | os.PathLike[str]) -> Path:
    """Write finished OpenTelemetry spans under ``run_dir``: one span file per process (resource), its header
    made from the resource (the driver's: ``rl.worker_group`` driver). Returns ``run_dir``."""
    by_process: dict[tuple[Any, ...], list[Any]] = {}
    for span in spans:
        attrs = dict(span.resource.attributes)
        by_process.setdefault(tuple(sorted((k, str(v)) for k, v in attrs.items())), []).append(span)
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    for group in by_process.values():
        attrs = dict(group[0].resource.attributes)
        pid = int(attrs.get("process.pid", os.getpid()))
        role = "driver" if attrs.get("rl.worker_group") == "driver" else "worker"
        head = header("spans", attrs, pid, min(s.start_time for s in group), role=role)
        lines = [json_line(head), *span_lines(group)]
        (out / file_name("spans", attrs, pid)).write_text("\n".join(lines) + "\n")
    return out
