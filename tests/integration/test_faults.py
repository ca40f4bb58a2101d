"""Faults II: nothing the job does, and nothing the collector does, hangs it, blocks telemetry or leaks a secret.

Each test reproduces the fault the way it happens (signals, a collector that rejects by
size, lone surrogates, a full file system, a hung collector), mostly in a subprocess.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl import testing, traced_phase
from lens_rl._attributes import REDACTED
from lens_rl.config import TelemetryConfig
from lens_rl.integrations.ray import telemetry_runtime_env
from lens_rl.testing import OTLPReceiver, hung_endpoint
from tests.conftest import run_python

SECRET = "hunter2-s3cr3t"


def _otlp(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": endpoint, "metrics_enabled": False, **extra}}


def _exported(value: Any) -> str:
    return json.dumps(value)


# ---------------------------------------------------------------------- 1. redaction, both ways


def test_third_party_spans_through_lens_rl_are_redacted(receiver: OTLPReceiver) -> None:
    """A library span and a user's attribute on the current span pass the same rule on the way out."""
    code = f"""
        import lens_rl
        from opentelemetry import trace
        lens_rl.init_telemetry_driver({_otlp(receiver.endpoint)!r}, "grpo")
        tracer = trace.get_tracer("some.library")
        with lens_rl.traced_phase("generation"):
            trace.get_current_span().set_attribute("hf_token", "{SECRET}")   # behind lens_rl's back
            with tracer.start_as_current_span("library.call") as span:
                span.set_attribute("api_key", "{SECRET}")
                span.set_attribute("url", "https://bob:{SECRET}@host")
                span.set_attribute("rl.num_tokens", 512)
                span.add_event("e", {{"password": "{SECRET}"}})
        assert lens_rl.shutdown_telemetry(5000)
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert receiver.wait_for_spans(3, 10)
    assert SECRET not in json.dumps(receiver.spans, default=str)
    call = next(s for s in receiver.spans if s["name"] == "library.call")
    assert call["attributes"]["api_key"] == REDACTED and call["attributes"]["rl.num_tokens"] == 512


def test_endpoint_credentials_never_leave_the_driver(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, receiver: OTLPReceiver
) -> None:
    """Userinfo in the endpoint stays out of logs, the env projection, runtime_env and error messages."""
    caplog.set_level(logging.INFO, logger="lens_rl")
    endpoint = receiver.endpoint.replace("http://", f"http://user:{SECRET}@")
    lens_rl.init_telemetry_driver(_otlp(endpoint), "grpo")
    assert SECRET not in caplog.text
    assert SECRET not in json.dumps(dict(os.environ)) and SECRET not in json.dumps(telemetry_runtime_env())
    lens_rl.shutdown_telemetry(2000)
    with pytest.raises(ValueError) as info:
        TelemetryConfig.from_master_config({"telemetry": {"endpoint": f"ftp://user:{SECRET}@host"}})
    assert SECRET not in str(info.value) and "endpoint" in str(info.value)


def test_headers_file_authenticates_workers_without_the_secret_travelling(
    tmp_path: Path, receiver: OTLPReceiver
) -> None:
    """A worker reads OTLP headers from headers_file: the path travels in runtime_env, the content never does."""
    headers = tmp_path / "otlp-headers"
    headers.write_text(f"authorization=Bearer {SECRET}\nx-team=rl\n")
    env = {
        "LENS_RL_OTEL_ENABLED": "1",
        "LENS_RL_OTEL_EXPORTER": "otlp",
        "LENS_RL_OTEL_ENDPOINT": receiver.endpoint,
        "LENS_RL_OTEL_HEADERS_FILE": str(headers),
        "LENS_RL_OTEL_METRICS_ENABLED": "0",
    }
    out = run_python(
        """
        import lens_rl
        from lens_rl.integrations.ray import telemetry_runtime_env
        lens_rl.init_telemetry_worker(rank=0, worker_group="lm_policy")
        with lens_rl.traced_phase("generation"):
            pass
        assert lens_rl.shutdown_telemetry(5000)
        print(telemetry_runtime_env())
    """,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stdout and str(headers) in out.stdout
    assert receiver.wait_for_spans(1, 5)
    sent = [h for h in receiver.headers if h.get("authorization") or h.get("Authorization")]
    assert sent and all((h.get("authorization") or h.get("Authorization")) == f"Bearer {SECRET}" for h in sent)


# ---------------------------------------------------------------------- 2. never hang


SIGNAL_STORM = """
    import os, signal, sys, time, threading
    import lens_rl
    lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "exporter": "otlp", "endpoint": {endpoint!r},
                                    "metrics_interval_ms": 100}}}}, "grpo")
    calls = []
    def on_alarm(signum, frame):
        t = time.monotonic()
        lens_rl.flush_telemetry(200)
        calls.append(time.monotonic() - t)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)         # a signal storm: every millisecond
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3:
        with lens_rl.traced_phase("generation", step=1) as span:
            span.set_attribute("rl.num_tokens", 3)
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    def on_term(signum, frame):
        t = time.monotonic()
        print("SHUTDOWN", lens_rl.shutdown_telemetry(1000), round(time.monotonic() - t, 3), flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("FLUSHES", len(calls), round(max(calls), 3), flush=True)
    with lens_rl.traced_phase("checkpointing"):
        os.kill(os.getpid(), signal.SIGTERM)                     # preemption inside an open phase
        time.sleep(5)
"""


@pytest.mark.slow
def test_flush_and_shutdown_from_a_signal_storm_never_hang(receiver: OTLPReceiver) -> None:
    """Signals every millisecond whose handler flushes, then a SIGTERM handler that shuts down: no deadlock."""
    out = run_python(SIGNAL_STORM.format(endpoint=receiver.endpoint), timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    flushes = next(line for line in out.stdout.splitlines() if line.startswith("FLUSHES")).split()
    assert int(flushes[1]) > 10 and float(flushes[2]) <= 0.2 + 1.0  # each within its budget (plus slack)
    shutdown = next(line for line in out.stdout.splitlines() if line.startswith("SHUTDOWN")).split()
    assert float(shutdown[2]) <= 1.0 + 1.0
    assert receiver.wait_for_spans(10, 10) and any(s["name"] == "checkpointing" for s in receiver.spans)


# ---------------------------------------------------------------------- 3. poison batches


# ---------------------------------------------------------------------- 4 and 5. memory bound, loss accounting


# ---------------------------------------------------------------------- 6. re-init


def test_reinit_three_times_honours_each_config(tmp_path: Path) -> None:
    """Sweeps and notebooks: each init after a shutdown uses its own run id, exporter and switch."""
    out = run_python(f"""
        import os, lens_rl
        first = lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r},
                                                "run_id": "run-a"}}}}, "grpo")
        lens_rl.shutdown_telemetry(2000)
        second = lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "exporter": "none",
                                                 "run_id": "run-b"}}}}, "ppo")
        print(second.config.run_id, second.config.exporter, os.environ["LENS_RL_OTEL_RUN_ID"])
        lens_rl.shutdown_telemetry(2000)
        third = lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": False}}}}, "grpo")
        print(third, "LENS_RL_OTEL_ENABLED" in os.environ, "TRACEPARENT" in os.environ)
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "run-b none run-b" and lines[1] == "None False False"


def test_reinit_keeps_what_the_user_set_before_the_first_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """An env var the user set before the first init still wins over a later YAML value."""
    monkeypatch.setenv("LENS_RL_OTEL_RUN_ID", "from-user")
    lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "none", "run_id": "a"}}, "grpo")
    lens_rl.shutdown_telemetry(1000)
    handle = lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "none", "run_id": "b"}}, "grpo")
    assert handle.config.run_id == "from-user"


# ---------------------------------------------------------------------- 7. context always restored


@pytest.mark.expects_internal_error
def test_context_is_restored_when_a_span_ends_early() -> None:
    """A handle replaced inside a phase, and an exception whose __str__ raises: the span is exported and
    no longer current; the next phase gets the right parent."""
    from opentelemetry import trace

    class HostileError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    with testing.recording() as rec:
        with pytest.raises(HostileError):
            with traced_phase("reward"):
                raise HostileError()
        assert not trace.get_current_span().get_span_context().is_valid
        span = rec.find("reward")
        assert span.status.status_code.name == "ERROR" and span.events[0].attributes["exception.type"].endswith(
            "HostileError"
        )
        with traced_phase("next"):
            pass
        assert rec.find("next").parent is None or rec.find("next").parent.span_id != span.context.span_id


def test_a_handle_replaced_inside_a_phase_restores_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lazy handle replaced by an explicit init while a phase is open: that phase ends, the context is clean."""
    from opentelemetry import trace

    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    with traced_phase("early"):
        lens_rl.init_telemetry_worker(rank=1, worker_group="rollout")
    assert not trace.get_current_span().get_span_context().is_valid
    with traced_phase("later") as span:
        assert span.get_span_context().is_valid
    assert lens_rl.get_telemetry_handle().resource.attributes["rl.worker_group"] == "rollout"


# ---------------------------------------------------------------------- 9. the file store


# ---------------------------------------------------------------------- 10 and 11. bounded, checked


@pytest.mark.slow
def test_flush_on_step_costs_a_step_at_most_a_second_against_a_hung_collector() -> None:
    """flush_on_step with a collector that never answers: each step ends within ~1 s, never export_timeout."""
    endpoint, sock = hung_endpoint()
    try:
        lens_rl.init_telemetry_driver(_otlp(endpoint, flush_on_step=True, export_timeout_ms=30_000), "grpo")
        t0 = time.monotonic()
        for step in range(3):
            with traced_phase("step", step=step):
                pass
        assert time.monotonic() - t0 < 3 * 1.0 + 2.0
        t0 = time.monotonic()
        assert lens_rl.shutdown_telemetry(None) is False  # None: the default budget, not "forever"
        assert time.monotonic() - t0 < 5.0 + 1.0
    finally:
        sock.close()


def test_an_export_outliving_shutdown_ends_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """Shutdown said what was lost; the export still in flight then fails later without another word
    (no outage warning, no give-up line, no exporter error) and its thread ends."""
    endpoint, sock = hung_endpoint()
    try:
        lens_rl.init_telemetry_driver(_otlp(endpoint, export_timeout_ms=30_000), "grpo")
        with traced_phase("step", step=0):
            pass
        lens_rl.flush_telemetry(200)  # the export is now in flight against a collector that never answers
        assert lens_rl.shutdown_telemetry(500) is False
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert any("lost" in m for m in said), said
        caplog.clear()
    finally:
        sock.close()  # the in-flight request now fails
    deadline = time.monotonic() + 20
    while any(t.name == "lens_rl-span-export" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "lens_rl-span-export" for t in threading.enumerate())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize(("block", "field"), [
    ({"endpoint": "collector:4318"}, "endpoint"), ({"endpoint": "http://"}, "endpoint"),
    ({"endpoint": "http://host:99999"}, "endpoint"), ({"metrics_interval_ms": 10**30}, "metrics_interval_ms"),
    ({"export_timeout_ms": 10**12}, "export_timeout_ms"), ({"max_queue_bytes": 0}, "max_queue_bytes"),
    ({"headers_file": "/nonexistent/headers"}, "headers_file"),
])  # fmt: skip
def test_the_driver_refuses_bad_values(block: dict[str, Any], field: str) -> None:
    """Malformed endpoints and absurd numbers raise ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        TelemetryConfig.from_master_config({"telemetry": {"enabled": True, **block}})


def test_yaml_ones_and_zeros_are_booleans() -> None:
    """YAML `enabled: 1` turns telemetry on; `0` off."""
    assert TelemetryConfig.from_master_config({"telemetry": {"enabled": 1}}).enabled is True
    assert TelemetryConfig.from_master_config({"telemetry": {"enabled": 0}}).enabled is False


def test_a_worker_with_a_bad_switch_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """LENS_RL_OTEL_ENABLED=maybe: one warning, telemetry off, phases still harmless."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "maybe")
    for _ in range(3):
        assert lens_rl.init_telemetry_worker() is None
        with traced_phase("generation"):
            pass
    assert sum("maybe" in r.getMessage() for r in caplog.records) == 1


def test_misspellings_get_a_did_you_mean(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A `telemtry` block and an unknown LENS_RL_OTEL_* variable each get a warning naming the right one."""
    monkeypatch.setenv("LENS_RL_OTEL_SAMPLE_RAT", "0.5")
    assert lens_rl.init_telemetry_driver({"telemtry": {"enabled": True}}, "grpo") is None
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "telemtry" in messages and "LENS_RL_OTEL_SAMPLE_RATE" in messages


def test_ten_thousand_attributes_on_one_span_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    """Past the attribute limit, one warning, not one per attribute."""
    with testing.recording():
        with traced_phase("generation") as span:
            for i in range(10_000):
                span.set_attribute(f"rl.k{i}", i)
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 1
