"""The file store's writer: v2 files of whole strict-JSON lines under trace_dir/<run_id>/, a full disk cut back, a fork's child never writing into its parent's files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl import traced_phase
from lens_rl.store import FORMAT_VERSION
from tests.conftest import run_python
from tests.stores import read_spans


def test_file_store_writes_versioned_whole_span_lines(tmp_path: Path) -> None:
    """A v2 file: a header with the resource and when telemetry started (before any span), then whole short-key
    span lines, under trace_dir/<run_id>/; a parent carried in from another process is marked as such."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, set_span_in_context

    before = time.time_ns()
    handle = lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": str(tmp_path), "run_id": "r1"}}, "grpo"
    )
    with lens_rl.traced_phase("generation", step=2, attributes={"custom.key": "v"}):
        pass
    with lens_rl.traced_phase(
        "called", parent={"traceparent": "00-0000000000000000000000000000abcd-0000000000000def-01"}
    ):
        with lens_rl.traced_phase("local"):
            pass
    remote = set_span_in_context(NonRecordingSpan(SpanContext(0xABCD, 0xDEF, is_remote=True)))
    with handle.tracer_provider.get_tracer("third.party").start_as_current_span("serve", remote, SpanKind.SERVER):
        pass  # (an SDK span, written by the generic encoder)
    assert lens_rl.shutdown_telemetry(3000)
    files = sorted(p.name for p in (tmp_path / "r1").iterdir())
    assert any(f.startswith("spans-driver-0-") for f in files) and any(f.startswith("metrics-driver-0-") for f in files)
    records = read_spans(tmp_path)
    gen = next(r for r in records if r["name"] == "generation")
    spans_file = next((tmp_path / "r1").glob("spans-*.jsonl"))
    lines = [json.loads(line) for line in spans_file.read_text().splitlines()]
    assert lines[0]["header"] and lines[0]["v"] == FORMAT_VERSION and lines[0]["resource"]["rl.run_id"] == "r1"
    assert before <= lines[0]["since"] <= min(line["b"] for line in lines[1:]) and lines[0]["remote_parents"] is True
    job = handle.root_span_id
    assert lines[0]["role"] == "driver" and lines[0]["root"] == f"{job:016x}"  # the job root, named: no orphan
    raw = next(line for line in lines[1:] if line["n"] == "generation")
    by_name = {line["n"]: line for line in lines[1:]}
    assert by_name["called"]["p"] == by_name["serve"]["p"] == "0000000000000def"
    assert by_name["called"]["pr"] is by_name["serve"]["pr"] is True
    assert by_name["local"]["p"] == by_name["called"]["s"] and "pr" not in by_name["local"] and "pr" not in raw
    assert "resource" not in raw and len(json.dumps(raw, separators=(",", ":"))) <= 350
    assert gen["attributes"] == {"custom.key": "v", "rl.step": 2, "rl.bucket": "productive"}
    assert gen["resource"]["rl.worker_group"] == "driver" and gen["resource"]["rl.run_id"] == "r1"
    assert len(gen["trace_id"]) == 32 and len(gen["span_id"]) == 16 and gen["end_ns"] >= gen["start_ns"]


SECRET = "hunter2-s3cr3t"


FULL_DISK = """
    import os, resource, signal, sys, lens_rl
    trace_dir = sys.argv[1] if len(sys.argv) > 1 else {trace_dir!r}
    if {limit!r}:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)             # writes past the limit fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit!r}, {limit!r}))
    h = lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": trace_dir, "run_id": "r",
                                        "metrics_enabled": False}}}}, "grpo")
    results = []
    for i in range(100):
        with lens_rl.traced_phase("generation", step=i) as span:
            span.set_attribute("rl.pad", "p" * 300)
        if i % 10 == 9:
            results.append(lens_rl.flush_telemetry(300))   # batches of ten: the disk fills part-way
    print("FLUSH", results[0], results[-1], h.stats()["exported"], flush=True)
    lens_rl.shutdown_telemetry(1000)
"""


@pytest.mark.slow
def test_a_full_disk_leaves_no_duplicate_and_no_garbage_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The file system fills mid-batch: what is on disk is whole lines, each span at most once, and the
    error is logged once with its message."""
    trace_dir = tmp_path / "store"
    mounted = False
    if (
        os.geteuid() == 0
        and os.system(f"mkdir -p {trace_dir} && mount -t tmpfs -o size=20k tmpfs {trace_dir} 2>/dev/null") == 0
    ):
        mounted, limit = True, 0
    else:
        limit = 20_000  # no mount here: the same ENOSPC-like fault through RLIMIT_FSIZE (EFBIG)
    try:
        out = run_python(FULL_DISK.format(trace_dir=str(trace_dir), limit=limit), timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "FLUSH True False" in out.stdout  # the first batches fit, the last ones do not
        assert sum("cannot write telemetry" in line for line in out.stderr.splitlines()) == 1
        assert "No space left" in out.stderr or "too large" in out.stderr
        lines = [line for p in trace_dir.rglob("spans-*.jsonl") for line in p.read_text().splitlines()]
        records = [json.loads(line) for line in lines]  # every line is whole, strict JSON
        ids = [r["s"] for r in records if not r.get("header")]
        assert len(ids) == len(set(ids)) and 0 < len(ids) < 100
    finally:
        if mounted:
            os.system(f"umount {trace_dir}")


@pytest.mark.slow
def test_a_full_disk_keeps_the_whole_lines_that_fit_and_the_header(tmp_path: Path) -> None:
    """One big batch meets a nearly full disk: the header and every whole line that fitted stay (never half a
    line), counted exported; only the rest is retried and counted lost."""
    trace_dir = tmp_path / "store"
    out = run_python(
        f"""
        import os, resource, signal, lens_rl
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)             # writes past the limit are short, then EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))
        h = lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(trace_dir)!r},
                                           "run_id": "r", "metrics_enabled": False}}}}, "grpo")
        for s in range(300):
            with lens_rl.traced_phase("step", step=s, attributes={{"pad": "x" * 300}}):
                pass
        print("SHUTDOWN", lens_rl.shutdown_telemetry(1000), flush=True)
        st = h.stats()
        print("STATS", st["accepted"], st["exported"], st["failed"], flush=True)
    """,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SHUTDOWN False" in out.stdout
    accepted, exported, failed = (int(x) for x in out.stdout.split("STATS")[1].split())
    (path,) = trace_dir.rglob("spans-*.jsonl")
    data = path.read_bytes()
    assert data.endswith(b"\n") and 30_000 < len(data) <= 40_000, len(data)
    records = [json.loads(line) for line in data.splitlines()]  # every line whole, strict JSON
    assert records[0].get("v") is not None and all(r.get("v") is None for r in records[1:])  # the header first
    ids = [r["s"] for r in records[1:]]
    assert len(ids) == len(set(ids)) == exported > 0
    assert accepted == 300 + 1 and exported + failed == accepted  # (the job root rl.job too)


def test_a_process_exiting_during_a_failed_write_leaves_whole_lines(tmp_path: Path) -> None:
    """The disk fills and the cut-back is slow (a busy machine) while the job exits: the exit waits for it.

    Without that wait the export thread stops between its failed write and the cut-back,
    and half a line stays on disk (what a loaded machine showed one run in five).
    """
    trace_dir = tmp_path / "store"
    out = run_python(
        f"""
        import os, resource, signal, time, lens_rl
        real_ftruncate = os.ftruncate
        def slow_ftruncate(fd, length):
            time.sleep(0.5)
            real_ftruncate(fd, length)
        os.ftruncate = slow_ftruncate
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(trace_dir)!r},
                                       "run_id": "r", "metrics_enabled": False}}}}, "grpo")
        for i in range(40):
            with lens_rl.traced_phase("generation", step=i) as span:
                span.set_attribute("rl.pad", "p" * 300)
        print("SHUTDOWN", lens_rl.shutdown_telemetry(100), flush=True)  # returns before the cut-back ends
    """,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SHUTDOWN False" in out.stdout
    data = b"".join(p.read_bytes() for p in trace_dir.rglob("spans-*.jsonl"))
    assert data.endswith(b"\n") or not data, data[-80:]
    assert all(json.loads(line) for line in data.splitlines())


def test_every_line_is_strict_json(tmp_path: Path) -> None:
    """NaN and infinities are written as strings: every line parses with a strict JSON parser."""
    lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": str(tmp_path), "metrics_enabled": False}}, "grpo"
    )
    with traced_phase("generation") as span:
        span.set_attribute("rl.loss", float("nan"))
        span.set_attribute("rl.grad_norm", float("inf"))
    lens_rl.shutdown_telemetry(2000)

    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))

    lines = [line for p in tmp_path.rglob("*.jsonl") for line in p.read_text().splitlines()]
    gen = next(strict(line) for line in lines if '"generation"' in line)
    assert gen["a"]["rl.loss"] == "NaN" and gen["a"]["rl.grad_norm"] == "Infinity"


def test_no_identity_value_writes_outside_trace_dir(tmp_path: Path) -> None:
    """Rank, group and run id from the environment cannot climb out of trace_dir; long names are shortened."""
    trace_dir = tmp_path / "store"
    env = {
        "LENS_RL_OTEL_ENABLED": "1",
        "LENS_RL_OTEL_TRACE_DIR": str(trace_dir),
        "LENS_RL_OTEL_RUN_ID": "..",
        "OTEL_RESOURCE_ATTRIBUTES": "nv.dl.rank=%2F..%2F..%2Fescaped",
        "LENS_RL_WORKER_GROUP": "g" * 400,
    }
    out = run_python(
        """
        import lens_rl
        lens_rl.init_telemetry_worker()
        with lens_rl.traced_phase("generation"):
            pass
        assert lens_rl.shutdown_telemetry(3000)
    """,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(trace_dir in p.parents for p in written)
    assert all(len(p.name) < 255 for p in written)


def test_a_forked_child_never_writes_into_its_parents_files(tmp_path: Path) -> None:
    """The SDK restarts the metric thread in a forked child: the child still never writes the parent's file."""
    out = run_python(f"""
        import os, time, lens_rl
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r},
                                        "metrics_interval_ms": 50}}}}, "grpo")
        with lens_rl.traced_phase("generation"):
            pass
        pid = os.fork()
        if pid == 0:
            time.sleep(0.5)                   # several metric intervals in the child
            os._exit(0)
        os.waitpid(pid, 0)
        lens_rl.shutdown_telemetry(3000)
        print(os.getpid(), pid)
    """)
    assert out.returncode == 0, out.stderr
    parent, child = out.stdout.split()
    files = [p for p in tmp_path.rglob("*.jsonl")]
    assert files and all(not p.name.endswith(f"-{child}.jsonl") for p in files)
    for path in files:  # every header (and so every line after it) is the parent's
        headers = [json.loads(line) for line in path.read_text().splitlines() if '"header"' in line]
        assert headers and all(str(h["pid"]) == parent for h in headers), path


def test_the_exporters_header_line_starts_as_the_store_says(tmp_path: Path) -> None:
    """The first key of a header line the exporter writes is ``v`` (what a scan for later headers looks for),
    and a span line's is not."""
    import lens_rl
    from lens_rl.store import HEADER_PREFIX

    lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "trace_dir": str(tmp_path), "run_id": "h"}})
    with lens_rl.traced_phase("x"):
        pass
    lens_rl.shutdown_telemetry(2000)
    (path,) = (tmp_path / "h").glob("spans-*.jsonl")
    lines = path.read_bytes().splitlines()
    assert lines[0].startswith(HEADER_PREFIX) and not any(line.startswith(HEADER_PREFIX) for line in lines[1:])
