"""``lens-rl watch``: a frame shows the headline, the processes by group from their heartbeats, the last steps
and the suspected hangs; nothing recorded says so; on a real pty ``--once`` prints a frame and the live view
quits cleanly on Ctrl-C."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.offline.test_status import beat, phase
from tests.stores import grow_store

pytest.importorskip("rich")


def _render(run: Path) -> str:
    from rich.console import Console

    from lens_rl.offline.show.watch import frame

    console = Console(width=140, record=True, file=open(os.devnull, "w"))
    console.print(frame(run, jobs=1))
    return console.export_text()


def _now(path: Path, age_s: float = 0.1) -> None:
    """A heartbeat written ``age_s`` ago, as a live process writes it (the helper's clock is fixed)."""
    content = json.loads(path.read_text())
    shift = time.time_ns() - content["written_ns"]
    content["written_ns"] += shift - int(age_s * 1e9)
    for entry in content["open"]:
        entry["start_ns"] += shift
    path.write_text(json.dumps(content))


def test_a_frame_shows_the_run_its_processes_and_a_hung_rank(tmp_path: Path) -> None:
    """Goodput and step rows from the spans (through the cache), a group per row from the heartbeats, and the
    hung rank in the alarms with its phase and how long it is open."""
    run = tmp_path / "r"
    grow_store(run, 0, 12)
    for rank in range(3):
        hung = rank == 2
        _now(
            beat(
                run,
                "lm_policy",
                rank,
                100 + rank,
                open_phases=[phase("policy_training", 900.0 if hung else 2.0, hung=hung)],
            )
        )
    _now(beat(run, "driver", 0, 1, open_phases=[phase("step", 3.0)]))
    text = _render(run)
    assert "goodput" in text and "the last 8 steps" in text
    assert "processes" in text and "lm_policy" in text
    assert "suspected hangs" in text and "HUNG" in text and "policy_training" in text
    assert re.search(r"\b(899|9[0-5]\d)\.\d\ds", text)  # open for 900 s (as read a moment later, even loaded)


def test_a_healthy_run_says_so_and_an_empty_folder_says_nothing_is_recorded(tmp_path: Path) -> None:
    """Running processes only: the all-clear line; a folder with no span and no heartbeat file says so."""
    run = tmp_path / "r"
    grow_store(run, 0, 3)
    _now(beat(run, "lm_policy", 0, 100))
    assert "no suspected hang, no stale process" in _render(run)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "nothing recorded yet" in _render(empty)


def _pty_run(args: list[str], *, interrupt_after: float | None = None, timeout: float = 60) -> tuple[int, str]:
    """Run the CLI on a real pty (as a terminal user would), optionally sending Ctrl-C; its status and output."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on the pty
        os.execv(sys.executable, [sys.executable, "-m", "lens_rl", *args])
    output = b""
    deadline = time.monotonic() + timeout
    interrupted = False
    while time.monotonic() < deadline:
        if interrupt_after is not None and not interrupted and time.monotonic() > deadline - timeout + interrupt_after:
            os.kill(pid, signal.SIGINT)
            interrupted = True
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            try:
                output += os.read(fd, 65536)
            except OSError:
                pass
            return os.waitstatus_to_exitcode(status), output.decode(errors="replace")
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


@pytest.mark.slow
def test_watch_draws_a_frame_on_a_terminal_and_quits_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """--once on a pty prints the headline, the processes and the last steps; the live view quits on Ctrl-C
    with status 0 and no traceback."""
    run = tmp_path / "traces" / "r"
    grow_store(run, 0, 12)
    code, frame = _pty_run(["watch", str(tmp_path / "traces"), "--once"])
    assert code == 0, frame
    assert "goodput" in frame and "the last 8 steps" in frame and "nothing recorded" not in frame
    code, live = _pty_run(["watch", str(tmp_path / "traces"), "--interval", "0.3"], interrupt_after=4.0)
    assert code == 0, live
    assert "goodput" in live and "Traceback" not in live


@pytest.mark.timeout(180)
def test_watch_once_exits_as_status_does(tmp_path: Path) -> None:
    """``watch --once`` exits 0 when every process is running and 1 when one is stale or hung, as ``status``
    does."""
    import subprocess

    def once(run: Path) -> int:
        out = subprocess.run(
            [sys.executable, "-m", "lens_rl", "watch", "--once", str(run)], capture_output=True, text=True, timeout=120
        )
        assert "Traceback" not in out.stderr, out.stderr
        return out.returncode

    healthy, stale, hung = tmp_path / "ok" / "r", tmp_path / "stale" / "r", tmp_path / "hung" / "r"
    _now(beat(healthy, "lm_policy", 0, 100))
    _now(beat(stale, "lm_policy", 0, 100), age_s=100)
    _now(beat(hung, "lm_policy", 0, 100, open_phases=[phase("policy_training", 900.0, hung=True)]))
    assert [once(healthy), once(stale), once(hung)] == [0, 1, 1]


def test_watch_shows_a_stores_control_characters_escaped(tmp_path: Path) -> None:
    """``watch --once`` on a group and phase named with a screen-clearing escape and a newline, a host with a
    bell, and a group that reads as rich markup: each shown escaped and as written, on one line (they were
    printed raw: the screen cleared, a row forged)."""
    import subprocess

    from tests.conftest import clean_env
    from tests.offline.test_status import FORGED

    run = tmp_path / "r"
    grow_store(run, 0, 3)
    _now(beat(run, FORGED, 0, 100, open_phases=[phase("gen\x1b[1A", 900.0, hung=True)]))
    path = beat(run, "markup", 1, 101)
    content = json.loads(path.read_text())
    content["resource"].update({"host.name": "node\x07", "rl.worker_group": "[/][bold]x"})
    path.write_text(json.dumps(content))
    _now(path, age_s=100)  # stale: in the alarms, with its host
    out = subprocess.run(  # (a wide console: every cell whole)
        [sys.executable, "-m", "lens_rl", "watch", str(run), "--once"],
        capture_output=True,
        text=True,
        env=clean_env({"COLUMNS": "250"}),
        timeout=120,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr  # (1: a hung rank, a stale one)
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout, out.stdout
    assert not any(line.lstrip().startswith("FORGED") for line in out.stdout.splitlines()), out.stdout
    assert "policy\\x1b[2J\\nFORGED" in out.stdout and "gen\\x1b[1A" in out.stdout and "node\\x07" in out.stdout, (
        out.stdout
    )
    assert "[/][bold]x" in out.stdout


def test_watch_refuses_what_status_and_goodput_refuse(tmp_path: Path) -> None:
    """An empty run folder is bad input however it is named (it printed "nothing recorded yet" and exited 0
    when named with --run, while status exits 2 both ways); --jobs 0 or -3 is refused as goodput refuses it."""
    from tests.conftest import lens

    traces = tmp_path / "traces"
    (traces / "empty").mkdir(parents=True)
    for args in ([str(traces / "empty")], [str(traces), "--run", "empty"]):
        watched, status = lens("watch", *args, "--once"), lens("status", *args)
        assert watched.returncode == status.returncode == 2, (args, watched.stdout, watched.stderr)
        assert watched.stderr.count("\n") == 1 and "Traceback" not in watched.stderr, watched.stderr
    run = traces / "r"
    grow_store(run, 0, 3)
    for jobs in ("0", "-3"):
        watched = lens("watch", str(run), "--once", "--jobs", jobs)
        assert watched.returncode == 2 and "--jobs" in watched.stderr and "allowed: 1 or more" in watched.stderr
    assert lens("watch", str(run), "--once", "--jobs", "1").returncode == 0


@pytest.mark.timeout(180)
def test_watch_shows_where_a_killed_process_was_last_seen_as_status_does(tmp_path: Path) -> None:
    """A real worker killed (SIGKILL) inside a phase: ``watch --once`` lists it stale with its pid gone and the
    phase it was last seen in, as ``status`` does, not an empty phase."""
    import subprocess

    from tests.conftest import clean_env, lens

    worker = f"""
import sys, time
import lens_rl
lens_rl.init_telemetry_driver(
    {{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r}, "run_id": "r", "heartbeat_interval_ms": 100}}}},
    "grpo",
)
with lens_rl.traced_phase("step", step=3), lens_rl.traced_phase("policy_training", bucket="productive"):
    print("in", flush=True)
    time.sleep(600)
"""
    child = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert child.stdout is not None and child.stdout.readline() == "in\n"
        deadline = time.monotonic() + 60
        while not any("policy_training" in p.read_text() for p in (tmp_path / "r").glob("live-*.json")):
            assert time.monotonic() < deadline, "no heartbeat with the open phase"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    status = lens("status", str(tmp_path))
    assert "last seen in policy_training" in status.stdout and "pid gone" in status.stdout, status.stdout
    watched = subprocess.run(  # (into a pipe, no COLUMNS: every cell whole, as a log keeps it; rich drew 80 wide)
        [sys.executable, "-m", "lens_rl", "watch", "--once", str(tmp_path)],
        capture_output=True,
        text=True,
        env={k: v for k, v in clean_env().items() if k != "COLUMNS"},
        timeout=120,
    )
    assert watched.returncode == 1, watched.stderr
    assert "…" not in watched.stdout, watched.stdout
    text = " ".join(watched.stdout.split())
    assert "stale, pid gone" in text and "last seen in policy_training" in text, watched.stdout
