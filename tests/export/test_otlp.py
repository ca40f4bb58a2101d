"""Export: the file store, OTLP/HTTP to a real receiver, bursts, and bounded flush / shutdown."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import lens_rl
from lens_rl.testing import OTLPReceiver, refused_endpoint
from tests.conftest import run_python
from tests.export import SLACK_S, burst, grpc_trace_server, otlp_config


def test_otlp_export_reaches_a_real_receiver(receiver: OTLPReceiver) -> None:
    """Spans and metrics arrive over OTLP/HTTP protobuf with the process identity as resource."""
    lens_rl.init_telemetry_driver(otlp_config(receiver.endpoint), "grpo")
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


@pytest.mark.slow
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
    exempt = run_python(
        code.format(budget_ms=1000), env={**proxy, "NO_PROXY": "collector.invalid", "no_proxy": "collector.invalid"}
    )
    assert "FLUSH False" in exempt.stdout  # straight to a host that does not resolve
    assert sum(s["name"] == "through_proxy" for s in receiver.spans) == 1


def test_grpc_protocol_exports_to_a_real_grpc_receiver() -> None:
    """protocol=grpc sends spans over OTLP/gRPC to a real gRPC server on loopback."""
    with grpc_trace_server() as (port, received):
        handle = lens_rl.init_telemetry_driver(
            otlp_config(f"http://127.0.0.1:{port}", protocol="grpc", metrics_enabled=False), "grpo"
        )
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        assert isinstance(handle.span_pipeline.exporter, OTLPSpanExporter)  # OpenTelemetry's, with lens_rl's encoder
        with lens_rl.traced_phase("generation"):
            pass
        assert lens_rl.shutdown_telemetry(5000) is True
        assert sorted(name for name, _ in received) == ["generation", "rl.job"]


def test_grpc_against_a_refused_port_is_bounded() -> None:
    """gRPC to a port that refuses: shutdown still returns in budget, saying False."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    handle = lens_rl.init_telemetry_driver(otlp_config(refused_endpoint(), protocol="grpc"), "grpo")
    burst(handle, 100)
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
        with lens_rl.traced_phase(
            "generation",
            bucket="productive",
            step=3,
            attributes={
                "s": "x",
                "i": 7,
                "f": 0.5,
                "b": True,
                "l": [1, 2],
                "ls": ["a", "b"],
                "lf": [0.5, 1.5],
                "lb": [True, False],
                "api_key": "secret",
            },
        ) as span:
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
        with tracer.start_as_current_span(
            "GET", kind=SpanKind.CLIENT, context=ctx, attributes={"http.status": 200}
        ) as sdk:
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
        proc = subprocess.Popen(
            [
                str(agent),
                "start",
                "--otlp-grpc-endpoint",
                f"127.0.0.1:{ports[0]}",
                "--otlp-http-endpoint",
                f"127.0.0.1:{ports[1]}",
                "--exporter",
                "otlp",
                "--otlp-exporter-endpoint",
                rx.endpoint,
                "--otlp-exporter-protocol",
                "http",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            port = ports[0] if protocol == "grpc" else ports[1]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the collector listens
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            lens_rl.init_telemetry_driver(
                otlp_config(f"http://127.0.0.1:{port}", protocol=protocol, metrics_enabled=False), "grpo"
            )
            for step in (1, 2):
                with lens_rl.traced_phase("generation", bucket="productive", step=step, attributes={"k": [1, 2]}):
                    pass
            assert lens_rl.shutdown_telemetry(5000) is True
            assert rx.wait_for_spans(3, 10), proc.stdout
            phases = sorted(
                (s["attributes"]["rl.step"], s["attributes"]) for s in rx.spans if s["name"] == "generation"
            )
            assert [p[0] for p in phases] == [1, 2]
            assert phases[0][1] == {"rl.bucket": "productive", "rl.step": 1, "k": [1, 2]}
        finally:
            proc.terminate()
            proc.communicate(timeout=10)
