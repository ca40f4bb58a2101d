"""``lens-rl run``'s signals: a terminal's Ctrl-C reaches the job once (the terminal already sent it to the
job's process group), SIGTERM and SIGHUP sent to ``lens-rl run`` are forwarded once, and a job killed by a
signal kills ``lens-rl run`` by the same signal (a shell then reports ``128 + N``)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import clean_env

LENS_RL = [sys.executable, "-m", "lens_rl"]

#: A job that counts the signal it is given, then says how many it got and exits 0.
COUNTING = """
import os, signal, sys, time
got = []
signal.signal(signal.{name}, lambda *a: got.append(1))
if len(sys.argv) > 1:
    os.setpgid(0, 0)  # a job that leaves lens-rl run's process group (some launchers do)
print("ready", flush=True)
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.5)  # a second copy of the signal, if any, arrives in this time
print("count", len(got), flush=True)
"""


def _counting(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"count_{name}.py"
    path.write_text(COUNTING.replace("{name}", name))
    return path


def _ctrl_c_on_a_pty(job: Path, trace_dir: Path) -> tuple[str, int]:
    """Run lens-rl run on a new pty as its foreground job, type one Ctrl-C once the job is ready; what the
    terminal showed and lens-rl run's wait status."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own on the pty, lens-rl run in its foreground group
        try:
            os.chdir(job.parent)
            os.execve(
                sys.executable,
                [*LENS_RL, "run", "--trace-dir", str(trace_dir), "--", sys.executable, str(job)],
                clean_env(),
            )
        finally:
            os._exit(127)
    seen, sent = b"", False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    data = os.read(fd, 4096)
                except OSError:  # the pty closed: the job is over
                    break
                if not data:
                    break
                seen += data
            if not sent and b"ready" in seen:
                time.sleep(0.2)  # the job waits in its loop, as a training job does between two lines
                os.write(fd, b"\x03")  # what the terminal does on Ctrl-C: SIGINT to its foreground group
                sent = True
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    return seen.decode(errors="replace"), status


@pytest.mark.slow
def test_a_terminals_ctrl_c_reaches_the_job_once() -> None:
    """One Ctrl-C typed on a real terminal is counted once by the job, round after round (it is not
    forwarded again to a job that shares lens-rl run's foreground process group); lens-rl run exits 0 with
    the job."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        job = _counting(Path(tmp), "SIGINT")
        for _ in range(4):
            shown, status = _ctrl_c_on_a_pty(job, Path(tmp) / "t")
            counts = [line.split()[-1] for line in shown.splitlines() if "count" in line]
            assert counts == ["1"], shown
            assert os.waitstatus_to_exitcode(status) == 0, shown


@pytest.mark.slow
def test_a_terminal_signal_is_forwarded_to_a_job_in_a_group_of_its_own(tmp_path: Path) -> None:
    """A job that left lens-rl run's process group gets a Ctrl-C sent to lens-rl run's group through lens-rl
    run, once."""
    proc = subprocess.Popen(
        [*LENS_RL, "run", "--trace-dir", str(tmp_path / "t"), "--", sys.executable, str(_counting(tmp_path, "SIGINT"))]
        + ["own-group"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # lens-rl run's group: what a terminal's foreground group would be
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split() == ["count", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_are_forwarded_once_and_a_killed_job_kills_lens_rl_run_alike(
    tmp_path: Path, signame: str
) -> None:
    """SIGTERM / SIGHUP sent to lens-rl run alone reach the job once (a job that handles it exits with its own
    status); a job killed by it kills lens-rl run by the same signal, after its last line."""
    signum = getattr(signal, signame)
    killed = textwrap.dedent(
        f"""
        import signal, time
        signal.signal(signal.{signame}, signal.SIG_DFL)
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    for command, expected in (([str(_counting(tmp_path, signame))], 0), (["-c", killed], -signum)):
        proc = subprocess.Popen(
            [*LENS_RL, "run", "--trace-dir", str(tmp_path / "t"), "--", sys.executable, *command],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            start_new_session=True,  # a signal to lens-rl run alone, as `kill PID` sends it
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == expected, err
        assert "lens-rl run:" in err.splitlines()[-1]  # its last line is out before it goes
        if expected == 0:
            assert out.split() == ["count", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGINT", "SIGQUIT"])
@pytest.mark.parametrize("ignored", [False, True])
def test_sigint_and_sigquit_not_from_a_terminal_are_forwarded_once(tmp_path: Path, signame: str, ignored: bool) -> None:
    """With no terminal (a batch job, a launcher, ``timeout -s INT``), SIGINT / SIGQUIT sent to lens-rl run
    alone reach a job in its process group once, as they would reach the job run bare, also when they were
    ignored at start (a non-interactive shell's ``cmd &``) and the job installed a handler of its own."""
    signum = getattr(signal, signame)

    def start() -> None:
        if ignored:
            signal.signal(signum, signal.SIG_IGN)

    proc = subprocess.Popen(
        [*LENS_RL, "run", "--trace-dir", str(tmp_path / "t"), "--", sys.executable, str(_counting(tmp_path, signame))],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # no controlling terminal: no terminal sent it
        preexec_fn=start,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split() == ["count", "1"]


@pytest.mark.slow
def test_a_sigint_to_lens_rl_run_stops_a_job_that_does_not_handle_it(tmp_path: Path) -> None:
    """``timeout -s INT`` on lens-rl run with no terminal stops the job as it would the bare command: the job
    dies by SIGINT and lens-rl run by SIGINT too, long before the job's own end."""
    job = "import time; print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [*LENS_RL, "run", "--trace-dir", str(tmp_path / "t"), "--", sys.executable, "-c", job],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=50)  # the job would sleep 60 s
    assert proc.returncode == -signal.SIGINT, err


@pytest.mark.slow
def test_shell_reports_128_plus_n_for_a_job_killed_by_a_signal(tmp_path: Path) -> None:
    """Through a shell, a job killed by SIGTERM makes `lens-rl run; echo $?` print 143, as for the job itself."""
    cmd = " ".join([*LENS_RL, "run", "--trace-dir", str(tmp_path / "t"), "--", sys.executable, "-c"])
    out = subprocess.run(
        ["bash", "-c", f"{cmd} 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'; echo status $?"],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.stdout.split()[-2:] == ["status", "143"], out.stderr


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM)])
def test_the_jobs_status_passes_when_lens_rl_runs_stderr_is_closed(tmp_path: Path, script: str, status: int) -> None:
    """With nobody reading lens-rl run's stderr (a dead ``tee``, an ssh session gone) its last line cannot be
    written, and the job's status still passes through: 3 stays 3, a job killed by SIGTERM kills it alike."""
    read, write = os.pipe()
    os.close(read)
    command = [*LENS_RL, "run", "--trace-dir", str(tmp_path / "t"), "--", "sh", "-c", script]
    proc = subprocess.Popen(command, env=clean_env(), stderr=write, stdout=subprocess.DEVNULL, cwd=tmp_path)
    os.close(write)
    assert proc.wait(timeout=120) == status


#: A job in a process group of its own that says whether it was stopped for a while (Ctrl-Z, then `fg`).
STOPPED = """
import os, time
os.setpgid(0, 0)
print("ready", flush=True)
last, deadline = time.monotonic(), time.monotonic() + 15
while time.monotonic() < deadline:
    time.sleep(0.02)
    now = time.monotonic()
    if now - last > 0.8:
        print("was stopped", flush=True)
        raise SystemExit(0)
    last = now
print("never stopped", flush=True)
"""

#: A job-control shell in miniature: lens-rl run in a foreground group of its own on the terminal; when it
#: stops, wait a second, then continue it (`fg`) and report its status.
SHELL = """
import os, signal, sys, time
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
try:  # (as a shell does: both sides set the group; the child may have exec'd already: EACCES, done)
    os.setpgid(pid, pid)
except PermissionError:
    pass
os.tcsetpgrp(0, pid)
_, status = os.waitpid(pid, os.WUNTRACED)
print("lens-rl run stopped" if os.WIFSTOPPED(status) else "lens-rl run ended", flush=True)
if os.WIFSTOPPED(status):
    time.sleep(1.0)
    os.killpg(pid, signal.SIGCONT)
    _, status = os.waitpid(pid, 0)
print("exit", os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.mark.slow
def test_ctrl_z_stops_a_job_in_a_group_of_its_own_with_lens_rl_run(tmp_path: Path) -> None:
    """Ctrl-Z on the terminal stops lens-rl run and a job that left its process group with it, and `fg`
    continues both: the job sees the pause and ends normally."""
    (tmp_path / "stopped.py").write_text(STOPPED)
    (tmp_path / "shell.py").write_text(SHELL)
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(tmp_path)
            argv = ["-m", "lens_rl", "run", "--trace-dir", "t", "--", sys.executable, "stopped.py"]
            os.execve(sys.executable, [sys.executable, "shell.py", *argv], clean_env())
        finally:
            os._exit(127)
    seen, sent = b"", False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # until the shell ends (the pty closes)
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    break
                if not data:
                    break
                seen += data
            if not sent and b"ready" in seen:
                time.sleep(0.2)
                os.write(fd, b"\x1a")  # Ctrl-Z: SIGTSTP to the terminal's foreground group (lens-rl run's)
                sent = True
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    shown = seen.decode(errors="replace")
    assert "lens-rl run stopped" in shown and "was stopped" in shown and "exit 0" in shown, shown
