"""``status`` and ``watch`` show each process's GPU busy and mark ``GPU IDLE`` past gpu_idle_alert_s while a
phase is open; the exit status stays what stale and hung processes make it."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.show.status import format_status, run_status
from lens_rl.testing import nvml
from tests.conftest import lens
from tests.gpu_jobs import Job, job_env, wait_for
from tests.offline.test_status import NOW, beat, phase


def with_gpu(path: Path, utils: list[Any], idle_for_s: list[float | None], alert_s: float = 300.0) -> None:
    """Add a heartbeat's ``gpu`` entry: one device per util, idle for the given seconds (None: busy)."""
    content = json.loads(path.read_text())
    t = content["written_ns"]
    content["gpu"] = {
        "t": t,
        "idle_alert_s": alert_s,
        "devices": [
            {"uuid": f"GPU-{i}", "util": u, "idle_since_ns": None if s is None else t - int(s * 1e9)}
            for i, (u, s) in enumerate(zip(utils, idle_for_s, strict=True))
        ],
    }
    path.write_text(json.dumps(content))


def test_gpu_idle_past_the_alert_while_a_phase_is_open(tmp_path: Path) -> None:
    """Every GPU at 0 % past the alert with a phase open is GPU IDLE; one busy GPU, a short idle or no open phase
    is not; busy is the devices' mean, a fraction as goodput's gpu_busy; the run stays ok."""
    run = tmp_path / "run"
    with_gpu(beat(run, "actor", 0, 10, open_phases=[phase("generation", 900)]), [0, 0], [400, 350])
    with_gpu(beat(run, "actor", 1, 11, open_phases=[phase("generation", 900)]), [0, 60], [400, None])
    with_gpu(beat(run, "actor", 2, 12, open_phases=[phase("generation", 900)]), [0], [100])
    with_gpu(beat(run, "actor", 3, 13), [0], [400])
    beat(run, "driver", 0, 1, open_phases=[phase("step", 900)])
    report = run_status(run, now_ns=NOW)
    rows = {r["pid"]: r for r in report["processes"]}
    assert rows[10]["gpu"] == {"busy": 0.0, "idle_s": 350.0, "idle_alert_s": 300.0, "idle": True, "devices": 2}
    assert rows[11]["gpu"]["busy"] == 0.3 and not rows[11]["gpu"]["idle"]
    assert not rows[12]["gpu"]["idle"] and not rows[13]["gpu"]["idle"]
    assert rows[1]["gpu"] is None
    assert report["ok"]
    text = format_status(report)
    assert "1 GPU IDLE" in text.splitlines()[0]
    [idle_line] = [line for line in text.splitlines() if "GPU IDLE 350" in line]
    assert "generation" in idle_line and " 0%  generation" in idle_line


def test_an_implausible_idle_since_is_no_reading_not_decades_of_idle(tmp_path: Path) -> None:
    """A heartbeat whose device says it has idled since 1970 (or whose reading time is garbage) gives no idle
    figure and no GPU IDLE: a time outside the store's plausible range is no reading."""
    run = tmp_path / "run"
    path = beat(run, "actor", 0, 10, open_phases=[phase("generation", 900)])
    with_gpu(path, [0], [400])
    content = json.loads(path.read_text())
    content["gpu"]["devices"][0]["idle_since_ns"] = 0
    path.write_text(json.dumps(content))
    path = beat(run, "actor", 1, 11, open_phases=[phase("generation", 900)])
    with_gpu(path, [0], [400])
    content = json.loads(path.read_text())
    content["gpu"]["t"] = 5
    path.write_text(json.dumps(content))
    rows = {r["pid"]: r for r in run_status(run, now_ns=NOW)["processes"]}
    assert rows[10]["gpu"]["idle_s"] is None and not rows[10]["gpu"]["idle"]
    assert rows[11]["gpu"] is None
    assert "GPU IDLE" not in format_status(run_status(run, now_ns=NOW))


def test_watch_shows_each_groups_gpu_busy_and_the_idle_gpus(tmp_path: Path) -> None:
    """``watch``'s processes table gives each group the mean GPU busy of its running processes (``-`` for a
    group with no GPU), lists a GPU IDLE process among the alarms; a run without GPUs has no GPU column."""
    pytest.importorskip("rich")
    from tests.offline.test_watch import _now, _render

    run = tmp_path / "run"
    with_gpu(beat(run, "actor", 0, 10, open_phases=[phase("generation", 900)]), [0, 0], [400, 350])
    with_gpu(beat(run, "actor", 1, 11, open_phases=[phase("generation", 900)]), [80, 40], [None, None])
    beat(run, "driver", 0, 1, open_phases=[phase("step", 900)])
    for path in run.glob("live-*.json"):
        _now(path)
        content = json.loads(path.read_text())
        if "gpu" in content:  # (its reading as recent as the heartbeat)
            shift = content["written_ns"] - content["gpu"]["t"]
            content["gpu"]["t"] += shift
            for device in content["gpu"]["devices"]:
                device["idle_since_ns"] = None if device["idle_since_ns"] is None else device["idle_since_ns"] + shift
            path.write_text(json.dumps(content))
    text = _render(run)
    header = next(line for line in text.splitlines() if "processes" in line and "gpu busy" in line)
    assert header.split()[-1] == "busy"
    actor = next(line for line in text.splitlines() if line.split()[:1] == ["actor"])
    driver = next(line for line in text.splitlines() if line.split()[:1] == ["driver"])
    assert actor.split()[-1] == "30%" and driver.split()[-1] == "-"
    assert "GPU IDLE" in text
    bare = tmp_path / "bare"
    _now(beat(bare, "actor", 0, 10))
    assert "gpu busy" not in _render(bare)


def test_watch_puts_the_gpu_goodput_beside_the_clocks(tmp_path: Path) -> None:
    """A run with GPU samples: ``watch``'s headline has the GPU goodput right after the clock's; without: none."""
    pytest.importorskip("rich")
    from lens_rl.offline.show.formats import percent
    from tests.gpu_stores import write_scripted_job
    from tests.offline.test_watch import _render

    run = write_scripted_job(tmp_path / "r1")
    gpu = json.loads(lens("goodput", str(run), "--json", "--no-cache").stdout)["gpu"]["goodput"]["goodput"]
    lines = _render(run).splitlines()
    header = next(n for n, line in enumerate(lines) if "GPU goodput" in line)
    assert lines[header].split()[:3] == ["goodput", "GPU", "goodput"]
    values = next(line for line in lines[header + 1 :] if "%" in line).split()
    assert values[1] == percent(gpu)
    assert "GPU goodput" not in _render(write_scripted_job(tmp_path / "b" / "r1", samples=False))


@pytest.mark.parametrize(
    "entry",
    [[], "x", {"t": "now", "devices": []}, {"t": 1, "devices": [1, None]}, {"t": 1, "devices": [{"util": "x"}]}],
)
def test_a_gpu_entry_of_another_shape_is_no_gpu_figure(tmp_path: Path, entry: Any) -> None:
    """A heartbeat's gpu entry of the wrong shape gives no GPU figure and no crash."""
    run = tmp_path / "run"
    path = beat(run, "actor", 0, 10, open_phases=[phase("generation", 900)])
    content = json.loads(path.read_text())
    content["gpu"] = entry
    path.write_text(json.dumps(content))
    report = run_status(run, now_ns=NOW)
    gpu = report["processes"][0]["gpu"]
    assert gpu is None or (gpu["busy"] is None and not gpu["idle"])
    format_status(report)


@pytest.mark.slow
def test_status_of_a_live_job_says_gpu_idle(tmp_path: Path) -> None:
    """A real process whose GPU reads 0 % past gpu_idle_alert_s during a phase: status says GPU IDLE, exits 0."""
    sc = nvml.write_scenario(
        tmp_path / "gpus.json", [{"uuid": "GPU-i", "util": 0, "mem_used": 1 << 30}], t0=time.time()
    )
    rid = f"s{uuid.uuid4().hex[:8]}"
    env = job_env(
        tmp_path / "traces",
        rid,
        sc,
        CUDA_VISIBLE_DEVICES="0",
        LENS_RL_OTEL_GPU_IDLE_ALERT_S="1",
        LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS="500",
    )
    job = Job(tmp_path)
    try:
        job.start(env)
        _says_gpu_idle(tmp_path / "traces", rid)
    finally:
        job.finish()


def _says_gpu_idle(traces: Path, rid: str) -> None:
    run_dir = traces / rid

    def idle() -> bool:
        report = run_status(run_dir)
        return any((r.get("gpu") or {}).get("idle") for r in report["processes"])

    wait_for(idle, what="GPU IDLE")
    out = lens("status", str(traces), "--run", rid)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "GPU IDLE" in out.stdout
    as_json = lens("status", str(traces), "--run", rid, "--json")
    [row] = json.loads(as_json.stdout)["processes"]
    assert row["gpu"]["idle"] and row["gpu"]["busy"] == 0.0
