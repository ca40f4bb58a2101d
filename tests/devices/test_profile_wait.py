"""Whom ``lens-rl profile`` waits for: every live process its request names until each has answered its last
step (a capture or a refusal); and the ``--steps`` it takes, said exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from lens_rl.cli.inputs import CliError
from lens_rl.cli.profile import _steps
from lens_rl.cli.profile_wait import Named, answered
from tests.devices.profile_helpers import run_cli


def _answer(group: str, rank: int, pid: int, files: list[str], refused: list[list[int]] | None = None) -> dict:
    return {"id": "x", "group": group, "rank": rank, "pid": pid, "files": files, "errors": [], "refused": refused or []}


def test_a_live_process_is_waited_for_until_it_captures_or_refuses_the_last_step() -> None:
    """Two live processes named: one capture is not the end; the other's capture or refusal of the last step is;
    a capture of an earlier step of a range is not."""
    named = Named(live={("driver", 0, 10), ("trainer", 1, 11)}, known={("driver", 0, 10), ("trainer", 1, 11)})
    first = _answer("driver", 0, 10, ["profiles/driver-0-step5.pt.trace.json.gz"])
    assert [who for who, _ in named.waiting([first], "next")] == ["trainer rank 1 (pid 11)"]
    assert not named.waiting([first, _answer("trainer", 1, 11, ["profiles/trainer-1-step4.cuda.json"])], "next")
    assert not named.waiting([first, _answer("trainer", 1, 11, [], [[4, 4]])], "next")
    early = _answer("trainer", 1, 11, ["profiles/trainer-1-step5.cuda.json"])
    ranged = [_answer("driver", 0, 10, ["profiles/driver-0-step6.cuda.json"]), early]
    assert [who for who, _ in named.waiting(ranged, 6)] == ["trainer rank 1 (pid 11)"]
    assert answered(_answer("trainer", 1, 11, [], [[5, 9]]), 6) and not answered(None, "next")


def test_a_process_that_ended_or_went_stale_is_not_waited_for_and_is_named() -> None:
    """A process that took the request and is no longer live is not waited for (and is named as gone); one that
    answered with no heartbeat of its own at all is waited for."""
    named = Named(live={("driver", 0, 10)}, known={("driver", 0, 10), ("trainer", 1, 11)})
    got = [_answer("driver", 0, 10, ["profiles/driver-0-step5.cuda.json"]), _answer("trainer", 1, 11, [])]
    assert not named.waiting(got, "next")
    assert named.gone(got, "next") == ["trainer rank 1 (pid 11)"]
    unknown = _answer("rollout", 0, 12, [])
    assert [who for who, _ in named.waiting([*got, unknown], "next")] == ["rollout rank 0 (pid 12)"]


@pytest.mark.parametrize("text", ["foo", "5-3", "-1", "all", "1-x"])
def test_profile_steps_errors_say_exactly_what_it_takes(text: str) -> None:
    """Every bad ``--steps`` names the value and what profile takes: next, N, A-B with A <= B (never ``all``)."""
    with pytest.raises(CliError) as caught:
        _steps(text)
    said = str(caught.value)
    assert repr(text) in said and "next, N (one step) or A-B (inclusive, A <= B)" in said
    assert "or all" not in said


def test_profile_steps_takes_next_a_step_and_a_range() -> None:
    """``next``, ``7`` and ``3-5`` are read as the request's steps."""
    assert (_steps("next"), _steps("7"), _steps("3-5")) == ("next", (7, 7), (3, 5))


def test_a_run_whose_processes_all_ended_or_none_is_named_is_told_at_once() -> None:
    """Every process ended: nobody will answer (at once); running processes none of which is named: nobody, after
    a few seconds for a starting worker; no heartbeat at all, or a named one running: keep waiting."""
    ended = Named(live=set(), known={("trainer", 0, 10)})
    assert "no process of the run is running (1 ended" in str(ended.nobody(None, None, 0.0))
    other = Named(live=set(), known={("trainer", 0, 10)}, running={("trainer", 0, 10)})
    assert other.nobody("rollout", 1, 0.0) is None
    assert other.nobody("rollout", 1, 60.0) == (
        "no running process matches --group rollout --rank 1; running: trainer rank 0 (pid 10)"
    )
    assert Named().nobody(None, None, 60.0) is None
    named = Named(live={("trainer", 0, 10)}, known={("trainer", 0, 10)}, running={("trainer", 0, 10)})
    assert named.nobody(None, None, 60.0) is None


@pytest.mark.parametrize("named", ["..", ".", "../t", "ELSEWHERE"])
def test_a_run_named_out_of_the_trace_dir_is_no_run_and_no_request_is_written_there(tmp_path: Path, named: str) -> None:
    """``--run`` names a run folder in TRACE_DIR: ``..``, ``.`` or an absolute path is no run of it (exit 2, as
    for any run that is not there), and ``lens-rl profile`` writes no request into TRACE_DIR or out of it."""
    run = tmp_path / "t" / "r1"
    run.mkdir(parents=True)
    (run / "live-trainer-0-1.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    named = str(elsewhere) if named == "ELSEWHERE" else named
    done = run_cli(str(tmp_path / "t"), "--run", named, "--timeout", "2")
    assert done.returncode == 2 and "no run" in done.stderr, done.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*profile-request*"))
    assert written == []
    assert run_cli(str(tmp_path / "t"), "--run", "r1/", "--timeout", "0.5").returncode == 1  # (r1 itself: asked)


@pytest.mark.slow
def test_a_fifo_or_a_deep_document_named_like_an_answer_never_blocks_or_crashes_the_wait(tmp_path: Path) -> None:
    """While ``lens-rl profile`` waits, a FIFO and a document nested past the parser's depth, each named like an
    answer to its request, are no answers: it times out as for no answer (exit 1, the reason said), never
    blocked opening the FIFO, never a traceback."""
    import json
    import os
    import subprocess
    import sys
    import time

    from lens_rl.devices.profile_requests import REQUEST_FILE
    from tests.devices.profile_helpers import ROOT

    run = tmp_path / "t" / "r1"
    (run / "profiles").mkdir(parents=True)
    (run / "spans-trainer-0-1.jsonl").write_text("")
    cli = subprocess.Popen(
        [sys.executable, "-m", "lens_rl", "profile", str(run), "--timeout", "4"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (run / REQUEST_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (request,) = json.loads((run / REQUEST_FILE).read_text())["requests"]
        os.mkfifo(run / "profiles" / f"request-{request['id']}-trainer-0-1.json")
        (run / "profiles" / f"request-{request['id']}-trainer-1-2.json").write_text("[" * 100_000 + "]" * 100_000)
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode == 1 and "no process took request" in err, err[-2000:]
    assert "Traceback" not in err
