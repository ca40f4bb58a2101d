"""Live, with real processes: a driver and two Ray trainers, one blocking in a phase far past its learned
timeout (heartbeats every 200 ms, hang_timeout_s 1 s). The hang is warned about once, with the threads'
stacks; ``lens-rl status`` run from another process shows it HUNG and exits 1 while it is open; its span
carries ``rl.hang_suspected`` after; a trainer killed with SIGKILL goes stale after three intervals. And
``multiprocessing.Pool`` workers (fork, spawn) ended mid-phase show no open phase: killed ones stale at once,
ones that exited ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env
from tests.stores import read_spans

pytestmark = pytest.mark.slow
JOB = Path(__file__).with_name("live_job.py")


def status(trace_dir: Path) -> tuple[int, dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "lens_rl", "status", str(trace_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def start(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """A job in its own process, its stdout and stderr in one text pipe."""
    return subprocess.Popen(
        [sys.executable, *command],
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
    )


def test_a_hung_trainer_is_flagged_live_and_a_killed_one_goes_stale(tmp_path: Path) -> None:
    trace_dir = tmp_path / "traces"
    env = {"LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS": "200", "LENS_RL_OTEL_HANG_TIMEOUT_S": "1"}
    job = start([str(JOB), str(trace_dir), str(tmp_path)], env, tmp_path)
    output: list[str] = []
    try:
        assert job.stdout is not None
        for line in job.stdout:
            output.append(line)
            if line.startswith("pids"):
                pids = [int(p) for p in line.split()[1:]]
            if line.strip() == "blocking":
                break
        time.sleep(2.5)  # rank 1 is 2.5 s into a phase whose learned timeout is 1 s
        code, hung = status(trace_dir)
        assert code == 1 and not hung["ok"]
        rows = {(r["worker_group"], r["rank"]): r for r in hung["processes"]}
        blocked = rows[("lm_policy", 1)]
        assert blocked["hung"] and blocked["phase"]["name"] == "policy_training" and blocked["phase"]["hung"]
        assert blocked["phase"]["open_s"] > 1.5 and blocked["phase"]["max_s"] == pytest.approx(0.1, abs=0.05)
        assert blocked["state"] == "running" and not rows[("lm_policy", 0)]["hung"]
        assert rows[("driver", 0)]["driver"] and hung["driver_step"] == 2
        text = subprocess.run(
            [sys.executable, "-m", "lens_rl", "status", str(trace_dir)], capture_output=True, text=True, timeout=60
        ).stdout
        assert "HUNG" in text and "policy_training" in text
        for line in job.stdout:
            output.append(line)
            if line.strip() == "trained":
                break
        os.kill(pids[0], signal.SIGKILL)  # rank 0's process dies with no goodbye
        time.sleep(1.2)  # > 3 heartbeat intervals
        code, later = status(trace_dir)
        rows = {(r["worker_group"], r["rank"]): r for r in later["processes"]}
        assert code == 1 and rows[("lm_policy", 0)]["state"] == "stale"
        assert rows[("lm_policy", 1)]["state"] == "running" and not rows[("lm_policy", 1)]["hung"]
    finally:
        (tmp_path / "release").write_text("")
        rest, _ = job.communicate(timeout=120)
        output.append(rest or "")
    log = "".join(output)
    assert job.returncode == 0, log[-3000:]
    warnings = [line for line in log.splitlines() if "suspected hang: phase 'policy_training' (step 2)" in line]
    on_rank_1 = [line for line in warnings if "lm_policy rank 1" in line]
    assert len(on_rank_1) == 1, log[-3000:]
    assert "<- the suspected phase's thread" in log and "time.sleep(BLOCK_S" in log  # its stack, the blocking line
    spans = read_spans(trace_dir / "live")
    (trained,) = [
        s
        for s in spans
        if s["name"] == "policy_training"
        and s["resource"].get("nv.dl.rank") == 1
        and s["resource"].get("rl.worker_group") == "lm_policy"
        and s["attributes"].get("rl.step") == 2
    ]
    events = [e for e in trained["events"] if e["name"] == "rl.hang_suspected"]
    assert len(events) == 1 and events[0]["attributes"]["rl.hang.timeout_s"] == pytest.approx(1.0)
    code, ended = status(trace_dir)
    states = {(r["worker_group"], r["rank"]): r["state"] for r in ended["processes"]}
    assert states[("driver", 0)] == "ended" and states[("lm_policy", 1)] == "ended"
    assert states[("lm_policy", 0)] == "stale" and code == 1


#: Two ``Pool`` workers each left mid-phase (``scoring`` entered, never left); argv: the start method, then
#: ``terminate`` (each blocks in its phase until ``pool.terminate()`` kills it: SIGTERM, no goodbye; on the
#: test's ``terminate`` file) or ``close`` (each returns with its phase open; ``close(); join()``: the workers
#: exit through ``os._exit``). Prints ``ended`` once the workers are gone, then waits for ``release``.
POOL_JOB = """
import multiprocessing as mp, os, sys, time
from pathlib import Path
from lens_rl import traced_phase

def work(block):
    traced_phase("scoring", step=3).__enter__()
    time.sleep(120 if block else 0.5)
    return os.getpid()

if __name__ == "__main__":
    method, how = sys.argv[1], sys.argv[2]
    with traced_phase("step", step=3):
        pool = mp.get_context(method).Pool(2)
        result = pool.map_async(work, [how == "terminate"] * 2, chunksize=1)
        if how == "terminate":
            while not Path("terminate").exists():
                time.sleep(0.05)
            pool.terminate()
        else:
            result.get(60)
            pool.close()
        pool.join()
        print("ended", flush=True)
        while not Path("release").exists():
            time.sleep(0.05)
"""


def _pool_status(trace_dir: Path, ready: Any, job: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    """``lens-rl status --json`` of run ``r`` once ``ready(report)`` holds (asked again every 0.2 s)."""
    deadline = time.monotonic() + 120
    while True:
        if list((trace_dir / "r").glob("live-*.json")):
            code, report = status(trace_dir)
            if ready(report):
                return code, report
        assert time.monotonic() < deadline and job.poll() is None, "no such status in 120 s"
        time.sleep(0.2)


def _scoring(report: dict[str, Any]) -> int:
    """How many Pool workers the report shows running in their ``scoring`` phase."""
    workers = [r for r in report["processes"] if not r["driver"] and r["state"] == "running"]
    return sum((w["phase"] or {}).get("name") == "scoring" for w in workers)


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("how", ["terminate", "close"])
def test_an_ended_pool_workers_phase_is_not_shown_open(tmp_path: Path, method: str, how: str) -> None:
    """Under lens-rl run (heartbeats every 60 s: no worker can go stale by age here), ``Pool`` workers left
    mid-phase and then ended (``terminate()`` kills them; ``close(); join()`` lets them exit) show no open
    phase in ``lens-rl status --json``: killed ones are stale at once (their pids are dead on this host; before,
    running in ``scoring`` until 3 intervals passed), ``last_phase`` saying where each was; ones that exited
    are ended, their phase ended by their shutdown; the driver, alive, shows its open step as before."""
    (tmp_path / "job.py").write_text(POOL_JOB)
    trace_dir = tmp_path / "traces"
    run = ["-m", "lens_rl", "run", "--trace-dir", str(trace_dir), "--run-id", "r", "--", sys.executable, "job.py"]
    job = start([*run, method, how], {"LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS": "60000"}, tmp_path)
    output: list[str] = []
    try:
        if how == "terminate":  # both workers seen running in their phase first
            _pool_status(trace_dir, lambda report: _scoring(report) == 2, job)
            (tmp_path / "terminate").write_text("")
        assert job.stdout is not None
        for line in job.stdout:
            output.append(line)
            if line.strip() == "ended":
                break
        code, report = _pool_status(trace_dir, lambda report: any(r["driver"] for r in report["processes"]), job)
        workers = [r for r in report["processes"] if not r["driver"]]
        assert len(workers) == 2, report
        for w in workers:
            assert w["phase"] is None and w["open_phases"] == 0 and not w["hung"], w
            if how == "terminate":
                assert w["state"] == "stale" and w["gone"], w
                assert w["last_phase"]["name"] == "scoring" and w["last_phase"]["step"] == 3, w
            else:  # (its shutdown, through multiprocessing's Finalize, ended the phase: none was open at its end)
                assert w["state"] == "ended" and not w["gone"] and w["last_phase"] is None, w
        (driver,) = [r for r in report["processes"] if r["driver"]]
        assert driver["state"] == "running" and driver["phase"]["name"] == "step" and not driver["gone"]
        assert code == (1 if how == "terminate" else 0)
        text = subprocess.run(
            [sys.executable, "-m", "lens_rl", "status", str(trace_dir)], capture_output=True, text=True, timeout=60
        ).stdout
        assert ("last seen in scoring" in text) == ("pid gone" in text) == (how == "terminate")
    finally:
        (tmp_path / "terminate").write_text("")
        (tmp_path / "release").write_text("")
        try:
            rest, _ = job.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
            rest, _ = job.communicate()
        output.append(rest or "")
    assert job.returncode == 0, "".join(output)[-3000:]
