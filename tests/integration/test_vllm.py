"""vLLM native tracing: the flags follow the resolved config and the master switch."""

from __future__ import annotations

import pytest

from lens_rl.integrations.vllm import vllm_tracing_env, vllm_tracing_kwargs


def test_nothing_when_not_requested(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off, or on without vllm_native_tracing, gives no engine arguments."""
    assert vllm_tracing_kwargs() == {} and vllm_tracing_env() == {}
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    assert vllm_tracing_kwargs() == {}
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "0")
    monkeypatch.setenv("LENS_RL_OTEL_VLLM_NATIVE_TRACING", "1")
    assert vllm_tracing_kwargs() == {}  # the master switch wins


def test_http_and_grpc_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP gets the /v1/traces path and the protocol env; gRPC the bare endpoint."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_VLLM_NATIVE_TRACING", "true")
    monkeypatch.setenv("LENS_RL_OTEL_ENDPOINT", "http://collector:4318/")
    assert vllm_tracing_kwargs() == {
        "otlp_traces_endpoint": "http://collector:4318/v1/traces",
        "collect_detailed_traces": ["all"],
    }
    assert vllm_tracing_env()["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    monkeypatch.setenv("LENS_RL_OTEL_PROTOCOL", "grpc")
    monkeypatch.setenv("LENS_RL_OTEL_ENDPOINT", "http://collector:4317")
    assert vllm_tracing_kwargs("model,worker") == {
        "otlp_traces_endpoint": "http://collector:4317",
        "collect_detailed_traces": ["model", "worker"],
    }
