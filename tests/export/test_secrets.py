"""Secrets on the way out: an endpoint's userinfo over gRPC, a badly formed header entry (SPEC, Secrets)."""

from __future__ import annotations

import base64

import pytest

import lens_rl
from lens_rl.testing import OTLPReceiver, refused_endpoint
from tests.conftest import run_python
from tests.export import grpc_trace_server, otlp_config

SECRET = "s3cr3tPW"


def test_grpc_endpoint_userinfo_is_sent_as_basic_auth_to_a_real_grpc_receiver() -> None:
    """``protocol: grpc`` with ``http://user:pw@host:port``: the spans reach a real gRPC server on loopback (the
    target without the userinfo), which gets the credentials as an ``authorization: Basic`` header, as HTTP
    sends them."""
    with grpc_trace_server() as (port, received):
        lens_rl.init_telemetry_driver(
            otlp_config(f"http://user:{SECRET}@127.0.0.1:{port}", protocol="grpc", metrics_enabled=False), "grpo"
        )
        with lens_rl.traced_phase("generation"):
            pass
        assert lens_rl.shutdown_telemetry(5000) is True
    assert sorted(name for name, _ in received) == ["generation", "rl.job"]
    expected = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
    assert all(metadata.get("authorization") == expected for _, metadata in received)


def test_grpc_endpoint_password_is_in_no_line_when_the_collector_is_down() -> None:
    """``protocol: grpc`` to a refused port with a password in the endpoint: neither lens_rl's warnings (the
    span and metric outages, the spans lost at shutdown) nor the gRPC exporter's own say it."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    endpoint = refused_endpoint().replace("http://", f"http://user:{SECRET}@")
    out = run_python(f"""
        import time, lens_rl
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "exporter": "otlp", "protocol": "grpc",
            "endpoint": {endpoint!r}, "export_timeout_ms": 500, "metrics_interval_ms": 200}}}})
        with lens_rl.traced_phase("generation", step=0):
            pass
        lens_rl.flush_telemetry(800)
        time.sleep(0.5)
        print("SHUTDOWN", lens_rl.shutdown_telemetry(500))
    """)
    text = out.stdout + out.stderr
    assert "SHUTDOWN False" in out.stdout, out.stderr[-2000:]
    assert SECRET not in text
    assert "still queued for 127.0.0.1:" in text  # the lines are there, the target said without its userinfo


@pytest.mark.parametrize("entry", ["x-honeycomb-team: s3cr3tKEY", "x-honeycomb-team=s3cr3t\u20acKEY"])
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_badly_formed_header_entry_is_never_logged(receiver: OTLPReceiver, protocol: str, entry: str) -> None:
    """``OTEL_EXPORTER_OTLP_HEADERS="x-honeycomb-team: KEY"`` (a colon for '='), or a value no request can carry
    (not ASCII): one warning names the entry by its position, never its text; OpenTelemetry, which reads the
    variable again, logs no entry either; nor does a failed send; a well formed entry beside it is still sent."""
    if protocol == "grpc":
        pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    endpoint = receiver.endpoint if protocol == "http/protobuf" else refused_endpoint()
    out = run_python(
        f"""
        import lens_rl
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "exporter": "otlp", "protocol": {protocol!r},
            "endpoint": {endpoint!r}, "export_timeout_ms": 500}}}})
        with lens_rl.traced_phase("generation", step=0):
            pass
        lens_rl.shutdown_telemetry(2000)
        """,
        env={"OTEL_EXPORTER_OTLP_HEADERS": f"{entry},x-ok=fine"},
    )
    text = out.stdout + out.stderr
    assert "OTEL_EXPORTER_OTLP_HEADERS: entry 1 is not name=value" in text, text[-2000:]
    assert "s3cr3t" not in text
    if protocol == "http/protobuf":
        assert receiver.headers and all(h.get("x-ok") == "fine" for h in receiver.headers)


def test_the_sdks_own_header_warning_is_kept_without_its_entry() -> None:
    """OpenTelemetry's own parse of the variable (its HTTP exporters read it again whatever lens_rl gives them,
    on some releases): once lens_rl has made its exporters, the warning comes without the entry."""
    out = run_python(
        """
        import lens_rl
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "otlp",
            "endpoint": "http://127.0.0.1:9", "export_timeout_ms": 300}})
        OTLPMetricExporter(endpoint="http://127.0.0.1:9/v1/metrics")  # the SDK's own reading, no headers given
        lens_rl.shutdown_telemetry(300)
        """,
        env={"OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team: s3cr3tKEY"},
    )
    assert "Header format invalid" in out.stderr and "not shown" in out.stderr, out.stderr[-2000:]
    assert "s3cr3tKEY" not in out.stdout + out.stderr
