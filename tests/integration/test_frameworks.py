"""Real Ray jobs shaped like NeMo-RL's, veRL's and an async GRPO loop: lens_rl's per-step and steady-state
goodput against each job's own perf_counter measurements. Started from a folder holding a directory named
lens_rl (a checkout's name): Ray puts the driver's working directory on its workers' sys.path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env

pytest.importorskip("ray")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the four jobs once (one cluster); their own measurements and lens-rl goodput --json of each run."""
    cwd = tmp_path_factory.mktemp("parent")
    (cwd / "lens_rl").mkdir()  # a checkout's name in the driver's working directory: no package in it
    trace_dir, out = cwd / "traces", cwd / "own.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/integration/frameworks_job.py"), str(trace_dir), str(out)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=400,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    own = json.loads(out.read_text())
    reports = {}
    for run in own:
        done = subprocess.run(
            [sys.executable, "-m", "lens_rl", "goodput", str(trace_dir), "--run", run, "--json"],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        reports[run] = json.loads(done.stdout)
    return {"own": own, "reports": reports}


@pytest.mark.parametrize("run", ["sync", "async", "nemo_rl", "verl"])
def test_step_and_steady_state_goodput_agree_with_the_jobs_own_timing(jobs: dict[str, Any], run: str) -> None:
    """Every step's goodput is the job's own productive seconds over its own step wall (within 5 points on a
    loaded machine); so is the steady state; nothing is left unbucketed."""
    own, report = jobs["own"][run], jobs["reports"][run]
    rows = {s["step"]: s for s in report["steps"]}
    assert sorted(rows) == [s["step"] for s in own] and not any(r["incomplete"] for r in rows.values())
    for mine in own:
        row = rows[mine["step"]]
        assert row["wall_s"] == pytest.approx(mine["wall_s"], abs=0.02)
        assert row["goodput"] == pytest.approx(mine["productive_s"] / mine["wall_s"], abs=0.05)
    steady = own[1:]
    expected = sum(s["productive_s"] for s in steady) / sum(s["wall_s"] for s in steady)
    assert report["steady_state_goodput"] == pytest.approx(expected, abs=0.05)
    assert [u for u in report["unbucketed_phases"] if u["worker_group"] == "driver"] == []


def test_the_async_trainers_wait_is_idle_and_generation_is_in_the_table(jobs: dict[str, Any]) -> None:
    """The trainer's wait on the generation buffer counts as idle, not productive; the generation actor's
    phase (with its tokens) is in the phase table, under its group."""
    report = jobs["reports"]["async"]
    waits = sum(s["seconds"]["idle"] for s in report["steps"])
    assert waits > 0.2 and report["steady_state_goodput"] < 0.9
    gen = next(p for p in report["phases"] if p["phase"] == "generation" and p["worker_group"] == "vllm_policy")
    assert gen["count"] >= 4 and gen["tokens_per_s"] is not None and gen["bucket"] == "productive"


def test_workers_started_beside_a_folder_named_lens_rl_import_the_package(jobs: dict[str, Any]) -> None:
    """The policy and generation workers recorded their phases: the folder named lens_rl did not shadow it."""
    for run in ("sync", "nemo_rl"):
        groups = {g["worker_group"] for g in jobs["reports"][run]["worker_groups"]}
        assert {"driver", "lm_policy", "vllm_policy"} <= groups
