"""What the profiler-window tests share: start the CPU loop (``profile_loop.py``) as real processes, read a run's
spans."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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


def auto_job(env: dict[str, str], marked: str, timeout: float = 900) -> Path:
    """``profile_job.py`` (a driver and two trainer workers, rank 1 slow before the step-12 collective, its wait
    ``marked`` idle or not) run to its end under ``env``; its run folder (``<trace dir>/r1``)."""
    job = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "devices" / "profile_job.py"), "12", "1.5", marked],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert job.returncode == 0 and job.stdout.rstrip().endswith("done"), job.stderr[-3000:]
    return Path(env["LENS_RL_OTEL_TRACE_DIR"]) / "r1"


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
    return _lens("profile", *args, timeout=timeout)


def _lens(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``lens-rl ARGS`` with this checkout's lens_rl, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "lens_rl", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def goodput(run: Path, *args: str) -> dict[str, Any]:
    """``lens-rl goodput RUN --json ARGS``'s answer (it must have ended well)."""
    done = _lens("goodput", str(run), "--json", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def rewritten(run: Path, into: Path, *, drop: bool) -> Path:
    """A copy of the run folder ``run`` at ``into`` whose ``rl.profile`` spans are left out, their children hung
    from their parent (``drop``: the job with the windows excluded), or keep no ``rl.bucket`` / ``rl.step`` (a
    store written before they carried them)."""
    shutil.copytree(run, into)
    for path in into.glob("spans-*.jsonl"):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        windows = {row["s"]: row for row in rows if row.get("n") == "rl.profile"}
        kept = []
        for row in rows:
            if row.get("n") == "rl.profile":
                if drop:
                    continue
                row["a"] = {k: v for k, v in row["a"].items() if k not in ("rl.bucket", "rl.step")}
            elif drop and "p" in row and row["p"] in windows:  # (where the window hung from, they hang)
                window = windows[row["p"]]
                row.pop("p")
                row.pop("pr", None)
                row.update({key: window[key] for key in ("p", "pr") if key in window})
            kept.append(row)
        path.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
    return into


def check_capture_is_overhead(run: Path, scratch: Path) -> None:
    """The profiled run's ``rl.profile`` spans are ``overhead`` with their step, yet ``lens-rl goodput`` counts
    only the capture's cost (``rl.profile.start`` / ``.stop``) as overhead: productive time, walls and every step
    row as with the windows excluded, and the same answer as a store written before they carried a bucket."""
    windows = profile_spans(run)
    assert windows
    for window in windows:
        assert window["a"]["rl.bucket"] == "overhead"
        assert type(window["a"]["rl.step"]) is int and window["a"]["rl.step"] == window["a"]["rl.profile.step"]
    cost = [s["e"] - s["b"] for s in spans(run) if s["n"] in ("rl.profile.start", "rl.profile.stop")]
    profiled = goodput(run, "--no-cache")
    excluded = goodput(rewritten(run, scratch / "excluded" / run.name, drop=True), "--no-cache")
    job, other = profiled["job"], excluded["job"]
    assert job["seconds"] == pytest.approx(other["seconds"], abs=1e-6)
    assert job["wall_s"] == pytest.approx(other["wall_s"], abs=1e-6)
    assert job["seconds"]["overhead"] == pytest.approx(sum(cost) / 1e9, abs=1e-5)  # (the loop has no other)
    assert job["seconds"]["overhead"] < sum(w["e"] - w["b"] for w in windows) / 1e9  # (not the windows)
    assert job["seconds"]["productive"] + job["seconds"]["overhead"] <= job["wall_s"] + 1e-6
    assert [(s["step"], s["seconds"], s["wall_s"]) for s in profiled["steps"]] == [
        (s["step"], pytest.approx(s["seconds"], abs=1e-6), pytest.approx(s["wall_s"], abs=1e-6))
        for s in excluded["steps"]
    ]
    assert profiled["critical_path"]["steps"] == excluded["critical_path"]["steps"]
    for row in profiled["steps"]:  # (nothing counted twice: a step's seconds fit in its wall)
        assert sum(row["seconds"].values()) + row["unattributed_s"] == pytest.approx(row["wall_s"], abs=1e-5)
    before = goodput(rewritten(run, scratch / "before" / run.name, drop=False), "--no-cache")
    assert before == profiled
    assert goodput(run) == profiled and goodput(run) == profiled  # (the second from the refresh cache)
    for window in windows:
        step = window["a"]["rl.step"]
        events = perfetto_events(run, scratch / f"step{step}.json", "--steps", f"{step}-{step}")
        assert [e["args"]["rl.step"] for e in events if e["name"] == "rl.profile"] == [step]


def perfetto_events(run: Path, out: Path, *args: str) -> list[dict[str, Any]]:
    """The ``X`` events of ``lens-rl perfetto RUN -o OUT ARGS`` (Chrome trace-event JSON)."""
    done = _lens("perfetto", str(run), "-o", str(out), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    body = json.loads(out.read_text(encoding="utf-8"))
    return [e for e in (body["traceEvents"] if isinstance(body, dict) else body) if e.get("ph") == "X"]
