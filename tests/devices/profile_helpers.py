"""What the profiler-window tests share: start the CPU loop (``profile_loop.py``) as real processes, read a run's
spans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import clean_env

ROOT = Path(__file__).resolve().parents[2]
LOOP = Path(__file__).with_name("profile_loop.py")
STANDINS = Path(__file__).with_name("standins")


def loop_env(trace_dir: Path, extra: dict[str, str] | None = None, *, enabled: bool = True) -> dict[str, str]:
    """A worker's environment for the loop: telemetry on (or off), run ``r1`` under ``trace_dir``."""
    env = clean_env(
        {
            "LENS_RL_OTEL_ENABLED": "true" if enabled else "false",
            "LENS_RL_OTEL_TRACE_DIR": str(trace_dir),
            "LENS_RL_OTEL_RUN_ID": "r1",
            "LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS": "200",
            "PYTHONPATH": f"{ROOT}",
        }
    )
    env.update(extra or {})
    return env


def start_loop(
    rank: int, steps: int, env: dict[str, str], *args: str, python: str | None = None
) -> subprocess.Popen[str]:
    """One worker of the loop, running."""
    return subprocess.Popen(
        [python or sys.executable, str(LOOP), str(rank), str(steps), *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> tuple[str, str]:
    """Wait for a loop; its output and errors (it must have ended well)."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    assert out.rstrip().endswith("done"), out[-2000:] + err[-2000:]
    return out, err


def losses(out: str) -> list[str]:
    """The ``step N loss X`` lines a loop printed."""
    return [line for line in out.splitlines() if line.startswith("step ")]


def spans(run: Path) -> list[dict[str, Any]]:
    """Every span of the run's files, with the file's ``rank`` (from its name) added."""
    out = []
    for path in sorted(run.glob("spans-*.jsonl")):
        rank = int(path.name.split("-")[2])
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if "n" in row:
                row["rank"] = rank
                out.append(row)
    return out


def profile_spans(run: Path) -> list[dict[str, Any]]:
    """The run's ``rl.profile`` spans, by rank then step."""
    found = [s for s in spans(run) if s["n"] == "rl.profile"]
    return sorted(found, key=lambda s: (s["rank"], s["a"]["rl.profile.step"]))


def step_span(run: Path, rank: int, step: int) -> dict[str, Any]:
    """The step umbrella ``step`` of ``rank``."""
    (found,) = [s for s in spans(run) if s["n"] == "step" and s["rank"] == rank and s["a"].get("rl.step") == step]
    return found


def cuda_env(tmp_path: Path, profile: str) -> dict[str, str]:
    """The loop's environment with ``LENS_RL_OTEL_PROFILE=profile`` and the CUDA profiler API's stand-in (its
    calls logged to ``tmp_path/cuda.log``), run ``r1`` under ``tmp_path/t``."""
    env = loop_env(tmp_path / "t", {"LENS_RL_OTEL_PROFILE": profile, "CUDA_STANDIN_LOG": str(tmp_path / "cuda.log")})
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{STANDINS}"
    return env


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``lens-rl profile ARGS``, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "lens_rl", "profile", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
