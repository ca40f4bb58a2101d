"""The live side of a handle: the learned hang timeout, the watchdog (driven with explicit times, so it is
exact), the heartbeat's content and its atomic write, a full disk, the open-phase gauge at a real OTLP
receiver, and what shutdown leaves (``state: ended``)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl._runtime import RUNTIME
from lens_rl.export.live import HANG_FACTOR, NEVER_DONE_FACTOR, hang_timeout, stacks
from tests.conftest import lens, run_python
from tests.stores import read_spans


def _driver(tmp_path: Path, **telemetry: Any) -> Any:
    return lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": str(tmp_path), "run_id": "r", **telemetry}}, "grpo"
    )


def test_the_learned_timeout_is_five_times_the_longest_run_and_never_below_the_floor() -> None:
    """max(hang_timeout_s, 5 x the longest completed run); a name never completed waits 3 x hang_timeout_s."""
    assert hang_timeout(None, 600) == NEVER_DONE_FACTOR * 600
    assert hang_timeout(10.0, 600) == 600
    assert hang_timeout(200.0, 600) == HANG_FACTOR * 200.0


def test_the_watchdog_flags_once_warns_once_with_stacks_and_marks_the_span(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A phase past its learned timeout (two earlier runs of 0.1 s, the floor 2 s): flagged once, one warning
    naming phase, step, rank and age with the stacks (its thread first), counted; its enclosing umbrella is
    named in the same warning; the span carries rl.hang_suspected when it ends. A phase within its timeout
    is left alone."""
    handle = _driver(tmp_path, hang_timeout_s=2, heartbeat_interval_ms=0)
    monitor = handle.live
    for step in range(2):
        with lens_rl.traced_phase("step", step=step), lens_rl.traced_phase("weight_sync"):
            time.sleep(0.1)
    caplog.set_level(logging.WARNING, "lens_rl")
    with lens_rl.traced_phase("step", step=2), lens_rl.traced_phase("weight_sync"):
        opened = max(node.start_ns for node in RUNTIME.open_phases.values())
        monitor.tick(opened + int(1.5e9))  # within max(2 s, 0.5 s)
        assert monitor.hangs == 0
        monitor.tick(opened + int(2.5e9))
        monitor.tick(opened + int(9e9))  # already flagged: no second warning
        assert monitor.hangs == 2  # the phase and its umbrella
        (warning,) = [r.getMessage() for r in caplog.records if "suspected hang" in r.getMessage()]
        assert "phase 'weight_sync' (step 2) (inside 'step', suspected too) on driver rank 0" in warning
        assert "open 2.5 s, past its timeout 2.0 s" in warning
        first_thread = warning.split("--- thread", 2)[1]
        assert "<- the suspected phase's thread" in first_thread and "test_live.py" in first_thread
    lens_rl.shutdown_telemetry(2000)
    spans = [s for s in read_spans(tmp_path / "r") if s["attributes"].get("rl.step") == 2]
    for span in spans:
        events = [e for e in span["events"] if e["name"] == "rl.hang_suspected"]
        assert len(events) == 1 and events[0]["attributes"]["rl.hang.timeout_s"] == 2.0, span["name"]


def test_a_heartbeat_says_what_the_process_is_doing(tmp_path: Path) -> None:
    """The file (written by a rename: no temporary left) holds the resource, the open phases with their
    thread, the last step, per-name count / longest / p95, stats(), the interval and state; shutdown
    rewrites it with state ended."""
    handle = _driver(tmp_path, heartbeat_interval_ms=100000)
    with lens_rl.traced_phase("step", step=0), lens_rl.traced_phase("generation"):
        time.sleep(0.02)
    with lens_rl.traced_phase("step", step=1), lens_rl.traced_phase("generation", step=1):
        assert handle.live.write("running")
        beat = json.loads(next((tmp_path / "r").glob("live-driver-0-*.json")).read_text())
    assert beat["format"] == "lens_rl.live/1" and beat["state"] == "running" and beat["interval_ms"] == 100000
    assert beat["resource"]["rl.worker_group"] == "driver" and beat["role"] == "driver"
    assert [(p["name"], p["step"], p["thread_name"]) for p in beat["open"]] == [
        ("step", 1, "MainThread"),
        ("generation", 1, "MainThread"),
    ]
    assert beat["open"][1]["bucket"] == "productive" and "hang" not in beat["open"][1]
    assert beat["last_step"]["step"] == 0 and beat["last_step"]["goodput"] > 0.5
    assert beat["phases"]["generation"]["count"] == 1 and beat["phases"]["generation"]["max_s"] >= 0.02
    assert beat["stats"]["exporter"] == "file" and beat["hangs"] == 0
    lens_rl.shutdown_telemetry(2000)
    (path,) = (tmp_path / "r").glob("live-*.json")
    assert json.loads(path.read_text())["state"] == "ended"
    assert not list((tmp_path / "r").glob(".*.tmp"))


def test_a_worker_between_its_phases_says_the_step_of_its_latest_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker (no step umbrella of its own) has no open phase between two of its phases: its heartbeat says
    the step of the latest one it ended (``phase_step``), and ``lens-rl status`` shows it as the row's step."""
    from lens_rl.offline.show.status import run_status

    env = {"ENABLED": "true", "TRACE_DIR": str(tmp_path), "RUN_ID": "r", "HEARTBEAT_INTERVAL_MS": "100000"}
    for key, value in env.items():
        monkeypatch.setenv(f"LENS_RL_OTEL_{key}", value)
    handle = lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="actor")
    assert handle is not None
    assert handle.live is not None
    with lens_rl.traced_phase("generation", step=7):
        pass
    with lens_rl.traced_phase("reward"):  # (a phase with no step leaves it as it was)
        pass
    assert handle.live.write("running")
    (path,) = (tmp_path / "r").glob("live-actor-0-*.json")
    beat = json.loads(path.read_text())
    assert beat["open"] == [] and beat["last_step"] is None and beat["phase_step"] == 7
    (row,) = run_status(tmp_path / "r", time.time_ns())["processes"]
    assert row["step"] == 7
    lens_rl.shutdown_telemetry(2000)


def test_no_heartbeat_file_with_the_interval_0_or_without_the_file_store(tmp_path: Path) -> None:
    """heartbeat_interval_ms 0 writes none (the watchdog still runs); an OTLP job writes none either."""
    handle = _driver(tmp_path, heartbeat_interval_ms=0)
    assert handle.live is not None and handle.live.path is None
    lens_rl.shutdown_telemetry(2000)
    assert not list(tmp_path.rglob("live-*.json"))


FULL_DISK = """
import resource, signal, time, lens_rl
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))   # a heartbeat (~2 KB) cannot be written
lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {trace_dir!r}, "run_id": "r",
                                "heartbeat_interval_ms": 50, "traces_enabled": False}}}}, "grpo")
for step in range(20):
    with lens_rl.traced_phase("step", step=step):
        time.sleep(0.02)
print("SHUTDOWN", lens_rl.shutdown_telemetry(1000), flush=True)
"""


def test_heartbeats_on_a_full_disk_warn_once_and_never_raise(tmp_path: Path) -> None:
    """Every heartbeat write fails (the file size limit): one warning naming the file, the job runs on and
    shuts down normally, no temporary file is left."""
    out = run_python(FULL_DISK.format(trace_dir=str(tmp_path)), timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SHUTDOWN" in out.stdout
    assert sum("cannot write the heartbeat" in line for line in out.stderr.splitlines()) == 1, out.stderr
    assert not list(tmp_path.rglob(".*.tmp"))


def test_the_open_phase_gauge_reaches_a_real_otlp_receiver(receiver: Any) -> None:
    """rl.phase.open_seconds arrives with the open phase's name and its age; rl.phase.hangs once flagged."""
    handle = lens_rl.init_telemetry_driver(
        {
            "telemetry": {
                "enabled": True,
                "exporter": "otlp",
                "endpoint": receiver.endpoint,
                "hang_timeout_s": 0.3,
                "metrics_interval_ms": 60000,
            }
        },
        "grpo",
    )
    with lens_rl.traced_phase("weight_sync"):
        time.sleep(1.2)  # never completed before: flagged past 3 x 0.3 s
        assert lens_rl.flush_telemetry(5000)
    lens_rl.shutdown_telemetry(2000)
    assert handle.live.hangs == 1
    points = {}
    for request in receiver.metric_requests:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == "rl.phase.open_seconds":
                        for point in metric.gauge.data_points:
                            points[point.attributes[0].value.string_value] = point.as_double
                    if metric.name == "rl.phase.hangs":
                        points["hangs"] = metric.sum.data_points[0].as_int
    assert points["weight_sync"] >= 1.1 and points["hangs"] == 1


def test_the_stacks_are_bounded() -> None:
    """Every thread's stack, the marked one first; with 200 threads the text is cut at its bound."""
    import threading

    release = threading.Event()
    threads = [threading.Thread(target=release.wait, name=f"t{n}") for n in range(200)]
    for thread in threads:
        thread.start()
    try:
        text = stacks(threading.get_ident())
    finally:
        release.set()
        for thread in threads:
            thread.join()
    assert text.startswith("--- thread MainThread") and "<- the suspected phase's thread" in text.split("\n")[0]
    assert text.endswith("(cut at 20000 characters)") and len(text) <= 20_000 + 40


def test_a_heartbeat_interval_shorter_than_the_thread_keeps_says_the_one_it_keeps(tmp_path: Path) -> None:
    """heartbeat_interval_ms 10: the thread waits at least 50 ms between rounds, so the heartbeat is rewritten
    every 50 ms and says 50 (saying 10, a reader judging by 3 intervals would call the process stale between
    two writes); its thread waits no longer than that."""
    from lens_rl.store import LIVE_MIN_INTERVAL_MS

    handle = _driver(tmp_path, heartbeat_interval_ms=10)
    monitor = handle.live
    assert monitor.tick_s * 1000 <= LIVE_MIN_INTERVAL_MS
    assert monitor.write("running")
    (path,) = (tmp_path / "r").glob("live-driver-0-*.json")
    assert json.loads(path.read_text())["interval_ms"] == LIVE_MIN_INTERVAL_MS == 50
    lens_rl.shutdown_telemetry(2000)


def test_the_ended_heartbeat_carries_the_stats_after_the_last_flush(tmp_path: Path) -> None:
    """Shutdown writes the last heartbeat once its spans are flushed: nothing queued, every span in the file
    counted exported (written before the flush, it said 7 queued, 0 exported)."""
    _driver(tmp_path, heartbeat_interval_ms=100000)
    for step in range(3):
        with lens_rl.traced_phase("step", step=step), lens_rl.traced_phase("generation", step=step):
            pass
    assert lens_rl.shutdown_telemetry(5000)
    (path,) = (tmp_path / "r").glob("live-*.json")
    beat = json.loads(path.read_text())
    spans = read_spans(tmp_path / "r")
    assert beat["state"] == "ended" and spans
    stats = beat["stats"]
    assert (stats["queued"], stats["retrying"], stats["exporting"]) == (0, 0, 0)
    assert stats["exported"] == stats["accepted"] == len(spans), stats


def test_a_group_given_as_a_number_is_written_as_its_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """init_telemetry_worker(worker_group=5) (a launcher's group id): the heartbeat and the span header say
    the group "5", a string as the format declares, and lens-rl status reads the process (it called its
    heartbeat malformed and exited 2)."""
    env = {"ENABLED": "true", "TRACE_DIR": str(tmp_path), "RUN_ID": "r", "HEARTBEAT_INTERVAL_MS": "100000"}
    for key, value in env.items():
        monkeypatch.setenv(f"LENS_RL_OTEL_{key}", value)
    handle = lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group=5)  # type: ignore[arg-type]
    assert handle is not None and handle.resource.attributes["rl.worker_group"] == "5"
    with lens_rl.traced_phase("generation", step=0):
        pass
    assert lens_rl.shutdown_telemetry(5000)
    (path,) = (tmp_path / "r").glob("live-*.json")
    assert json.loads(path.read_text())["resource"]["rl.worker_group"] == "5"
    (spans_file,) = (tmp_path / "r").glob("spans-*.jsonl")
    header = json.loads(spans_file.read_text().splitlines()[0])
    assert header["resource"]["rl.worker_group"] == "5"
    out = lens("status", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["processes"]
    assert (row["worker_group"], row["state"]) == ("5", "ended") and not out.stderr


@pytest.mark.timeout(180)
def test_a_process_flushing_at_shutdown_on_a_slow_disk_is_not_stale(tmp_path: Path) -> None:
    """A real process whose last spans' write is slow (a disk that holds each write until the test lets it
    go): while its shutdown flushes, well past 3 heartbeat intervals, ``lens-rl status`` reads it running,
    not stale (no heartbeat came during the flush, and a cron job alerted on a process ending cleanly); once
    the write goes through, it ends, flushed, and its last heartbeat says so."""
    import subprocess
    import sys

    from tests.conftest import clean_env

    release = tmp_path / "release"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import os, time, lens_rl
real_write = os.write
slow = []
def write(fd, data):  # the disk from the shutdown on: a write waits until the test creates {release.name}
    deadline = time.monotonic() + 120
    while slow and not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return real_write(fd, data)
os.write = write
lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r}, "run_id": "r",
                               "heartbeat_interval_ms": 100, "metrics_enabled": False}}}}, "grpo")
with lens_rl.traced_phase("step", step=0), lens_rl.traced_phase("generation", step=0):
    pass
assert lens_rl.flush_telemetry(10000)
while not any(name.startswith("live-") for name in os.listdir({str(tmp_path / "r")!r})):
    time.sleep(0.02)  # (its first heartbeat: the process is running)
slow.append(True)
print("flushing", flush=True)
print("shut down", lens_rl.shutdown_telemetry(150000), flush=True)
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "flushing\n"
        time.sleep(1.0)  # 10 intervals: stale, were the heartbeat to stop for the flush
        during = lens("status", str(tmp_path), "--json")
        assert child.poll() is None, "the flush ended before the status was read"
        assert during.returncode == 0, during.stdout + during.stderr
        (row,) = json.loads(during.stdout)["processes"]
        assert row["state"] == "running", during.stdout
    finally:
        release.touch()
        out, _ = child.communicate(timeout=120)
    assert child.returncode == 0 and out.strip() == "shut down True", out
    after = lens("status", str(tmp_path), "--json")
    (row,) = json.loads(after.stdout)["processes"]
    assert row["state"] == "ended", after.stdout
