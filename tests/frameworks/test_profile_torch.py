"""Profiler windows with the real ``torch.profiler`` (the TRL venv has torch: ``.ci/trl.sh``): a CPU loop of two
workers profiled by config, by a ``lens-rl profile`` request, a profiler that raises, ``max_bytes`` cutting a
window, and a TRL GRPO job under ``lens-rl run``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.devices.profile_helpers import (
    ROOT,
    auto_job,
    check_capture_is_overhead,
    finish,
    loop_env,
    losses,
    profile_spans,
    spans,
    start_loop,
    step_span,
)

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def _trace(path: Path) -> list[dict[str, Any]]:
    """The op events of a gzip'd Chrome trace, their times made absolute (µs since the epoch)."""
    body = json.loads(gzip.decompress(path.read_bytes()))
    base_us = body.get("baseTimeNanoseconds", 0) / 1000
    events = [e for e in body["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "kernel")]
    for event in events:
        event["abs_ts"] = event["ts"] + base_us
    return events


def test_config_profiles_exactly_the_configured_steps_of_the_configured_rank(tmp_path: Path) -> None:
    """steps=3-4 on rank 1 of 2 workers: exactly two files, rank 1's, valid Chrome traces whose ops fall inside
    their step's span; each linked by an rl.profile span over the window."""
    env = loop_env(tmp_path / "t", {"LENS_RL_OTEL_PROFILE": "steps=3-4,ranks=1,backend=torch"})
    procs = [start_loop(rank, 6, env) for rank in (0, 1)]
    for proc in procs:
        finish(proc)
    run = tmp_path / "t" / "r1"
    names = sorted(p.name for p in (run / "profiles").iterdir())
    assert names == ["trainer-1-step3.pt.trace.json.gz", "trainer-1-step4.pt.trace.json.gz"]
    windows = profile_spans(run)
    assert [(w["rank"], w["a"]["rl.profile.step"], w["a"]["rl.profile.reason"]) for w in windows] == [
        (1, 3, "config"),
        (1, 4, "config"),
    ]
    for window in windows:
        step = window["a"]["rl.profile.step"]
        assert window["a"]["rl.profile.path"] == f"profiles/trainer-1-step{step}.pt.trace.json.gz"
        events = _trace(run / window["a"]["rl.profile.path"])
        assert any(e["name"] == "aten::matmul" for e in events)
        umbrella = step_span(run, 1, step)
        for event in events:
            assert (
                umbrella["b"] / 1000 - 1
                <= event["abs_ts"]
                <= event["abs_ts"] + event["dur"]
                <= umbrella["e"] / 1000 + 1
            )
        assert umbrella["b"] <= window["b"] <= window["e"] <= umbrella["e"]  # (it stops inside its step)
    done = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(run), "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    captures = json.loads(done.stdout)["profiles"]
    assert [(c["step"], c["rank"], c["reason"]) for c in captures] == [(3, 1, "config"), (4, 1, "config")]
    for capture in captures:
        (forward,) = capture["summary"]
        assert forward["phase"] == "forward" and 0 < forward["cpu_op_s"] <= forward["wall_s"]
        assert forward["kernel_s"] is None and forward["no_kernel_share"] is None  # a CPU-only trace


def test_a_request_while_the_job_runs_captures_the_next_step_of_rank_1(tmp_path: Path) -> None:
    """``lens-rl profile --rank 1 --steps next`` sent while two workers run: rank 1's next step is captured (a
    valid trace of that step), rank 0 captures nothing, the command prints the file and exits 0."""
    env = loop_env(tmp_path / "t", {"LOOP_PAUSE_S": "0.2"})
    procs = [start_loop(rank, 60, env) for rank in (0, 1)]
    run = tmp_path / "t" / "r1"
    try:
        deadline = time.monotonic() + 120
        while len(list(run.glob("live-*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        done = subprocess.run(
            [sys.executable, "-m", "lens_rl", "profile", str(tmp_path / "t"), "--rank", "1", "--steps", "next"]
            + ["--timeout", "200"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        for proc in procs:
            finish(proc, timeout=400)
    assert done.returncode == 0, done.stderr
    (window,) = profile_spans(run)
    assert window["rank"] == 1 and window["a"]["rl.profile.reason"] == "request"
    assert done.stdout.split() == [str(run / window["a"]["rl.profile.path"])]
    events = _trace(run / window["a"]["rl.profile.path"])
    umbrella = step_span(run, 1, window["a"]["rl.profile.step"])
    assert events and all(umbrella["b"] / 1000 - 1 <= e["abs_ts"] <= umbrella["e"] / 1000 + 1 for e in events)


def test_a_profiler_that_raises_leaves_the_job_unchanged_with_one_warning(tmp_path: Path) -> None:
    """torch.profiler raising at start: the job's steps and losses are those of an unprofiled run, one warning,
    no capture."""
    out_plain, _ = finish(start_loop(0, 5, loop_env(tmp_path / "plain")))
    env = loop_env(tmp_path / "t", {"LENS_RL_OTEL_PROFILE": "steps=1-3", "LOOP_FAIL_PROFILER": "1"})
    out, err = finish(start_loop(0, 5, env))
    assert losses(out) == losses(out_plain) and len(losses(out)) == 5
    assert err.count("no profiler window") == 1, err
    assert not profile_spans(tmp_path / "t" / "r1")
    assert sorted({s["a"].get("rl.step") for s in spans(tmp_path / "t" / "r1") if s["n"] == "step"}) == list(range(5))


def test_max_bytes_cuts_a_window_before_its_step_ends(tmp_path: Path) -> None:
    """A window whose process grew past max_bytes is stopped at the next phase: ended_by max_bytes, and its
    trace holds none of the step's last phases."""
    env = loop_env(
        tmp_path / "t",
        {
            "LENS_RL_OTEL_PROFILE": "steps=1-1,max_bytes=1000000",
            "LOOP_PHASES": "20",
            "LOOP_INNER": "100",
            "LOOP_SIZE": "96",
            "OMP_NUM_THREADS": "1",
        },
    )
    finish(start_loop(0, 3, env), timeout=900)
    run = tmp_path / "t" / "r1"
    (window,) = profile_spans(run)
    assert window["a"]["rl.profile.ended_by"] == "max_bytes"
    phases = sorted(
        (s for s in spans(run) if s["n"] in ("forward", "backward") and s["a"].get("rl.step") == 1),
        key=lambda s: s["b"],
    )
    assert len(phases) == 20
    events = _trace(run / window["a"]["rl.profile.path"])
    assert events and max(e["abs_ts"] for e in events) < phases[-1]["b"] / 1000
    assert window["e"] < phases[-1]["b"]


def test_a_trl_grpo_job_under_lens_rl_run_profiles_step_2(tmp_path: Path) -> None:
    """LENS_RL_OTEL_PROFILE=steps=2-2,backend=torch on an unmodified TRL GRPO job under ``lens-rl run``: one
    capture of step 2, a valid trace of TRL's ops inside step 2's span, the job's losses as unprofiled."""
    pytest.importorskip("trl")
    job = Path(__file__).with_name("trl_job.py")
    results = []
    for name, extra in (("plain", {}), ("prof", {"LENS_RL_OTEL_PROFILE": "steps=2-2,backend=torch"})):
        out = tmp_path / f"{name}.json"
        command = [sys.executable, "-m", "lens_rl", "run", "--trace-dir", str(tmp_path / name), "--run-id", "r", "--"]
        env = loop_env(tmp_path / name, {"OMP_NUM_THREADS": "1", **extra})
        del env["LENS_RL_OTEL_RUN_ID"], env["LENS_RL_OTEL_TRACE_DIR"], env["LENS_RL_OTEL_ENABLED"]
        done = subprocess.run(
            [*command, sys.executable, str(job), str(out), "--steps", "3"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        results.append(json.loads(out.read_text()))
    assert results[0]["losses"] == results[1]["losses"]
    run = tmp_path / "prof" / "r"
    (window,) = profile_spans(run)
    assert window["a"]["rl.profile.step"] == 2 and window["a"]["rl.profile.backend"] == "torch"
    events = _trace(run / window["a"]["rl.profile.path"])
    (umbrella,) = [s for s in spans(run) if s["n"] == "step" and s["a"].get("rl.step") == 2]
    assert any(e["name"].startswith("aten::") for e in events)
    assert all(umbrella["b"] / 1000 - 1 <= e["abs_ts"] <= umbrella["e"] / 1000 + 1 for e in events)


def test_auto_captures_the_next_step_of_the_culprit_not_the_rank_that_waited(tmp_path: Path) -> None:
    """steps=auto, two ranks meeting in a collective each step, rank 1 slow at step 12: both ranks' step 12 is a
    spike, and the capture is of a later step on rank 1 (the rank that waited least), never on rank 0."""
    (tmp_path / "barrier").mkdir()
    env = loop_env(
        tmp_path / "t",
        {
            "LENS_RL_OTEL_PROFILE": "steps=auto,backend=torch,max_windows=4",
            "LOOP_BARRIER_DIR": str(tmp_path / "barrier"),
            "LOOP_INNER": "5",
            "LOOP_PAUSE_S": "0.05",
            "OMP_NUM_THREADS": "1",
        },
    )
    procs = [start_loop(0, 30, env), start_loop(1, 30, env, "12", "3.0")]
    for proc in procs:
        finish(proc, timeout=900)
    windows = profile_spans(tmp_path / "t" / "r1")
    flagged = [w for w in windows if w["a"]["rl.profile.reason"].startswith("auto: step 12 took ")]
    assert [w["rank"] for w in flagged] == [1], [(w["rank"], w["a"]["rl.profile.reason"]) for w in windows]
    assert flagged[0]["a"]["rl.profile.step"] > 12
    assert Path(tmp_path / "t" / "r1" / flagged[0]["a"]["rl.profile.path"]).is_file()


def test_auto_captures_a_worker_rank_of_the_driver_job_with_the_torch_profiler(tmp_path: Path) -> None:
    """A driver and two trainer workers, rank 1 computing long before the step-12 collective: the driver's spike
    is captured by the real torch.profiler on trainer rank 1, a Chrome trace in the run folder."""
    run = auto_job(loop_env(tmp_path / "t", {"LENS_RL_OTEL_PROFILE": "steps=auto,backend=torch,max_windows=4"}), "1")
    flagged = [w for w in profile_spans(run) if w["a"]["rl.profile.reason"].startswith("auto: step 12 took ")]
    assert [w["a"]["rl.profile.path"].split("-step")[0] for w in flagged] == ["profiles/trainer-1"], flagged
    assert flagged[0]["a"]["rl.profile.backend"] == "torch"
    assert "traceEvents" in json.loads(gzip.decompress((run / flagged[0]["a"]["rl.profile.path"]).read_bytes()))


@pytest.mark.parametrize("shape", ["worker", "driver"])
def test_a_torch_capture_counts_only_its_own_cost_as_overhead(tmp_path: Path, shape: str) -> None:
    """A torch capture of step 2, on a worker whose phases carry their step (no umbrella: the window is their
    sibling) and on the driver (the window under the step umbrella, stopped inside it): the span rl.profile is
    overhead with its rl.step, yet goodput's overhead is the capture's start and stop only; productive time, walls, step rows and
    the critical path are the job's with the window left out; the refresh cache and Perfetto agree."""
    extra = {"LOOP_FLAT": "1"} if shape == "worker" else {"LOOP_DRIVER": "1"}
    env = loop_env(
        tmp_path / "t",
        {"LENS_RL_OTEL_PROFILE": "steps=2-2,backend=torch", "LOOP_PAUSE_S": "0.05", "OMP_NUM_THREADS": "1", **extra},
    )
    finish(start_loop(0, 4, env))
    run = tmp_path / "t" / "r1"
    (window,) = profile_spans(run)
    assert window["a"]["rl.step"] == 2 and window["a"]["rl.profile.backend"] == "torch"
    parent = {s["s"]: s for s in spans(run)}.get(window.get("p"))
    assert (parent is None) if shape == "worker" else (parent is not None and parent["n"] == "step")
    if parent is not None:  # (the driver's window, its stopping and writing too, inside the step)
        assert parent["b"] <= window["b"] <= window["e"] <= parent["e"]
    check_capture_is_overhead(run, tmp_path / "scratch")
