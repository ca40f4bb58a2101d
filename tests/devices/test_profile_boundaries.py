"""Where a process's step boundaries are, in real processes (the CUDA profiler API's stand-in, no torch): a late
phase of an older step does not end a window, the request file is looked at at most once a second, and
``lens-rl profile`` on a job that ended stops at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.devices.profile_helpers import ROOT, cuda_env, finish, loop_env, profile_spans, run_cli, spans, start_loop

pytestmark = pytest.mark.slow

#: A worker of an async pipeline (no umbrella): step 5's generation, a late reward of step 4, more of step 5.
LATE = """
import time, lens_rl
from lens_rl import traced_phase
lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="rollout")
for step, name, seconds in [(4, "generation", 0.05), (5, "generation", 0.1), (4, "reward", 0.01),
                            (5, "generation", 0.1), (6, "generation", 0.05)]:
    with traced_phase(name, step=step):
        time.sleep(seconds)
lens_rl.shutdown_telemetry(5000)
"""

#: A driver of 2000 short steps counting its looks at the request file (every ``os.stat`` of it).
LOOKS = """
import os, time, lens_rl
from lens_rl import traced_phase
from lens_rl.devices.profile_requests import REQUEST_FILE
looks, stat = [0], os.stat
def counted(path, *args, **kwargs):
    looks[0] += str(path).endswith(REQUEST_FILE)
    return stat(path, *args, **kwargs)
os.stat = counted
lens_rl.init_telemetry_driver({})
began = time.monotonic()
for step in range(2000):
    with traced_phase("step", step=step):
        with traced_phase("policy_training"):
            pass
print(looks[0], time.monotonic() - began)
lens_rl.shutdown_telemetry(5000)
"""


#: A worker of 50 steps (a compute phase and an idle wait each, a late phase of an older step now and then): what
#: its per-step tally holds at the end, and its step lines.
TALLY = """
import json, time, lens_rl
from lens_rl import traced_phase
from lens_rl._runtime import RUNTIME
lens_rl.init_telemetry_worker(rank=1, world_size=2, worker_group="trainer")
for step in range(50):
    with traced_phase("forward", bucket="productive", step=step):
        time.sleep(0.002)
    with traced_phase("barrier", step=step):
        time.sleep(0.004)
    if step % 10 == 5:
        with traced_phase("reward", bucket="overhead", step=step - 3):
            pass
print(json.dumps(None if RUNTIME.step_tally is None else sorted(map(str, RUNTIME.step_tally))))
lens_rl.shutdown_telemetry(5000)
"""


def _python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_late_phase_of_an_older_step_does_not_end_the_open_window(tmp_path: Path) -> None:
    """A worker profiled at step 5 runs a late step-4 phase in the middle of step 5: the window spans both
    step-5 generations and ends when step 6 begins."""
    _python(LATE, cuda_env(tmp_path, "steps=5-5,backend=cuda"))
    run = tmp_path / "t" / "r1"
    (window,) = profile_spans(run)
    fives = [s for s in spans(run) if s["n"] == "generation" and s["a"].get("rl.step") == 5]
    assert len(fives) == 2
    assert all(window["b"] <= s["b"] and s["e"] <= window["e"] for s in fives), (window, fives)
    assert window["a"]["rl.profile.ended_by"] == "step end"


def test_the_request_file_is_looked_at_at_most_once_a_second(tmp_path: Path) -> None:
    """2000 short steps: the request file is looked at about once a second of the loop, not at every step."""
    looks, seconds = _python(LOOKS, loop_env(tmp_path / "t")).split()
    assert 1 <= int(looks) <= float(seconds) + 2, (looks, seconds)


def test_lens_rl_profile_on_a_job_that_ended_exits_1_at_once(tmp_path: Path) -> None:
    """Every process of the run ended: ``lens-rl profile`` says no process runs and exits 1 long before its
    timeout; a job running but named by no --group waits only a few seconds, naming who runs."""
    finish(start_loop(0, 3, cuda_env(tmp_path, "backend=cuda")))
    began = time.monotonic()
    done = run_cli(str(tmp_path / "t"), "--steps", "next", "--timeout", "300", timeout=400)
    assert done.returncode == 1, done.stderr
    assert "no process of the run is running" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - began < 150
    env = cuda_env(tmp_path / "later", "backend=cuda")
    env["LOOP_PAUSE_S"] = "0.2"
    proc = start_loop(0, 2000, env)
    run = tmp_path / "later" / "t" / "r1"
    try:
        deadline = time.monotonic() + 120
        while not list(run.glob("live-*.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        began = time.monotonic()
        done = run_cli(str(tmp_path / "later" / "t"), "--group", "rollout", "--timeout", "300", timeout=400)
    finally:
        proc.terminate()
        proc.communicate(timeout=120)
    assert done.returncode == 1, done.stderr
    assert "no running process matches --group rollout; running: trainer rank 0" in done.stderr, done.stderr
    assert time.monotonic() - began < 150


def test_a_workers_step_lines_are_written_with_auto_only_and_its_tally_stays_small(tmp_path: Path) -> None:
    """steps=auto on a worker: one line per step it left, its compute without the idle wait; the per-step tally
    holds the open step only (late phases of older steps dropped); without auto no tally and no line."""
    got = _python(TALLY, cuda_env(tmp_path, "steps=auto,backend=cuda"))
    assert json.loads(got) == ["49"]
    (path,) = (tmp_path / "t" / "r1" / "profiles").glob(".steps-trainer-1-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(49))
    forward = {s["a"]["rl.step"]: (s["e"] - s["b"]) / 1e9 for s in spans(tmp_path / "t" / "r1") if s["n"] == "forward"}
    assert [line["compute_s"] for line in lines] == [pytest.approx(forward[step], abs=1e-5) for step in range(49)]
    assert all(line["group"] == "trainer" and "cpu_s" in line for line in lines), lines
    assert _python(TALLY, cuda_env(tmp_path / "off", "backend=cuda")).strip() == "null"
    assert not list((tmp_path / "off").glob("t/r1/profiles/.steps-*"))
