"""Profiler windows in real processes without torch: the cuda backend against a stand-in of the CUDA profiler
API, a missing backend, a request from ``lens-rl profile``, and telemetry off."""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

import pytest

from lens_rl.devices.profile_requests import LOCK_FILE, REQUEST_FILE, write_request
from tests.devices.profile_helpers import (
    check_capture_is_overhead,
    cuda_env,
    finish,
    loop_env,
    losses,
    profile_spans,
    run_cli,
    start_loop,
)

pytestmark = pytest.mark.slow


def test_cuda_backend_starts_and_stops_the_cuda_profiler_once_inside_the_window(tmp_path: Path) -> None:
    """backend=cuda calls cudaProfilerStart and cudaProfilerStop once each, inside the configured step's window."""
    proc = start_loop(1, 5, cuda_env(tmp_path, "steps=2-2,backend=cuda"))
    finish(proc)
    calls = [line.split() for line in (tmp_path / "cuda.log").read_text().splitlines()]
    assert [name for name, _ in calls] == ["cudaProfilerStart", "cudaProfilerStop"]
    (window,) = profile_spans(tmp_path / "t" / "r1")
    assert window["a"]["rl.profile.step"] == 2 and window["a"]["rl.profile.backend"] == "cuda"
    assert window["a"]["rl.profile.path"] == "profiles/trainer-1-step2.cuda.json"
    assert window["b"] <= int(calls[0][1]) <= int(calls[1][1]) <= window["e"]
    note = json.loads((tmp_path / "t" / "r1" / window["a"]["rl.profile.path"]).read_text())
    assert note["backend"] == "cuda" and note["start_ns"] <= note["end_ns"]


def test_a_workers_capture_span_is_overhead_with_its_step_and_counts_only_its_cost(tmp_path: Path) -> None:
    """A worker whose phases carry their step (no umbrella) captures step 2: its span rl.profile is overhead
    with rl.step 2, and goodput counts only the capture's start and stop as overhead (the window's phases
    keep their time), from the cache as cold, Perfetto's event carrying rl.step."""
    env = cuda_env(tmp_path, "steps=2-2,backend=cuda")
    env.update({"LOOP_FLAT": "1", "LOOP_PAUSE_S": "0.05"})
    finish(start_loop(1, 4, env))
    check_capture_is_overhead(tmp_path / "t" / "r1", tmp_path / "scratch")


def test_a_missing_backend_is_one_warning_and_the_job_is_unchanged(tmp_path: Path) -> None:
    """backend=torch in a job without torch: one warning, no window, the same steps and losses as unprofiled."""
    plain = start_loop(0, 4, loop_env(tmp_path / "plain"), python=sys.executable)
    out_plain, _ = finish(plain)
    env = loop_env(tmp_path / "t", {"LENS_RL_OTEL_PROFILE": "steps=1-2,backend=torch"})
    out, err = finish(start_loop(0, 4, env))
    if "torch" in sys.modules or _has_torch():
        pytest.skip("this venv has torch: the missing-backend case needs a venv without it")
    assert losses(out) == losses(out_plain)
    assert err.count("no profiler window") == 1, err
    assert not (tmp_path / "t" / "r1" / "profiles").exists() or not any((tmp_path / "t" / "r1" / "profiles").iterdir())


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def test_a_request_from_lens_rl_profile_captures_the_next_step_of_the_named_rank(tmp_path: Path) -> None:
    """``lens-rl profile --rank 1 --steps next`` while two workers run: only rank 1 captures, and the command
    prints that file and exits 0."""
    env = cuda_env(tmp_path, "")
    env["LOOP_PAUSE_S"] = "0.3"
    procs = [start_loop(rank, 40, env) for rank in (0, 1)]
    try:
        run = tmp_path / "t" / "r1"
        deadline = time.monotonic() + 120
        while not list(run.glob("live-*.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        done = run_cli(str(tmp_path / "t"), "--rank", "1", "--steps", "next", "--backend", "cuda", "--timeout", "120")
    finally:
        for proc in procs:
            finish(proc)
    assert done.returncode == 0, done.stderr
    (printed,) = done.stdout.split()
    windows = profile_spans(run)
    assert [(w["rank"], w["a"]["rl.profile.reason"]) for w in windows] == [(1, "request")]
    assert printed == str(run / windows[0]["a"]["rl.profile.path"])
    assert Path(printed).is_file()


def test_lens_rl_profile_bad_input_and_an_unwritable_run_folder_fail_cleanly(tmp_path: Path) -> None:
    """Bad --steps, --rank or --timeout exit 2 with one line; a run folder the user cannot write exits 2, no
    traceback; nobody answering exits 1 with the reason."""
    run = tmp_path / "t" / "r1"
    run.mkdir(parents=True)
    (run / "live-trainer-0-1.json").write_text("{}")
    for args in (["--steps", "4-3"], ["--steps", "all"], ["--rank", "-1"], ["--timeout", "0"], ["--backend", "nsys"]):
        done = run_cli(str(tmp_path / "t"), *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr
    done = run_cli(str(tmp_path / "t"), "--timeout", "0.5")
    assert done.returncode == 1 and "no process took request" in done.stderr
    if os.geteuid() != 0:  # root writes anywhere
        run.chmod(0o500)
        try:
            done = run_cli(str(tmp_path / "t"), "--timeout", "1")
        finally:
            run.chmod(0o700)
        assert done.returncode == 2 and "cannot write the request" in done.stderr
        assert "Traceback" not in done.stderr


def test_with_telemetry_off_no_request_is_ever_looked_at(tmp_path: Path) -> None:
    """Telemetry off: a request waiting in the run folder is never taken (no answer, no capture), whatever the
    config says."""
    run = tmp_path / "t" / "r1"
    run.mkdir(parents=True)
    write_request(run, steps=(0, 3), backend="cuda")
    env = cuda_env(tmp_path, "steps=0-3,backend=cuda")
    env["LENS_RL_OTEL_ENABLED"] = "false"
    finish(start_loop(0, 4, env))
    assert sorted(p.name for p in run.iterdir()) == sorted([REQUEST_FILE, LOCK_FILE])
    assert not (tmp_path / "cuda.log").exists()


def test_two_processes_on_one_device_never_profile_at_once(tmp_path: Path) -> None:
    """Two ranks sharing a device, both configured for step 2 and meeting at each step's end: their windows
    never overlap; the one that finds the device busy says so (one warning) and goes on (on a loaded machine
    one rank may finish its window before the other's step 2 begins: then both capture, one after the other)."""
    (tmp_path / "barrier").mkdir()
    env = cuda_env(tmp_path, "steps=2-2,backend=cuda")
    env.update({"LOOP_BARRIER_DIR": str(tmp_path / "barrier"), "CUDA_VISIBLE_DEVICES": "0", "LOOP_INNER": "200"})
    procs = [start_loop(rank, 4, env) for rank in (0, 1)]
    errs = [finish(proc)[1] for proc in procs]
    windows = sorted(profile_spans(tmp_path / "t" / "r1"), key=lambda w: w["b"])
    assert windows and all(a["e"] <= b["b"] for a, b in itertools.pairwise(windows)), windows  # never at once
    busy = sum("has a profiler window open in process" in err for err in errs)
    assert len(windows) + busy == 2, (windows, errs)  # each rank either captured or was told the device was busy
    calls = (tmp_path / "cuda.log").read_text().split()
    assert calls[::2] == ["cudaProfilerStart", "cudaProfilerStop"] * len(windows), calls
    assert not list((tmp_path / "t" / "r1" / "profiles").glob(".device-*.lock"))


def test_a_request_left_by_an_earlier_attempt_is_not_taken(tmp_path: Path) -> None:
    """A request written long before the process started (a previous attempt's) is left alone: no capture."""
    run = tmp_path / "t" / "r1"
    run.mkdir(parents=True)
    write_request(run, steps=(0, 3), backend="cuda")
    body = json.loads((run / REQUEST_FILE).read_text())
    body["requests"][0]["written_ns"] -= 2 * 3600 * 10**9
    (run / REQUEST_FILE).write_text(json.dumps(body))
    finish(start_loop(0, 4, cuda_env(tmp_path, "")))
    assert not profile_spans(run)
    assert not (tmp_path / "cuda.log").exists()


def test_a_hand_written_request_of_no_steps_or_no_process_is_left_out_and_the_next_one_served(
    tmp_path: Path,
) -> None:
    """Entries of the request file that name no steps (``[5, 2]``: B < A) or no process (a rank ``"1"``, a bool, a
    group that is no string) are no requests: no process half takes them (an answer with nothing, never
    completed, that would keep ``lens-rl profile`` waiting) nor takes them as "any rank"; a well-formed request
    after them in the same file is captured."""
    run = tmp_path / "t" / "r1"
    run.mkdir(parents=True)
    write_request(run, steps=(0, 3), rank=1, backend="cuda")
    body = json.loads((run / REQUEST_FILE).read_text())
    good = body["requests"][0]
    hostile = [
        {**good, "id": "backwards", "steps": [3, 0]},
        {**good, "id": "rankstr", "rank": "1"},
        {**good, "id": "rankbool", "rank": True},
        {**good, "id": "group", "group": ["trainer"]},
    ]
    (run / REQUEST_FILE).write_text(json.dumps({"requests": [*hostile, good]}))
    finish(start_loop(1, 4, cuda_env(tmp_path, "")))
    answered = sorted(json.loads(p.read_text())["id"] for p in (run / "profiles").glob("request-*.json"))
    assert answered == [good["id"]]
    assert [w["a"]["rl.profile.step"] for w in profile_spans(run)] == [0, 1]


def test_a_capture_of_a_step_captured_before_is_written_beside_it_never_over_it(tmp_path: Path) -> None:
    """A worker restarted (a later attempt, the same group and rank) captures the same step again: its capture is
    ``...-step2-2.<ext>`` beside the first (which was written over, the first window's span then naming the
    second's file), and each window's span names its own file."""
    env = cuda_env(tmp_path, "steps=2-2,backend=cuda")
    finish(start_loop(1, 3, env))
    env["LENS_RL_OTEL_ATTEMPT"] = "1"
    finish(start_loop(1, 3, env))
    run = tmp_path / "t" / "r1"
    paths = sorted(w["a"]["rl.profile.path"] for w in profile_spans(run))
    assert paths == ["profiles/trainer-1-step2-2.cuda.json", "profiles/trainer-1-step2.cuda.json"]
    notes = [json.loads((run / path).read_text()) for path in paths]
    assert notes[0]["start_ns"] > notes[1]["end_ns"]  # (the second capture's file is the later window's)
