"""Export: the file store, OTLP/HTTP to a real receiver, bursts, and bounded flush / shutdown."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

import lens_rl
from lens_rl.store import FORMAT_VERSION
from lens_rl.testing import OTLPReceiver, hung_endpoint, refused_endpoint
from tests.conftest import run_python
from tests.stores import read_spans

# Scheduling slack on a shared, busy 2-core machine. An unbounded call would take the
# 30 s export timeout (or forever), so this still fails on a real bound violation.
SLACK_S = 0.75


def _otlp(endpoint: str, **extra: object) -> dict:
    return {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": endpoint, **extra},
            "policy": {"model_name": "tiny-model"}}  # fmt: skip


def _burst(handle: object, n: int) -> float:
    tracer = handle.tracer  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(n):
        tracer.start_span("burst").end()
    return time.perf_counter() - t0


def test_file_store_writes_versioned_whole_span_lines(tmp_path: Path) -> None:
    """A v2 file: a header with the resource and when telemetry started (before any span), then whole short-key
    span lines, under trace_dir/<run_id>/; a parent carried in from another process is marked as such."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, set_span_in_context

    before = time.time_ns()
    handle = lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "trace_dir": str(tmp_path), "run_id": "r1"}},
                                           "grpo")  # fmt: skip
    with lens_rl.traced_phase("generation", step=2, attributes={"custom.key": "v"}):
        pass
    with lens_rl.traced_phase("called", parent={"traceparent": "00-0000000000000000000000000000abcd-0000000000000def-01"}):
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


def test_otlp_export_reaches_a_real_receiver(receiver: OTLPReceiver) -> None:
    """Spans and metrics arrive over OTLP/HTTP protobuf with the process identity as resource."""
    lens_rl.init_telemetry_driver(_otlp(receiver.endpoint), "grpo")
    with lens_rl.traced_phase("policy_training", step=1):
        pass
    assert lens_rl.flush_telemetry(5000) is True
    assert receiver.wait_for_spans(1, 5)
    span = next(s for s in receiver.spans if s["name"] == "policy_training")
    assert span["attributes"]["rl.bucket"] == "productive" and span["attributes"]["rl.step"] == 1
    assert span["resource"]["rl.worker_group"] == "driver" and span["resource"]["rl.model.name"] == "tiny-model"
    assert span["resource"]["nv.dl.rank"] == 0 and span["resource"]["nv.dl.campaign.stage"] == "RL"
    assert {"rl.goodput.bucket_seconds", "rl.phase.duration"} <= receiver.metric_names()
    assert lens_rl.shutdown_telemetry(5000) is True
    job = next(s for s in receiver.spans if s["name"] == "rl.job")
    assert span["trace_id"] == job["trace_id"] and span["parent_span_id"] == job["span_id"]


def test_otlp_goes_through_the_proxy_the_environment_names(receiver: OTLPReceiver) -> None:
    """HTTP_PROXY set when telemetry starts is honoured for spans and metrics (read once, not per batch),
    and NO_PROXY still exempts a host."""
    code = """
        import lens_rl
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "exporter": "otlp",
                                                     "endpoint": "http://collector.invalid:4318"}}}}, "grpo")
        with lens_rl.traced_phase("through_proxy"):
            pass
        print("FLUSH", lens_rl.flush_telemetry({budget_ms}), flush=True)
        lens_rl.shutdown_telemetry({budget_ms})
    """
    proxy = {"HTTP_PROXY": receiver.endpoint, "http_proxy": receiver.endpoint, "NO_PROXY": "", "no_proxy": ""}
    out = run_python(code.format(budget_ms=10_000), env=proxy)
    assert "FLUSH True" in out.stdout, out.stderr[-2000:]
    assert any(s["name"] == "through_proxy" for s in receiver.spans)  # the receiver stood in for the proxy
    assert "rl.phase.duration" in receiver.metric_names()
    exempt = run_python(code.format(budget_ms=1000), env={**proxy, "NO_PROXY": "collector.invalid",
                                                           "no_proxy": "collector.invalid"})  # fmt: skip
    assert "FLUSH False" in exempt.stdout  # straight to a host that does not resolve
    assert sum(s["name"] == "through_proxy" for s in receiver.spans) == 1


def test_burst_of_20000_spans_all_arrive(receiver: OTLPReceiver) -> None:
    """20,000 spans ended in about a second all reach the collector; nothing dropped."""
    handle = lens_rl.init_telemetry_driver(_otlp(receiver.endpoint), "grpo")
    elapsed_s = _burst(handle, 20_000)
    assert lens_rl.flush_telemetry(60_000) is True, handle.stats()
    assert receiver.wait_for_spans(20_000, 10)
    assert sum(s["name"] == "burst" for s in receiver.spans) == 20_000
    assert handle.stats()["dropped"] == 0
    print(f"burst: 20000 spans ended in {elapsed_s:.2f}s")


def test_full_queue_drops_are_counted_and_flush_says_false(receiver: OTLPReceiver, caplog: pytest.LogCaptureFixture) -> None:
    """Past max_queue_spans spans are dropped, counted, warned about once, and flush is False."""
    handle = lens_rl.init_telemetry_driver(_otlp(receiver.endpoint, max_queue_spans=100), "grpo")
    _burst(handle, 5000)
    assert lens_rl.flush_telemetry(10_000) is False
    stats = handle.stats()
    assert stats["dropped"] > 0 and stats["exported"] + stats["dropped"] == 5000
    assert sum("span queue full" in r.getMessage() for r in caplog.records) == 1
    assert handle.spans_dropped() == stats["dropped"]


@pytest.mark.parametrize("fault", ["refused", "hung", "slow"])
@pytest.mark.parametrize("call", ["flush", "shutdown"])
def test_flush_and_shutdown_are_bounded_with_10000_spans_queued(fault: str, call: str) -> None:
    """Against a refusing, silent or slow collector, flush/shutdown return in budget and say False."""
    sock = slow = None
    if fault == "refused":
        endpoint = refused_endpoint()
    elif fault == "hung":
        endpoint, sock = hung_endpoint()
    else:
        slow = OTLPReceiver(delay_s=5.0)
        endpoint = slow.endpoint
    try:
        handle = lens_rl.init_telemetry_driver(_otlp(endpoint, export_timeout_ms=30_000), "grpo")
        _burst(handle, 10_000)
        budget_ms = 1000
        t0 = time.monotonic()
        result = lens_rl.flush_telemetry(budget_ms) if call == "flush" else lens_rl.shutdown_telemetry(budget_ms)
        elapsed_s = time.monotonic() - t0
        assert result is False
        assert elapsed_s <= budget_ms / 1000 + SLACK_S, f"{call} vs {fault} took {elapsed_s:.3f}s"
        if call == "flush":  # the same budget holds for the shutdown that follows
            t0 = time.monotonic()
            assert lens_rl.shutdown_telemetry(500) is False
            assert time.monotonic() - t0 <= 0.5 + SLACK_S
    finally:
        if sock is not None:
            sock.close()
        if slow is not None:
            slow.close()


def test_flush_is_false_when_a_batch_failed_for_good() -> None:
    """The SDK says True after failed exports; lens_rl's flush does not."""
    rejecting = OTLPReceiver(fail_status=400)  # non-retryable: the batch fails for good
    try:
        handle = lens_rl.init_telemetry_driver(_otlp(rejecting.endpoint), "grpo")
        handle.span_pipeline._retry_for_s = 0.0
        with lens_rl.traced_phase("generation"):
            pass
        assert lens_rl.flush_telemetry(5000) is False
        assert handle.stats()["failed"] >= 1
    finally:
        rejecting.close()


def test_exporter_none_and_console_run(tmp_path: Path) -> None:
    """exporter=none records nothing outward; console prints spans to stdout."""
    handle = lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "none"}}, "grpo")
    assert handle is not None and handle.is_exporting is False
    with lens_rl.traced_phase("generation"):
        pass
    assert lens_rl.shutdown_telemetry(1000) is True
    out = run_python(
        """
        import lens_rl
        lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "console",
                                       "metrics_enabled": False}}, "grpo")
        with lens_rl.traced_phase("generation"):
            pass
        lens_rl.shutdown_telemetry(2000)
        """
    )
    assert out.returncode == 0, out.stderr
    assert '"name": "generation"' in out.stdout


def test_grpc_protocol_exports_to_a_real_grpc_receiver() -> None:
    """protocol=grpc sends spans over OTLP/gRPC to a real gRPC server on loopback."""
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    received: list[str] = []

    class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # the gRPC service names it
            received.extend(s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        handle = lens_rl.init_telemetry_driver(
            _otlp(f"http://127.0.0.1:{port}", protocol="grpc", metrics_enabled=False), "grpo")  # fmt: skip
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        assert isinstance(handle.span_pipeline.exporter, OTLPSpanExporter)  # OpenTelemetry's, with lens_rl's encoder
        with lens_rl.traced_phase("generation"):
            pass
        assert lens_rl.shutdown_telemetry(5000) is True
        assert sorted(received) == ["generation", "rl.job"]
    finally:
        server.stop(0)


def test_grpc_against_a_refused_port_is_bounded() -> None:
    """gRPC to a port that refuses: shutdown still returns in budget, saying False."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    handle = lens_rl.init_telemetry_driver(_otlp(refused_endpoint(), protocol="grpc"), "grpo")
    _burst(handle, 100)
    t0 = time.monotonic()
    assert lens_rl.shutdown_telemetry(500) is False
    assert time.monotonic() - t0 <= 0.5 + SLACK_S


def test_the_fast_otlp_encoder_builds_what_opentelemetrys_encoder_builds() -> None:
    """lens_rl's OTLP encoder and OpenTelemetry's give equal requests for spans of every shape: lens_rl phases
    (with attributes of every type, events, links, error status, limits exceeded) and SDK spans of another
    scope, kind, remote parent and trace state, in one batch."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
        TraceState,
        set_span_in_context,
    )

    from lens_rl.export.otlp import encode_request

    with lens_rl.testing.recording() as rec:
        remote = SpanContext(0xABC, 0xDEF, True, TraceFlags(1), TraceState([("vendor", "v1")]))
        with lens_rl.traced_phase("generation", bucket="productive", step=3,
                                  attributes={"s": "x", "i": 7, "f": 0.5, "b": True, "l": [1, 2], "ls": ["a", "b"],
                                              "lf": [0.5, 1.5], "lb": [True, False], "api_key": "secret"}) as span:  # fmt: skip
            span.add_event("chunk", {"n": 1})
            span.add_link(remote, {"why": "batch"})
            span.set_attribute("late", "yes")
        with pytest.raises(ValueError), lens_rl.traced_phase("reward"):
            raise ValueError("bad reward")
        for step in (1, 1, 2):  # one shape twice (encoded from its template), then another
            with lens_rl.traced_phase("logprob", bucket="productive", step=step):
                with lens_rl.traced_phase("inner"):  # a record with a parent in this process
                    pass
        traceparent = "00-0000000000000000000000000000abcd-0000000000000def-01"
        with lens_rl.traced_phase("remote_child", parent={"traceparent": traceparent}):  # a remote parent
            pass
        with lens_rl.traced_phase("remote_child", parent={"traceparent": traceparent, "tracestate": "vendor=v1"}):
            pass
        with lens_rl.traced_phase("many", bucket="overhead", attributes={f"k{i}": i for i in range(200)}):  # > 128
            pass
        tracer = rec.handle.tracer_provider.get_tracer("third.party", "1.0", schema_url="https://x/s")
        ctx = set_span_in_context(NonRecordingSpan(remote))
        with tracer.start_as_current_span("GET", kind=SpanKind.CLIENT, context=ctx, attributes={"http.status": 200}) as sdk:
            sdk.set_status(Status(StatusCode.OK))
        with tracer.start_as_current_span("serve", kind=SpanKind.SERVER):
            pass
        spans = list(rec.spans)
    assert {type(s).__name__ for s in spans} == {"FastSpan", "ReadableSpan"}
    ours, theirs = encode_request(spans), encode_spans(spans)
    assert ours == theirs
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    phases = {s.name: s for rs in ours.resource_spans for ss in rs.scope_spans for s in ss.spans}
    many = {kv.key for kv in phases["many"].attributes}
    assert phases["many"].dropped_attributes_count == 201 - 128 and "rl.bucket" in many and "k126" in many
    assert phases["reward"].status.code == 2 and phases["GET"].flags == 0x300 and phases["inner"].parent_span_id
    remote = [s for rs in ours.resource_spans for ss in rs.scope_spans for s in ss.spans if s.name == "remote_child"]
    assert [(s.flags, s.trace_state) for s in remote] == [(0x300, ""), (0x300, "vendor=v1")]
    assert {kv.key: kv.value.string_value for kv in phases["generation"].attributes}["api_key"] == "[REDACTED]"


def test_phase_lines_from_a_shape_are_the_lines_span_row_writes() -> None:
    """The file store writes a phase span from its shape's cached JSON only when that gives the very line
    the general writer gives; spans that changed shape (renamed, attributes set, events, status) take the
    general path."""
    from lens_rl.export.file import json_line, span_line, span_lines, span_row

    with lens_rl.testing.recording() as rec:
        for step in (1, 1, 2):
            with lens_rl.traced_phase("generation", bucket="productive", step=step, attributes={"m": "x\"y"}):
                pass
        with lens_rl.traced_phase("generation", bucket="productive", step=1) as span:
            span.set_attribute("rl.num_tokens", 7)
        with lens_rl.traced_phase("reward") as span:
            span.update_name("reward_v2")
        with lens_rl.traced_phase("sync", bucket="overhead") as span:
            span.add_event("chunk")
        with lens_rl.traced_phase("step", step=4):  # children sharing a parent, then the parent
            for _ in range(2):
                with lens_rl.traced_phase("inner"):
                    pass
        spans = list(rec.spans)
    for i, span in enumerate(spans):  # neighbours that share a thread, and ones that do not
        span._lens_thread, span._lens_thread_name = (7, "Main\"Thread") if i % 3 else (8, "worker")
    assert len(spans) == 9 and sum(getattr(s, "shape", None) is not None for s in spans) == 6
    expected = [json_line(span_row(s)) for s in spans]
    assert [span_line(s) for s in spans] == expected
    assert span_lines(spans) == expected and span_lines(spans[::-1]) == expected[::-1]  # formats shared in a batch


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_real_collector_accepts_the_otlp_lens_rl_writes(protocol: str) -> None:
    """rotel (a real OTLP collector) takes lens_rl's spans over HTTP and gRPC and forwards them intact."""
    rotel = pytest.importorskip("rotel")
    import socket

    agent = Path(rotel.__file__).parent / "rotel-agent"
    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    with OTLPReceiver() as rx:
        proc = subprocess.Popen([str(agent), "start", "--otlp-grpc-endpoint", f"127.0.0.1:{ports[0]}",
                                 "--otlp-http-endpoint", f"127.0.0.1:{ports[1]}", "--exporter", "otlp",
                                 "--otlp-exporter-endpoint", rx.endpoint, "--otlp-exporter-protocol", "http"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            port = ports[0] if protocol == "grpc" else ports[1]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the collector listens
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            lens_rl.init_telemetry_driver(_otlp(f"http://127.0.0.1:{port}", protocol=protocol, metrics_enabled=False),
                                          "grpo")  # fmt: skip
            for step in (1, 2):
                with lens_rl.traced_phase("generation", bucket="productive", step=step, attributes={"k": [1, 2]}):
                    pass
            assert lens_rl.shutdown_telemetry(5000) is True
            assert rx.wait_for_spans(3, 10), proc.stdout
            phases = sorted((s["attributes"]["rl.step"], s["attributes"]) for s in rx.spans if s["name"] == "generation")
            assert [p[0] for p in phases] == [1, 2]
            assert phases[0][1] == {"rl.bucket": "productive", "rl.step": 1, "k": [1, 2]}
        finally:
            proc.terminate()
            proc.communicate(timeout=10)
