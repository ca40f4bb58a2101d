"""Reliability with real faults: outages, SIGKILL, fork, concurrency, hostile input, secrets."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lens_rl
from lens_rl import traced_phase, with_bucket
from lens_rl.config import ENV, TelemetryConfig
from lens_rl.testing import OTLPReceiver, recording
from tests.conftest import clean_env, run_python
from tests.stores import read_spans


def _records(trace_dir: Path) -> list[dict[str, Any]]:
    return read_spans(trace_dir)


# ------------------------------------------------------------------ outage


@pytest.mark.slow
def test_spans_ended_during_an_outage_are_delivered_when_the_collector_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Collector stopped, spans ended, collector restarted on the same port: every span arrives."""
    deadline = time.monotonic() + 15  # earlier tests' export threads wind down first: their logs are not ours
    while any(t.name == "lens_rl-span-export" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    first = OTLPReceiver()
    port = first.port
    handle = lens_rl.init_telemetry_driver(
        {
            "telemetry": {
                "enabled": True,
                "exporter": "otlp",
                "endpoint": first.endpoint,
                "export_timeout_ms": 1000,
                "metrics_enabled": False,
            }
        },
        "grpo",
    )
    for _ in range(100):
        with traced_phase("generation"):
            pass
    assert lens_rl.flush_telemetry(5000) is True
    first.close()  # the outage starts
    for _ in range(500):
        with traced_phase("reward"):
            pass
    assert lens_rl.flush_telemetry(1500) is False  # nothing gets out while it is down
    assert handle.stats()["retrying"] or handle.stats()["queued"] > 0
    time.sleep(3)  # several retries while it is down
    second = OTLPReceiver(port=port)  # back, same port
    try:
        assert lens_rl.flush_telemetry(30_000) is True, handle.stats()
        exporter_logs = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
        # this pipeline's lines only: a previous test's pipeline may still be winding down
        ours = [r.getMessage() for r in caplog.records if r.name == "lens_rl" and first.endpoint in r.getMessage()]
        assert sum("failing" in m for m in ours) == 1
        assert any("recovered after" in m for m in ours)
        assert len(exporter_logs) <= 3  # the first failure's messages, then quiet
        assert second.wait_for_spans(500, 5)
        # OTLP is at-least-once: a batch the collector took but whose answer came too late is sent again,
        # so a collector may see a span twice; what counts is that none is missing
        assert len({s["span_id"] for s in second.spans if s["name"] == "reward"}) == 500
        assert handle.stats()["dropped"] == 0 and handle.stats()["failed"] == 0
    finally:
        second.close()


# ------------------------------------------------------------------ SIGKILL

KILLED_WORKER = """
import sys, time, lens_rl
from lens_rl import traced_phase
lens_rl.init_telemetry_worker(rank=1, world_size=2, worker_group="lm_policy")
for step in range(3):
    with traced_phase("step", step=step):
        with traced_phase("policy_training"):
            pass
{after_step}
print("READY", flush=True)
with traced_phase("never_ends"):
    time.sleep(60)
"""


def _run_and_kill(code: str, env: dict[str, str]) -> None:
    proc = subprocess.Popen([sys.executable, "-c", code], env=clean_env(env), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", line
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("how", ["flush_telemetry", "flush_on_step"])
def test_sigkill_after_a_flush_loses_nothing_in_the_file_store(how: str, tmp_path: Path) -> None:
    """Killed with SIGKILL right after a step-boundary flush: every ended span is on disk, whole."""
    env = {"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_TRACE_DIR": str(tmp_path), "LENS_RL_OTEL_RUN_ID": "k"}
    if how == "flush_on_step":
        env["LENS_RL_OTEL_FLUSH_ON_STEP"] = "true"
        after = ""
    else:
        after = "assert lens_rl.flush_telemetry(5000)"
    _run_and_kill(KILLED_WORKER.format(after_step=after), env)
    names = sorted(r["name"] for r in _records(tmp_path))
    assert names == ["policy_training"] * 3 + ["step"] * 3


def test_sigkill_after_a_flush_loses_nothing_over_otlp(receiver: OTLPReceiver) -> None:
    """The same over OTLP: what ended before the flush reached the collector."""
    env = {"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_EXPORTER": "otlp", "LENS_RL_OTEL_ENDPOINT": receiver.endpoint}
    _run_and_kill(KILLED_WORKER.format(after_step="assert lens_rl.flush_telemetry(5000)"), env)
    assert receiver.wait_for_spans(6, 5)
    assert sorted(s["name"] for s in receiver.spans) == ["policy_training"] * 3 + ["step"] * 3
    assert {s["resource"]["nv.dl.rank"] for s in receiver.spans} == {1}


# ------------------------------------------------------------------ fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_exports_under_its_own_pid_without_the_parents_queue(tmp_path: Path) -> None:
    """A child forked with spans queued neither re-sends them nor deadlocks; it exports its own."""
    out = run_python(
        f"""
        import os, lens_rl
        from lens_rl import traced_phase
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r},
                                       "run_id": "f"}}}}, "grpo")
        for _ in range(200):
            with traced_phase("parent_phase"):
                pass
        pid = os.fork()
        if pid == 0:
            with traced_phase("child_phase"):
                pass
            ok = lens_rl.shutdown_telemetry(3000)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("CHILD", pid, os.waitstatus_to_exitcode(status))
        assert lens_rl.shutdown_telemetry(3000)
        """,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    child_pid, code = (int(x) for x in out.stdout.split("CHILD")[1].split())
    assert code == 0
    records = _records(tmp_path)
    child = [r for r in records if r["resource"]["process.pid"] == child_pid]
    assert [r["name"] for r in child] == ["child_phase"]
    assert sum(r["name"] == "parent_phase" for r in records) == 200  # exactly once


def test_multiprocessing_fork_child_flushes_at_exit(tmp_path: Path) -> None:
    """A multiprocessing (fork) child skips atexit; lens_rl still exports its spans."""
    out = run_python(
        f"""
        import multiprocessing as mp, lens_rl
        from lens_rl import traced_phase
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r},
                                       "run_id": "mp"}}}}, "grpo")
        def work(i):
            with traced_phase("mp_child", index=i):
                pass
        if __name__ == "__main__":
            ctx = mp.get_context("fork")
            procs = [ctx.Process(target=work, args=(i,)) for i in range(2)]
            [p.start() for p in procs]
            [p.join(30) for p in procs]
            print("CODES", [p.exitcode for p in procs])
            lens_rl.shutdown_telemetry(3000)
        """,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "CODES [0, 0]" in out.stdout
    children = [r for r in _records(tmp_path) if r["name"] == "mp_child"]
    assert sorted(r["attributes"]["rl.index"] for r in children) == [0, 1]
    assert len({r["resource"]["process.pid"] for r in children}) == 2


# ------------------------------------------------------------------ concurrency


def test_32_threads_and_100_tasks_keep_their_own_parents_and_buckets() -> None:
    """Phases running at once in threads and tasks never leak scope into each other."""
    buckets = ["productive", "overhead", "idle", "wasted"]
    errors: list[BaseException] = []
    with recording() as rec:

        def thread_work(i: int) -> None:
            try:
                for _ in range(5):
                    with traced_phase(f"t{i}.outer", attributes={"who": f"t{i}"}):
                        with with_bucket(buckets[i % 4]):
                            time.sleep(0.001)
                            with traced_phase("inner", attributes={"who": f"t{i}"}):
                                pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        async def task_work(i: int) -> None:
            with traced_phase(f"a{i}.outer", attributes={"who": f"a{i}"}):
                with with_bucket(buckets[i % 4]):
                    await asyncio.sleep(0.001 * (i % 5))
                    with traced_phase("inner", attributes={"who": f"a{i}"}):
                        await asyncio.sleep(0)

        async def tasks() -> None:
            await asyncio.gather(*(task_work(i) for i in range(100)))

        threads = [threading.Thread(target=thread_work, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        asyncio.run(tasks())
        for t in threads:
            t.join()
        spans = rec.spans
    assert not errors
    assert len(spans) == 32 * 5 * 2 + 100 * 2
    by_id = {s.context.span_id: s for s in spans}
    for span in spans:
        if span.name != "inner":
            continue
        who = span.attributes["who"]
        parent = by_id[span.parent.span_id]
        assert parent.attributes["who"] == who and parent.name == f"{who}.outer"
        assert span.attributes["rl.bucket"] == buckets[int(who[1:]) % 4]


# ------------------------------------------------------------------ hostile input

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_keys = st.sampled_from(sorted(ENV)) | st.text(max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block=st.dictionaries(_keys, _values, max_size=6),
    env=st.dictionaries(st.sampled_from(sorted(ENV.values())), st.text(max_size=12), max_size=4),
)
def test_config_either_resolves_or_raises_a_clear_value_error(block: dict, env: dict) -> None:
    """Any telemetry block and environment: a config, or ValueError naming the field."""
    try:
        cfg = TelemetryConfig.from_master_config({"telemetry": block}, environ=env)
    except ValueError as exc:
        assert str(exc).startswith("telemetry")
    else:
        assert isinstance(cfg, TelemetryConfig)
        assert TelemetryConfig.from_env(cfg.to_env()) == cfg


@settings(max_examples=60, deadline=None)
@given(
    env=st.dictionaries(
        st.sampled_from(
            sorted(ENV.values())
            + ["RANK", "WORLD_SIZE", "LENS_RL_WORKER_GROUP", "LENS_RL_OTEL_RESOURCE_ATTRIBUTES", "TRACEPARENT"]
        ),
        st.text(max_size=16),
        max_size=6,
    )
)
def test_worker_init_never_raises_on_any_environment(env: dict) -> None:
    """Whatever the environment holds, init_telemetry_worker never raises: it returns a handle exactly when the
    environment resolves to an enabled config (None, and telemetry off, otherwise), the process's handle
    carries its identity, and a phase then runs either way."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: v.replace("\x00", "") for k, v in env.items()})
    os.environ["LENS_RL_OTEL_EXPORTER"] = "none"
    try:
        lens_rl.testing.reset()
        try:
            expected = TelemetryConfig.from_env(dict(os.environ)).enabled
        except ValueError:
            expected = False
        handle = lens_rl.init_telemetry_worker()
        assert (handle is not None) == expected and lens_rl.get_telemetry_handle() is handle
        if handle is not None:
            assert {"nv.dl.rank", "nv.dl.world_size", "rl.worker_group"} <= set(handle.resource.attributes)
        with traced_phase("generation") as span:
            span.set_attribute("k", 1)
    finally:
        lens_rl.testing.reset()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.environ.pop("LENS_RL_OTEL_EXPORTER", None)


# ------------------------------------------------------------------ secrets


def test_otlp_headers_never_reach_logs_attributes_or_the_projection(
    receiver: OTLPReceiver, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials in OTEL_EXPORTER_OTLP_HEADERS are sent as headers and nowhere else."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cr3t-value")
    caplog.set_level(logging.DEBUG)
    lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": receiver.endpoint}}, "grpo"
    )
    with traced_phase("generation"):
        pass
    assert lens_rl.shutdown_telemetry(5000)
    assert any(h.get("authorization") == "Bearer s3cr3t-value" for h in receiver.headers)  # it does authenticate
    assert "s3cr3t" not in caplog.text
    assert not any("s3cr3t" in v for k, v in os.environ.items() if k.startswith("LENS_RL_"))
    for span in receiver.spans:
        assert "s3cr3t" not in json.dumps(span)
    from lens_rl.integrations.ray import telemetry_runtime_env

    assert "s3cr3t" not in json.dumps(telemetry_runtime_env())


# ------------------------------------------------------------------ long run (short version)


@pytest.mark.slow
def test_short_soak_against_a_hung_collector_stays_bounded() -> None:
    """benchmarks/soak_hung_collector.py for a few seconds: bounded memory, no slowdown, prompt shutdown."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "soak_hung_collector.py"
    out = subprocess.run(
        [sys.executable, str(script), "--seconds", "4", "--rate", "2000", "--queue", "2000"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = out.stdout.strip().splitlines()[-1]
    assert "dropped" in summary and "(counted)" in summary
    shutdown_s = float(summary.split("shutdown ")[1].split("s")[0])
    assert shutdown_s < 1.0 + 0.5
