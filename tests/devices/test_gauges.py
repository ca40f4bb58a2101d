"""With the OTLP exporter, the samples reach a real collector as ``rl.gpu.*`` gauges with gpu.uuid and
host.name; heartbeats carry the process's GPUs' latest sample."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from lens_rl.testing import OTLPReceiver, nvml
from tests.conftest import run_python
from tests.gpu_jobs import ROOT

pytestmark = pytest.mark.slow


def test_samples_reach_the_collector_as_gauges(tmp_path: Path, receiver: OTLPReceiver) -> None:
    """rl.gpu.utilization, memory, power and SM activity arrive per device, with gpu.uuid and host.name."""
    sc = nvml.write_scenario(
        tmp_path / "gpus.json",
        [{"uuid": "GPU-g0", "util": 77, "mem_used": 1234, "gpm": True, "sm_active": 33}, {"uuid": "GPU-g1"}],
        t0=time.time(),
    )
    code = f"""
import time, lens_rl
lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "exporter": "otlp", "endpoint": {receiver.endpoint!r},
    "metrics_interval_ms": 200, "gpu_sample_hz": 5, "run_id": "o{uuid.uuid4().hex[:8]}"}}}}, "grpo")
time.sleep(1.5)
assert lens_rl.shutdown_telemetry(5000)
"""
    out = run_python(code, env=nvml.env(sc, base={"PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}))
    assert out.returncode == 0, out.stderr
    points: dict[tuple[str, str], float] = {}
    hosts = set()
    for req in receiver.metric_requests:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name.startswith("rl.gpu."):
                        for dp in metric.gauge.data_points:
                            attrs = {a.key: a.value.string_value for a in dp.attributes}
                            hosts.add(attrs["host.name"])
                            points[(metric.name, attrs["gpu.uuid"])] = dp.as_double or dp.as_int
    assert points[("rl.gpu.utilization", "GPU-g0")] == 77
    assert points[("rl.gpu.memory.used", "GPU-g0")] == 1234
    assert points[("rl.gpu.sm_active", "GPU-g0")] == 33
    assert points[("rl.gpu.power", "GPU-g1")] == 60000
    assert ("rl.gpu.sm_active", "GPU-g1") not in points  # no GPM: no gauge, never 0
    assert len(hosts) == 1 and "" not in hosts


def test_no_gauge_repeats_the_last_reading_once_sampling_stopped(tmp_path: Path, receiver: OTLPReceiver) -> None:
    """A GPU lost mid-run stops the sampler: the exports after it carry no GPU gauge, never the last reading
    again as if it were current."""
    lost = tmp_path / "lose-the-gpu"
    sc = nvml.write_scenario(
        tmp_path / "gpus.json",
        [{"uuid": "GPU-ok", "util": 30}, {"uuid": "GPU-lost", "util": 40, "fail_when": str(lost)}],
        t0=time.time(),
    )
    code = f"""
import os, time, lens_rl
lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "exporter": "otlp", "endpoint": {receiver.endpoint!r},
    "metrics_interval_ms": 200, "gpu_sample_hz": 5, "run_id": "o{uuid.uuid4().hex[:8]}"}}}}, "grpo")
time.sleep(1.0)
open({str(lost)!r}, "w").close()
time.sleep(0.5)
print(time.time_ns(), flush=True)
time.sleep(1.5)
assert lens_rl.shutdown_telemetry(5000)
"""
    out = run_python(code, env=nvml.env(sc, base={"PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}))
    assert out.returncode == 0, out.stderr
    stopped_ns = int(out.stdout.split()[0])
    seen = []
    for req in receiver.metric_requests:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == "rl.gpu.utilization":
                        seen += [dp.time_unix_nano for dp in metric.gauge.data_points]
    assert seen and min(seen) < stopped_ns  # (read while sampling ran)
    assert not [t for t in seen if t > stopped_ns], "a gauge kept the stopped sampler's last reading"


def test_heartbeats_carry_the_latest_sample_of_the_process_gpus(tmp_path: Path) -> None:
    """A process's heartbeat has its own GPUs' latest reading and since when they read 0 %, not the others'."""
    t0 = time.time()
    sc = nvml.write_scenario(
        tmp_path / "gpus.json", [{"uuid": "GPU-h0", "util": [[0, 0.5, 90]]}, {"uuid": "GPU-h1", "util": 40}], t0=t0
    )
    rid = f"h{uuid.uuid4().hex[:8]}"
    code = """
import time, lens_rl
lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="actor")
with lens_rl.traced_phase("generation"):
    time.sleep(3)
lens_rl.shutdown_telemetry(5000)
"""
    env = nvml.env(sc, base={"PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)})
    env.update(
        LENS_RL_OTEL_ENABLED="true",
        LENS_RL_OTEL_TRACE_DIR=str(tmp_path / "traces"),
        LENS_RL_OTEL_RUN_ID=rid,
        LENS_RL_OTEL_GPU_SAMPLE_HZ="5",
        LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS="500",
        CUDA_VISIBLE_DEVICES="0",
    )
    out = run_python(code, env=env)
    assert out.returncode == 0, out.stderr
    [live] = (tmp_path / "traces" / rid).glob("live-*.json")
    beat = json.loads(live.read_text())
    gpu = beat["gpu"]
    assert gpu["idle_alert_s"] == 300.0
    [device] = gpu["devices"]
    assert device["uuid"] == "GPU-h0" and device["util"] == 0
    assert t0 * 1e9 + 0.4e9 <= device["idle_since_ns"] <= gpu["t"]
