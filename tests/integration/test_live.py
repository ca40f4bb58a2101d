"""Live, with real processes: a driver and two Ray trainers, one blocking in a phase far past its learned
timeout (heartbeats every 200 ms, hang_timeout_s 1 s). The hang is warned about once, with the threads'
stacks; ``lens-rl status`` run from another process shows it HUNG and exits 1 while it is open; its span
carries ``rl.hang_suspected`` after; a trainer killed with SIGKILL goes stale after three intervals."""

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


def test_a_hung_trainer_is_flagged_live_and_a_killed_one_goes_stale(tmp_path: Path) -> None:
    trace_dir = tmp_path / "traces"
    env = clean_env({"LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS": "200", "LENS_RL_OTEL_HANG_TIMEOUT_S": "1"})
    job = subprocess.Popen(
        [sys.executable, str(JOB), str(trace_dir), str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
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
