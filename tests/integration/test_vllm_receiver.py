"""The loopback receiver: what vLLM's processes export over OTLP/HTTP lands in the file store, one file and
header per process, ids and parents kept, repeated ids (a seeded ``random``) kept apart and counted.

The exporting processes are real: the OpenTelemetry SDK's OTLP/HTTP exporter in subprocesses that seed
Python's ``random`` as vLLM's worker does, so their span ids repeat each other's.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lens_rl.integrations.vllm_receiver import StoreReceiver, pid_of, process_kind
from lens_rl.store import iter_rows, span_files

CALLER = {
    "rl.run_id": "r1",
    "rl.attempt": 0,
    "rl.worker_group": "gen",
    "nv.dl.rank": 3,
    "process.pid": 1,
    "host.name": "h",
}
PARENT = "00f067aa0ba902b7"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"

EXPORTER = """
    import os, random, sys
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    random.seed(1234)  # as vLLM's worker does: the SDK draws its ids from the global random
    kind = sys.argv[2]
    provider = TracerProvider(resource=Resource.create({
        "vllm.process_id": str(os.getpid()), "vllm.process_kind": kind, "vllm.instrumenting_module_name": "vllm.x",
        "rl.worker_group": "not-the-caller's",
    }))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
    tracer = provider.get_tracer("vllm.v1.engine.core")
    caller = TraceContextTextMapPropagator().extract({"traceparent": "00-TRACE-PARENT-01"})
    with tracer.start_as_current_span("EngineCoreProc init", context=caller):
        with tracer.start_as_current_span("Load model", attributes={"code.lineno": "7"}):
            pass
    provider.shutdown()
    print(os.getpid())
""".replace("TRACE", TRACE).replace("PARENT", PARENT)


def _export(endpoint: str, kind: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(EXPORTER), endpoint, kind], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.split()[-1])


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def rx(tmp_path: Path) -> Any:
    receiver = StoreReceiver(str(tmp_path), "r1", CALLER)
    yield receiver
    receiver.close()


@pytest.mark.slow
def test_each_process_gets_its_file_identity_ids_and_parents(rx: StoreReceiver, tmp_path: Path) -> None:
    """Two seeded processes: two files, each headed by the caller's identity merged with the process's own;
    ids and parents as sent; the remote parent marked; the scope on every line; repeats counted, not merged."""
    pids = {"engine_core": _export(rx.endpoint, "engine_core"), "worker": _export(rx.endpoint, "worker")}
    files = sorted((tmp_path / "r1").glob("spans-*.jsonl"))
    assert [f.name for f in files] == sorted(
        [f"spans-gen-3-vllm-engine-core-{pids['engine_core']}.jsonl", f"spans-gen-3-vllm-worker-{pids['worker']}.jsonl"]
    )
    ids = []
    for path in files:
        head, *rows = _lines(path)
        kind = "engine-core" if "engine-core" in path.name else "worker"
        pid = pids["engine_core" if kind == "engine-core" else "worker"]
        assert head["v"] == 2 and head["format"] == "lens_rl.spans/2" and head["pid"] == pid
        resource = head["resource"]
        assert resource["rl.worker_group"] == "gen" and resource["nv.dl.rank"] == 3  # the caller's identity wins
        assert resource["rl.run_id"] == "r1" and resource["host.name"] == "h"
        assert resource["process.pid"] == pid and resource["vllm.process_kind"] == kind
        by_name = {r["n"]: r for r in rows}
        top, child = by_name["EngineCoreProc init"], by_name["Load model"]
        assert top["t"] == child["t"] == TRACE
        assert top["p"] == PARENT and top["pr"] is True
        assert child["p"] == top["s"] and "pr" not in child
        assert child["a"] == {"code.lineno": "7"} and all(r["sc"] == "vllm.v1.engine.core" for r in rows)
        assert head["since"] <= min(r["b"] for r in rows)
        ids.append({r["s"] for r in rows})
    assert ids[0] == ids[1]  # the seeded random repeats them: each file keeps its own
    assert rx.stats()["ids_repeated"] == 2 and rx.stats()["spans"] == 4
    processes = {head.process for path in files for head, _ in iter_rows(path)}
    assert {(p.group, p.rank, p.pid, p.driver) for p in processes} == {("gen", 3, pid, False) for pid in pids.values()}


@pytest.mark.slow
def test_the_offline_tools_read_the_files(rx: StoreReceiver, tmp_path: Path) -> None:
    """What the receiver writes is a store the offline tools read without a skipped line."""
    from lens_rl.offline.run.analyze import analyze

    _export(rx.endpoint, "worker")
    report = analyze(span_files(tmp_path / "r1"))
    assert report["skipped_lines"] == 0 and report["spans"] == 2


def _body() -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"vllm.process_id": "4242", "vllm.instrumenting_module_name": "vllm.llm_engine"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("vllm.tracing.otel").start_as_current_span(
        "llm_request", attributes={"gen_ai.latency.e2e": 0.5}
    ):
        pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def _post(url: str, body: bytes, encoding: str | None = None) -> int:
    headers = {"Content-Type": "application/x-protobuf", **({"Content-Encoding": encoding} if encoding else {})}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_resent_batch_is_written_once(rx: StoreReceiver, tmp_path: Path) -> None:
    """OTLP/HTTP is at-least-once: a batch sent again (plain, then gzip) adds no line, and is counted."""
    body = _body()
    assert _post(rx.endpoint, body) == 200
    assert _post(rx.endpoint, gzip.compress(body), "gzip") == 200
    (path,) = (tmp_path / "r1").glob("spans-*.jsonl")
    assert path.name == "spans-gen-3-vllm-front-end-4242.jsonl"
    head, row = _lines(path)
    assert row["n"] == "llm_request" and row["a"] == {"gen_ai.latency.e2e": 0.5} and row["sc"] == "vllm.tracing.otel"
    assert rx.stats()["resent"] == 1 and rx.stats()["spans"] == 1


def test_resent_batches_are_written_once_within_a_bounded_window(tmp_path: Path) -> None:
    """Eight batches, then each sent again (as an exporter that timed out does): each span written once,
    every resend counted, with a memory of 4 span ids and 8 batches (not one entry per span ever written)."""
    rx = StoreReceiver(str(tmp_path), "r1", CALLER, max_ids=4, max_batches=8)
    try:
        bodies = [_body() for _ in range(8)]
        assert [_post(rx.endpoint, body) for body in bodies] == [200] * 8
        assert [_post(rx.endpoint, body) for body in reversed(bodies)] == [200] * 8
        stats = rx.stats()
    finally:
        assert rx.close(timeout_s=2.0) is True
    (path,) = (tmp_path / "r1").glob("spans-*.jsonl")
    rows = _lines(path)[1:]
    assert len(rows) == 8 and len({r["s"] for r in rows}) == 8
    assert stats["resent"] == 8 and stats["spans"] == 8


def test_bounded_and_refusing_garbage(tmp_path: Path) -> None:
    """Too large a body is refused with 413, garbage with 400, another path with 404; nothing is written."""
    rx = StoreReceiver(str(tmp_path), "r1", CALLER, max_body_bytes=1024)
    try:
        assert _post(rx.endpoint, b"x" * 1025) == 413
        assert _post(rx.endpoint, gzip.compress(b"\0" * 100_000), "gzip") == 400  # a small bomb, over the bound
        assert _post(rx.endpoint, b"\xff\xff\xff") == 400
        assert _post(rx.endpoint.replace("/v1/traces", "/v1/metrics"), b"") == 404
        assert rx.stats()["refused"] == 4
    finally:
        assert rx.close(timeout_s=2.0) is True
    assert not list(tmp_path.rglob("spans-*"))


def test_process_kind_and_pid() -> None:
    """A process's kind and pid come from vLLM's resource (its process kind, else its tracer's module)."""
    assert process_kind([], {"vllm.process_kind": "engine_core"}) == "engine-core"
    assert process_kind([], {"vllm.instrumenting_module_name": "vllm.llm_engine"}) == "front-end"
    assert process_kind(["vllm.v1.engine.core_client"], {}) == "front-end"
    assert process_kind(["vllm.v1.worker.gpu_worker"], {}) == "worker"
    assert process_kind(["other"], {}) == "unknown"
    assert pid_of({"vllm.process_id": "77"}) == 77 and pid_of({"process.pid": 5, "vllm.process_id": "77"}) == 5
    assert pid_of({"vllm.process_id": "x"}) == 0
