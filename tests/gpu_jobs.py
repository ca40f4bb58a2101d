"""Jobs of real processes over the stand-in NVML, for the GPU tests (the sampler's, status's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lens_rl.testing import nvml
from tests.conftest import clean_env

JOB = str(Path(__file__).with_name("gpu_job.py"))
ROOT = str(Path(__file__).resolve().parents[1])


def job_env(
    trace_dir: Path, run_id: str, scenario: str | None, *, standin: bool = True, **extra: str
) -> dict[str, str]:
    """The environment of one process of a GPU job (the stand-in first on the path unless ``standin`` is
    false)."""
    env = {
        "LENS_RL_OTEL_ENABLED": "true",
        "LENS_RL_OTEL_TRACE_DIR": str(trace_dir),
        "LENS_RL_OTEL_RUN_ID": run_id,
        "LENS_RL_OTEL_GPU_SAMPLE_HZ": "5",
        "LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS": "1000",
        "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p),
    }
    node_tmp = Path(trace_dir).parent / "node-tmp"  # the host's local lock files: in the test's folder
    node_tmp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(node_tmp)
    if standin:
        env = nvml.env(scenario, base=env)
    env.update(extra)
    return clean_env(env)


class Job:
    """Processes of a job started over the stand-in, stopped (or killed) by the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[str]] = []
        self.stop_file = tmp_path / "stop"

    def start(self, env: dict[str, str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, JOB, str(self.stop_file)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.procs.append(proc)
        return proc

    def finish(self, timeout: float = 60) -> list[tuple[int, str, str]]:
        """Let every process end; their exit codes and outputs."""
        self.stop_file.touch()
        out = []
        for proc in self.procs:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            out.append((proc.returncode, stdout, stderr))
        return out


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    running = Job(tmp_path)
    yield running
    running.stop_file.touch()
    for proc in running.procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def scenario(tmp_path: Path, devices: list[dict[str, Any]], **kw: Any) -> str:
    return nvml.write_scenario(tmp_path / "gpus.json", devices, t0=kw.pop("t0", time.time()), **kw)


def gpu_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("gpu-*.jsonl"))


def read_gpu(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A sample file's header and sample lines: its whole lines only (a sampler may be writing the next one;
    a file just created has no header yet: an empty header and no samples)."""
    whole = path.read_text().rpartition("\n")[0]
    lines = [json.loads(line) for line in whole.splitlines() if line.strip()]
    return (lines[0], lines[1:]) if lines else ({}, [])


def wait_for(check: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
