"""What ``lens-rl profile`` is told back: a step the job refuses (``max_windows`` reached, the process ended) is
named with its reason and the command stops waiting; a timeout exits 1 with the reason; two requests are both
answered; ``steps: auto`` captures the step right after the spike on its culprit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lens_rl.devices.profile_requests import REQUEST_FILE, answers, read_request, write_answer, write_request
from tests.devices.profile_helpers import ROOT, auto_job, cuda_env, finish, profile_spans, run_cli, start_loop

pytestmark = pytest.mark.slow


def _wait_for(path_glob: Path, pattern: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not list(path_glob.glob(pattern)) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_step_refused_for_max_windows_is_named_and_the_command_exits_1_without_waiting(tmp_path: Path) -> None:
    """max_windows=1 and a request for many steps: the first is captured, the rest refused; ``lens-rl profile``
    prints the captured file, says ``max_windows (1) reached`` and exits 1 long before its timeout."""
    env = cuda_env(tmp_path, "max_windows=1,backend=cuda")
    env["LOOP_PAUSE_S"] = "0.2"
    proc = start_loop(0, 400, env)
    run = tmp_path / "t" / "r1"
    try:
        _wait_for(run, "live-*.json")
        began = time.monotonic()
        done = run_cli(str(tmp_path / "t"), "--steps", "0-100000", "--backend", "cuda", "--timeout", "300")
        took = time.monotonic() - began
    finally:
        proc.terminate()
        proc.communicate(timeout=120)
    assert done.returncode == 1, done.stderr
    (printed,) = done.stdout.split()
    assert Path(printed).is_file() and "-step" in printed
    assert "max_windows (1) reached" in done.stderr and "Traceback" not in done.stderr
    assert took < 200, took  # (told, not timed out)


def test_a_request_pending_when_the_job_ends_is_refused_so_the_command_stops(tmp_path: Path) -> None:
    """A request for steps the job never reaches: the job says at its end that it ended before them, and
    ``lens-rl profile`` exits 1 with that reason before its timeout."""
    env = cuda_env(tmp_path, "backend=cuda")
    env["LOOP_PAUSE_S"] = "0.3"
    proc = start_loop(0, 8, env)
    run = tmp_path / "t" / "r1"
    try:
        _wait_for(run, "live-*.json")
        done = run_cli(str(tmp_path / "t"), "--steps", "500-600", "--timeout", "300", timeout=400)
    finally:
        finish(proc)
    assert done.returncode == 1, done.stderr
    assert "the process ended" in done.stderr, done.stderr
    assert not profile_spans(run)


def test_a_timeout_with_steps_captured_so_far_exits_1_with_the_reason(tmp_path: Path) -> None:
    """A process answered step 5 of 5-6 and then nothing: the command prints step 5's file, says it timed out
    before step 6, and exits 1."""
    run = tmp_path / "t" / "r1"
    run.mkdir(parents=True)
    (run / "live-trainer-0-1.json").write_text("{}")
    cli = subprocess.Popen(
        [sys.executable, "-m", "lens_rl", "profile", str(tmp_path / "t"), "--steps", "5-6", "--timeout", "3"],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(run, REQUEST_FILE, timeout=60)
    request = read_request(run / REQUEST_FILE)
    assert request is not None
    write_answer(run, request["id"], "trainer", 0, ["profiles/trainer-0-step5.cuda.json"], [])
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 1, err
    assert out.split() == [str(run / "profiles" / "trainer-0-step5.cuda.json")]
    assert "timed out" in err and "step 6" in err


def test_two_requests_written_one_after_the_other_are_both_answered(tmp_path: Path) -> None:
    """Two users' requests (steps 1 and 3) waiting when the job starts: neither replaces the other, each is
    answered with its own step's capture."""
    run = tmp_path / "t" / "r1"
    run.mkdir(parents=True)
    first = write_request(run, steps=(1, 1), backend="cuda")
    second = write_request(run, steps=(3, 3), backend="cuda")
    env = cuda_env(tmp_path, "")
    env["LOOP_PAUSE_S"] = "0.3"
    finish(start_loop(0, 6, env))
    for request, step in ((first, 1), (second, 3)):
        (answer,) = answers(run, request)
        assert answer["files"] == [f"profiles/trainer-0-step{step}.cuda.json"] and not answer["errors"], answer


def test_auto_captures_the_very_next_step_when_the_culprit_is_the_process_itself(tmp_path: Path) -> None:
    """steps=auto on one rank, step 8 slow among millisecond steps: the capture is step 9 (planned in the
    process at step 8's end, no request file), with the reason naming step 8."""
    env = cuda_env(tmp_path, "steps=auto,backend=cuda")
    finish(start_loop(0, 14, env, "8", "1.0"))
    (window,) = profile_spans(tmp_path / "t" / "r1")
    assert window["a"]["rl.profile.step"] == 9, window["a"]
    assert window["a"]["rl.profile.reason"].startswith("auto: step 8 took ")


def test_auto_on_another_rank_captures_its_next_step_or_says_it_had_begun(tmp_path: Path) -> None:
    """Two ranks meeting each step, rank 1 slow at step 8: rank 0 names rank 1 for step 9 by a request it
    reads at its next step boundary; the capture is rank 1's step 9, or a later one whose reason says step 9
    had begun."""
    (tmp_path / "barrier").mkdir()
    env = cuda_env(tmp_path, "steps=auto,backend=cuda")
    env.update({"LOOP_BARRIER_DIR": str(tmp_path / "barrier"), "LOOP_PAUSE_S": "0.3"})
    procs = [start_loop(0, 14, env), start_loop(1, 14, env, "8", "1.5")]
    for proc in procs:
        finish(proc)
    flagged = [w for w in profile_spans(tmp_path / "t" / "r1") if "step 8 took" in w["a"]["rl.profile.reason"]]
    assert [w["rank"] for w in flagged] == [1], flagged
    step, reason = flagged[0]["a"]["rl.profile.step"], flagged[0]["a"]["rl.profile.reason"]
    assert step == 9 or (step > 9 and "step 9 had begun" in reason), (step, reason)


@pytest.mark.parametrize("marked", ["1", "0"])
def test_auto_captures_the_worker_rank_that_waited_least_across_groups_not_the_driver(
    tmp_path: Path, marked: str
) -> None:
    """A driver's step 12 slow because trainer worker rank 1 computed long before a collective (its wait marked
    idle, or left inside the compute phase): the capture is on trainer rank 1 (the rank that waited least, in
    another group than the driver deciding), never on the driver or rank 0."""
    run = auto_job(cuda_env(tmp_path, "steps=auto,backend=cuda,max_windows=4"), marked)
    windows = profile_spans(run)
    flagged = [w for w in windows if w["a"]["rl.profile.reason"].startswith("auto: step 12 took ")]
    assert [w["a"]["rl.profile.path"].split("-step")[0] for w in flagged] == ["profiles/trainer-1"], [
        (w["a"]["rl.profile.path"], w["a"]["rl.profile.reason"]) for w in windows
    ]
    step, reason = flagged[0]["a"]["rl.profile.step"], flagged[0]["a"]["rl.profile.reason"]
    assert step == 13 or (step > 13 and "step 13 had begun" in reason), (step, reason)


def test_one_process_refusing_does_not_end_the_wait_while_another_captures(tmp_path: Path) -> None:
    """Rank 0 has used its windows (config steps 0-1, max_windows=2), rank 1 has not: ``--steps next`` for
    both: rank 0 refuses at once, rank 1 captures its next step, and the command prints that file and exits 0."""
    env = cuda_env(tmp_path, "steps=0-1,ranks=0,max_windows=2,backend=cuda")
    env["LOOP_PAUSE_S"] = "0.3"
    procs = [start_loop(rank, 40, env) for rank in (0, 1)]
    run = tmp_path / "t" / "r1"
    try:
        deadline = time.monotonic() + 120
        while len(profile_spans(run)) < 2 and time.monotonic() < deadline:  # (rank 0's two windows written)
            time.sleep(0.1)
        done = run_cli(str(tmp_path / "t"), "--steps", "next", "--backend", "cuda", "--timeout", "120", timeout=300)
    finally:
        for proc in procs:
            finish(proc)
    assert done.returncode == 0, done.stderr
    (printed,) = done.stdout.split()
    assert "/trainer-1-step" in printed and Path(printed).is_file()
    assert "max_windows (2) reached" in done.stderr  # (rank 0's answer, said too)


def _both_running(run: Path, count: int = 2) -> None:
    deadline = time.monotonic() + 120
    while len(list(run.glob("live-*.json"))) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def _ask_next(tmp_path: Path, procs: list[Any], timeout_s: int, before: Any = None) -> tuple[Any, float]:
    """Once both loops run (``before()`` then, if given), ``lens-rl profile --steps next`` with ``timeout_s``; its
    result and how long it took. The loops are ended after, whatever happened."""
    try:
        _both_running(tmp_path / "t" / "r1")
        if before is not None:
            before()
        began = time.monotonic()
        done = run_cli(str(tmp_path / "t"), "--steps", "next", "--timeout", str(timeout_s), timeout=300)
        return done, time.monotonic() - began
    finally:
        for proc in procs:
            proc.terminate()
            proc.communicate(timeout=120)


def test_every_process_asked_is_waited_for_so_a_late_capture_is_printed_too(tmp_path: Path) -> None:
    """A driver with short steps and a worker with long ones, ``--steps next`` for every process: the command
    waits for the worker's capture (written well after the driver's) and prints both files, exit 0."""
    env = cuda_env(tmp_path, "backend=cuda")
    procs = [
        start_loop(0, 400, {**env, "LOOP_DRIVER": "1", "LOOP_PAUSE_S": "0.1"}),
        start_loop(1, 400, {**env, "LOOP_PAUSE_S": "2.5"}),
    ]
    done, _took = _ask_next(tmp_path, procs, 200)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.split()
    assert len(printed) == 2 and all(Path(name).is_file() for name in printed), done.stdout
    assert any("/trainer-1-step" in name for name in printed) and not any("/trainer-0-" in n for n in printed)


def test_a_process_killed_meanwhile_is_not_waited_for(tmp_path: Path) -> None:
    """Two workers, one killed as the request is written: the command prints the other's capture and exits 0
    once the killed one's heartbeat is stale, long before its timeout."""
    env = cuda_env(tmp_path, "backend=cuda")
    env["LOOP_PAUSE_S"] = "0.3"
    procs = [start_loop(rank, 400, env) for rank in (0, 1)]
    done, took = _ask_next(tmp_path, procs, 250, before=procs[1].kill)
    assert done.returncode == 0, done.stderr
    (printed,) = done.stdout.split()
    assert "/trainer-0-step" in printed and Path(printed).is_file()
    assert took < 200, took


def test_a_timeout_names_the_process_that_did_not_answer_and_prints_the_captures(tmp_path: Path) -> None:
    """Rank 1 stuck between steps (never at a boundary): the command times out with exit 1, prints rank 0's
    capture and names rank 1 (its pid) as not answered."""
    env = cuda_env(tmp_path, "backend=cuda")
    procs = [start_loop(0, 400, {**env, "LOOP_PAUSE_S": "0.2"}), start_loop(1, 2, {**env, "LOOP_PAUSE_S": "600"})]
    done, _took = _ask_next(tmp_path, procs, 30)
    assert done.returncode == 1, done.stderr
    (printed,) = done.stdout.split()
    assert "/trainer-0-step" in printed and Path(printed).is_file()
    assert "timed out after 30s; not answered: trainer rank 1 (pid " in done.stderr, done.stderr
    assert f"(pid {procs[1].pid})" in done.stderr and "Traceback" not in done.stderr
