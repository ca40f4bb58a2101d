"""vLLM's tracing switched on by lens_rl (no vLLM needed): the engine arguments, the environment its
processes read, and the loopback receiver's lifecycle.

vLLM itself is stood in for by a two-line ``vllm/tracing.py`` (its public ``is_otel_available``), the only
part of it :func:`vllm_tracing_kwargs` looks at; ``test_vllm_real.py`` runs the real engine.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import lens_rl
from lens_rl.integrations import vllm as integration
from lens_rl.integrations.vllm import merged_resource_env, vllm_server_args, vllm_tracing_env, vllm_tracing_kwargs


@pytest.fixture(autouse=True)
def _no_vllm_module() -> Iterator[None]:
    """Each test imports its own stand-in (or none)."""
    for name in ("vllm", "vllm.tracing"):
        sys.modules.pop(name, None)
    yield
    for name in ("vllm", "vllm.tracing"):
        sys.modules.pop(name, None)


def _fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, available: bool = True) -> None:
    package = tmp_path / "fake_site" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tracing.py").write_text(f"def is_otel_available():\n    return {available}\n")
    monkeypatch.syspath_prepend(str(package.parent))


def _driver(tmp_path: Path, **telemetry: object) -> None:
    config = {"enabled": True, "trace_dir": str(tmp_path / "traces"), "run_id": "r1", "vllm_native_tracing": True}
    lens_rl.init_telemetry_driver({"telemetry": {**config, **telemetry}}, "grpo")


def _refuses(url: str) -> bool:
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) != 0


def test_nothing_when_not_requested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off, or on without vllm_native_tracing, gives no engine arguments and leaves the environment alone."""
    _fake_vllm(tmp_path, monkeypatch)
    assert vllm_tracing_kwargs() == {} and vllm_tracing_env() == {}
    lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "trace_dir": str(tmp_path)}}, "grpo")
    assert vllm_tracing_kwargs() == {}
    assert not [k for k in os.environ if k.startswith("OTEL_")]


def test_nothing_with_traces_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``traces_enabled: false`` (telemetry and vllm_native_tracing on): no engine arguments, no receiver, no
    environment for vLLM: the job records no trace for vLLM's spans to join."""
    _fake_vllm(tmp_path, monkeypatch)
    _driver(tmp_path, traces_enabled=False)
    assert vllm_tracing_kwargs() == {} and vllm_server_args() == []
    assert integration._RECEIVER[0] is None
    assert not [k for k in os.environ if k.startswith("OTEL_")]


def test_nothing_without_vllm_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Without vLLM installed: {} and one warning, however often it is asked."""
    _driver(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert vllm_tracing_kwargs() == {} and vllm_tracing_kwargs() == {}
    assert [r.getMessage() for r in caplog.records if "vLLM" in r.getMessage()] == [
        "lens_rl: vllm_native_tracing is on but vLLM is not installed"
    ]
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in os.environ


def test_nothing_when_this_vllm_cannot_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A vLLM whose tracing cannot run here (its OpenTelemetry exporters missing) gets no tracing arguments,
    which would make its engine refuse to start."""
    _fake_vllm(tmp_path, monkeypatch, available=False)
    _driver(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert vllm_tracing_kwargs() == {}
    assert any("cannot trace" in r.getMessage() for r in caplog.records)


def test_file_store_kwargs_env_and_receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the file store: the loopback endpoint, stats on, the HTTP protocol, the job's identity for vLLM's
    processes; one receiver, stopped by shutdown_telemetry."""
    _fake_vllm(tmp_path, monkeypatch)
    _driver(tmp_path)
    kwargs = vllm_tracing_kwargs()
    assert set(kwargs) == {"otlp_traces_endpoint", "disable_log_stats"}
    assert kwargs["disable_log_stats"] is False
    endpoint = str(kwargs["otlp_traces_endpoint"])
    assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/v1/traces")
    assert vllm_tracing_kwargs()["otlp_traces_endpoint"] == endpoint  # started once
    assert os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert os.environ["OTEL_SERVICE_NAME"] == "lens-rl-vllm"
    assert os.environ["OTEL_BSP_SCHEDULE_DELAY"] == "500"
    assert os.environ["OTEL_RESOURCE_ATTRIBUTES"] == "rl.run_id=r1,rl.attempt=0,rl.worker_group=driver,nv.dl.rank=0"
    assert vllm_tracing_env()["OTEL_SERVICE_NAME"] == "lens-rl-vllm"
    assert not _refuses(endpoint)
    assert lens_rl.shutdown_telemetry(5000) is True
    assert _refuses(endpoint)


def test_environment_is_set_only_where_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's own values win: per variable, and per key of OTEL_RESOURCE_ATTRIBUTES; shutdown puts back
    exactly what the user had."""
    _fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "mine")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=a%20b,rl.worker_group=gen")
    _driver(tmp_path, service_name="job")
    assert vllm_tracing_kwargs()
    assert os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert os.environ["OTEL_SERVICE_NAME"] == "mine"
    assert (
        os.environ["OTEL_RESOURCE_ATTRIBUTES"]
        == "team=a%20b,rl.worker_group=gen,rl.run_id=r1,rl.attempt=0,nv.dl.rank=0"
    )
    assert lens_rl.shutdown_telemetry(5000) is True
    assert os.environ["OTEL_SERVICE_NAME"] == "mine"
    assert os.environ["OTEL_RESOURCE_ATTRIBUTES"] == "team=a%20b,rl.worker_group=gen"
    assert "OTEL_BSP_SCHEDULE_DELAY" not in os.environ and "LENS_RL_OTEL_VLLM_ENV" not in os.environ


@pytest.mark.parametrize(
    ("exporter", "preset"), [("file", "http/json"), ("file", "grpc"), ("otlp", "http/json"), ("otlp", "bogus")]
)
def test_a_traces_protocol_that_cannot_work_gives_nothing_and_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, exporter: str, preset: str
) -> None:
    """A traces protocol the user set that vLLM cannot export with (``http/json``: its engine would refuse to
    start), or that the file store's loopback receiver cannot take (``grpc``: nothing would be written): {}, the
    environment untouched, no receiver, and one warning naming the variable and its value. vLLM runs untraced."""
    _fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", preset)
    _driver(tmp_path, exporter=exporter)
    before = dict(os.environ)
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert vllm_tracing_kwargs() == {} and vllm_tracing_kwargs() == {}
        assert vllm_server_args() == []
    warned = [r.getMessage() for r in caplog.records if "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" in r.getMessage()]
    assert len(warned) == 1 and f"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL={preset}" in warned[0], warned
    assert "untraced" in warned[0]
    assert dict(os.environ) == before
    assert integration._RECEIVER[0] is None


def test_a_grpc_protocol_the_user_set_is_used_with_otlp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``exporter: otlp`` a ``grpc`` the user set is their choice: vLLM exports gRPC to the bare endpoint."""
    _fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    _driver(tmp_path, exporter="otlp", endpoint="http://collector:4317")
    assert vllm_tracing_kwargs()["otlp_traces_endpoint"] == "http://collector:4317"
    assert os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"


def test_reinit_gives_vllm_the_new_run_and_keeps_lens_rls_own_service_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs in one process (a sweep): what lens_rl wrote for run a's vLLM never counts as the user's. Run b's
    own header says lens_rl's service name (not vLLM's), and run b's vLLM processes get run b's id and its
    service name; what the user set stays theirs throughout."""
    _fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=x")
    traces = tmp_path / "traces"
    lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": str(traces), "run_id": "a", "vllm_native_tracing": True}}, "grpo"
    )
    assert vllm_tracing_kwargs()
    assert os.environ["OTEL_SERVICE_NAME"] == "lens-rl-vllm"
    assert lens_rl.shutdown_telemetry(5000) is True
    lens_rl.init_telemetry_driver(
        {
            "telemetry": {
                "enabled": True,
                "trace_dir": str(traces),
                "run_id": "b",
                "service_name": "sweep",
                "vllm_native_tracing": True,
            }
        },
        "grpo",
    )
    handle = lens_rl.get_telemetry_handle()
    assert handle is not None and handle.resource.attributes["service.name"] == "sweep"
    assert vllm_tracing_kwargs()
    assert os.environ["OTEL_SERVICE_NAME"] == "sweep-vllm"
    assert (
        os.environ["OTEL_RESOURCE_ATTRIBUTES"] == "team=x,rl.run_id=b,rl.attempt=0,rl.worker_group=driver,nv.dl.rank=0"
    )
    assert lens_rl.shutdown_telemetry(5000) is True
    assert os.environ["OTEL_RESOURCE_ATTRIBUTES"] == "team=x" and "OTEL_SERVICE_NAME" not in os.environ
    # a third run, no vLLM: its service name is its own default, not what lens_rl once gave vLLM
    lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "trace_dir": str(traces), "run_id": "c"}}, "grpo")
    handle = lens_rl.get_telemetry_handle()
    assert handle is not None and handle.resource.attributes["service.name"] == "lens-rl"


def test_a_value_the_user_changes_after_the_call_is_theirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user changes OTEL_RESOURCE_ATTRIBUTES after a first call: the next call adds the job's keys to the
    new value, and shutdown puts back the user's new value (not the one before the first call)."""
    _fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=x")
    _driver(tmp_path)
    assert vllm_tracing_kwargs()
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = "team=y"
    assert vllm_tracing_kwargs()
    assert (
        os.environ["OTEL_RESOURCE_ATTRIBUTES"] == "team=y,rl.run_id=r1,rl.attempt=0,rl.worker_group=driver,nv.dl.rank=0"
    )
    assert lens_rl.shutdown_telemetry(5000) is True
    assert os.environ["OTEL_RESOURCE_ATTRIBUTES"] == "team=y"


def test_a_worker_started_after_the_call_gives_vllm_its_own_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process started after the driver's call inherits the variables lens_rl wrote for the driver's
    vLLM: they are not the user's. The worker's own service name is lens_rl's, and its vLLM processes get its
    group and rank; the user's own keys are kept."""
    _fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=x")
    _driver(tmp_path)
    assert vllm_tracing_kwargs()
    site = str(tmp_path / "fake_site")
    code = f"""
        import json, os, sys
        sys.path.insert(0, {site!r})
        import lens_rl
        from lens_rl.integrations.vllm import vllm_tracing_kwargs
        handle = lens_rl.init_telemetry_worker(rank=1, world_size=2, worker_group="gen")
        own = handle.resource.attributes["service.name"]
        assert vllm_tracing_kwargs()
        print(json.dumps([own, os.environ["OTEL_SERVICE_NAME"], os.environ["OTEL_RESOURCE_ATTRIBUTES"]]))
        lens_rl.shutdown_telemetry(5000)
    """
    env = {k: v for k, v in os.environ.items()}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (site, *sys.path) if p)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    own, service, attributes = json.loads(done.stdout.strip().splitlines()[-1])
    assert own == "lens-rl" and service == "lens-rl-vllm"
    assert attributes == "team=x,rl.run_id=r1,rl.attempt=0,rl.worker_group=gen,nv.dl.rank=1"


def test_resource_values_are_percent_encoded() -> None:
    """A value with a comma or equals sign cannot break OTEL_RESOURCE_ATTRIBUTES apart."""
    assert (
        merged_resource_env("", {"rl.run_id": "a,b=c", "rl.worker_group": "g"})
        == "rl.run_id=a%2Cb%3Dc,rl.worker_group=g"
    )


def test_otlp_endpoints_and_detail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With otlp, vLLM exports to the job's collector (HTTP: the traces path; gRPC: the bare endpoint); only the
    detailed-trace modules vLLM knows are passed."""
    _fake_vllm(tmp_path, monkeypatch)
    _driver(tmp_path, exporter="otlp", endpoint="http://collector:4318/")
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert vllm_tracing_kwargs("model, bogus") == {
            "otlp_traces_endpoint": "http://collector:4318/v1/traces",
            "disable_log_stats": False,
            "collect_detailed_traces": ["model"],
        }
    assert any("bogus" in r.getMessage() for r in caplog.records)
    assert integration._RECEIVER[0] is None  # a collector needs no loopback receiver
    lens_rl.shutdown_telemetry(2000)  # (what it wrote is gone with it: the next run's protocol is its own)
    _driver(tmp_path, exporter="otlp", endpoint="http://collector:4317", protocol="grpc")
    assert vllm_tracing_kwargs()["otlp_traces_endpoint"] == "http://collector:4317"
    assert os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"


def test_server_args() -> None:
    """The server's flags carry the endpoint and the detail; logging stats is its default (no flag)."""
    kwargs = {"otlp_traces_endpoint": "http://127.0.0.1:9/v1/traces", "disable_log_stats": False}
    assert vllm_server_args(kwargs) == ["--otlp-traces-endpoint", "http://127.0.0.1:9/v1/traces"]
    assert vllm_server_args({**kwargs, "collect_detailed_traces": ["model", "worker"]})[-2:] == [
        "--collect-detailed-traces",
        "model,worker",
    ]
    assert vllm_server_args({}) == []


@pytest.mark.expects_internal_error
def test_a_fault_of_its_own_never_fails_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault inside lens_rl (here: the receiver cannot start) gives {}: the engine runs untraced."""
    _fake_vllm(tmp_path, monkeypatch)
    _driver(tmp_path)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("no sockets today")

    monkeypatch.setattr("lens_rl.integrations.vllm_receiver.StoreReceiver", broken)
    assert vllm_tracing_kwargs() == {}


def test_a_worker_started_from_its_run_id_gives_vllm_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker initialised from ``LENS_RL_OTEL_RUN_ID`` alone (no driver's environment): vLLM's processes get
    its ``rl.run_id`` in ``OTEL_RESOURCE_ATTRIBUTES``, and the file the receiver writes for a process exporting
    to it (the OpenAI server's front-end, started with ``vllm_server_args()``) has it in its header."""
    from tests.integration.test_vllm_receiver import _body, _lines, _post

    _fake_vllm(tmp_path, monkeypatch)
    for name, value in {
        "LENS_RL_OTEL_ENABLED": "1",
        "LENS_RL_OTEL_RUN_ID": "r9",
        "LENS_RL_OTEL_TRACE_DIR": str(tmp_path / "traces"),
        "LENS_RL_OTEL_VLLM_NATIVE_TRACING": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert lens_rl.init_telemetry_worker(rank=1, world_size=2, worker_group="gen") is not None
    args = vllm_server_args()
    assert args[0] == "--otlp-traces-endpoint"
    assert os.environ["OTEL_RESOURCE_ATTRIBUTES"] == "rl.run_id=r9,rl.attempt=0,rl.worker_group=gen,nv.dl.rank=1"
    assert _post(args[1], _body()) == 200  # (a front-end process's spans, as vLLM's server exports them)
    assert lens_rl.shutdown_telemetry(5000) is True
    (front,) = (tmp_path / "traces" / "r9").glob("spans-*-vllm-front-end-*.jsonl")
    head = _lines(front)[0]
    assert head["resource"]["rl.run_id"] == "r9" and head["resource"]["vllm.process_kind"] == "front-end"
