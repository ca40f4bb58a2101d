"""``lens-rl run``'s roles: the driver is the process that runs the training loop, never a short Python
process of the launch script before it; the job's wall starts at the launch; no rank warning on the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import clean_env

LENS_RL = [sys.executable, "-m", "lens_rl"]

#: A training loop of 3 steps, each 0.2 s of productive work: what the job's steps and goodput must say.
LOOP = """
import os, time
from lens_rl import traced_phase

print("loop", os.getpid(), time.time(), flush=True)
started = time.time()
with traced_phase("load_model", bucket="overhead"):  # a phase before the first step: the driver's too
    time.sleep(0.05)
for step in range(1, 4):
    with traced_phase("step", step=step):
        with traced_phase("policy_training", bucket="productive"):
            time.sleep(0.2)
print("elapsed", time.time() - started, flush=True)
"""

SHORT = "import os, time; print('short', os.getpid(), time.time(), flush=True)"


def _run(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``lens-rl run --trace-dir t --run-id r -- command`` in ``tmp_path``, to its end."""
    return subprocess.run(
        [*LENS_RL, "run", "--trace-dir", str(tmp_path / "t"), "--run-id", "r", "--", *command],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _launch_script(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "loop.py").write_text(LOOP)
    return _run(tmp_path, "bash", "-c", f'{sys.executable} -c "{SHORT}"; {sys.executable} loop.py')


def _said(out: str, word: str) -> list[str]:
    return next(line.split()[1:] for line in out.splitlines() if line.startswith(word + " "))


def _header(path: Path) -> dict[str, object]:
    return json.loads(path.read_text().splitlines()[0])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_short_python_process_before_the_loop_is_no_driver(tmp_path: Path) -> None:
    """`bash -c "python -c ...; python loop.py"`: the loop is the driver and the only process in the store (its
    phase before the first step included, no file of another identity); the job's steps, productive seconds and steady-state goodput are the loop's; its wall starts at the launch
    (a `launch` span from before the short process to the loop's init); no rank warning on the terminal."""
    before = time.time()
    out = _launch_script(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "no rank" not in out.stderr and "not traced" not in out.stderr, out.stderr
    short_pid, short_at = _said(out.stdout, "short")
    loop_pid, loop_at = _said(out.stdout, "loop")
    elapsed = float(_said(out.stdout, "elapsed")[0])
    store = tmp_path / "t" / "r"
    spans = sorted(store.glob("spans-*.jsonl"))
    assert [p.name for p in spans] == [f"spans-driver-0-{loop_pid}.jsonl"]  # the short process wrote nothing
    assert sorted(p.name.split("-")[1] for p in store.iterdir()) == ["driver"] * 3  # spans, metrics, live
    assert [_header(spans[0])["role"]] == [row["role"] for row in map(json.loads, spans[0].open()) if "v" in row]
    rows = [json.loads(line) for line in spans[0].read_text().splitlines()[1:]]
    assert [r["n"] for r in rows].count("load_model") == 1
    job = next(r for r in rows if r["n"] == "rl.job")
    launch = next(r for r in rows if r["n"] == "launch")
    assert launch["p"] == job["s"] and launch["b"] == job["b"]
    assert before * 1e9 <= launch["b"] <= float(short_at) * 1e9 < float(loop_at) * 1e9 <= launch["e"]
    report = json.loads(
        subprocess.run(
            [*LENS_RL, "goodput", str(store), "--json"], capture_output=True, text=True, timeout=120, check=True
        ).stdout
    )
    steps = report["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(0.2 <= s["seconds"]["productive"] <= s["wall_s"] for s in steps)
    assert report["steady_state_goodput"] > 0.9  # the loop was all productive
    assert report["job"]["wall_s"] >= elapsed + (float(loop_at) - float(short_at))  # from the launch on
    assert report["attempts"][0]["ended"] == "shutdown"


def test_job_environment_fixes_the_root_the_launch_and_the_attempt(tmp_path: Path) -> None:
    """The job's TRACEPARENT is a new root, in the trace of a TRACEPARENT the job had (kept as the root's
    parent); the launch is lens-rl run's unless the job has one; the attempt follows the store's drivers."""
    from lens_rl.frameworks.run import job_environment
    from lens_rl.lifecycle import launched

    env = job_environment({}, trace_dir=str(tmp_path), run_id="r", claim="/c", launch=1000.5)
    assert env["TRACEPARENT"] == env[launched.ROOT_ENV] and launched.PARENT_ENV not in env
    assert env["LENS_RL_OTEL_LAUNCH_TIME"] == "1000.500000" and env["LENS_RL_OTEL_ATTEMPT"] == "0"
    with pytest.raises(ValueError, match="LENS_RL_OTEL_LAUNCH_TIME"):
        job_environment({"LENS_RL_OTEL_LAUNCH_TIME": "soon"}, run_id="r", launch=1000.5)
    parent = f"00-{'1' * 32}-{'2' * 16}-01"
    queued = {"TRACEPARENT": parent, "SLURM_JOB_START_TIME": str(time.time() - 60)}
    env = job_environment(queued, run_id="r", claim="/c", launch=time.time())
    assert env["TRACEPARENT"].startswith(f"00-{'1' * 32}-") and env["TRACEPARENT"] != parent
    assert env[launched.PARENT_ENV] == parent and "LENS_RL_OTEL_LAUNCH_TIME" not in env  # Slurm's, earlier
    stale = job_environment({"SLURM_JOB_START_TIME": "7"}, run_id="r", launch=1000.5)  # not this attempt's
    assert stale["LENS_RL_OTEL_LAUNCH_TIME"] == "1000.500000"
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "spans-driver-0-1.jsonl").write_text(
        json.dumps({"v": 2, "header": True, "kind": "spans", "role": "driver", "resource": {"rl.attempt": 0}}) + "\n"
    )
    assert job_environment({}, trace_dir=str(tmp_path), run_id="r")["LENS_RL_OTEL_ATTEMPT"] == "1"


RANKED = """
import os, sys, time
from lens_rl import traced_phase

time.sleep(float(sys.argv[1]))
print("rank", os.environ["RANK"], os.getpid(), flush=True)
for step in range(1, 3):
    with traced_phase("step", step=step):
        with traced_phase("policy_training", bucket="productive"):
            time.sleep(0.05)
"""


@pytest.mark.slow
def test_of_ranks_that_all_run_the_loop_rank_zero_is_the_driver(tmp_path: Path) -> None:
    """Two ranks under one lens-rl run (as torchrun starts them): rank 1 reaches its first step first, yet rank 0
    is the driver and rank 1 a worker."""
    (tmp_path / "ranked.py").write_text(RANKED)
    script = f"RANK=1 {sys.executable} ranked.py 0 & RANK=0 {sys.executable} ranked.py 1.0; wait"
    out = _run(tmp_path, "bash", "-c", script)
    assert out.returncode == 0, out.stderr
    pids = {line.split()[1]: line.split()[2] for line in out.stdout.splitlines() if line.startswith("rank ")}
    names = sorted(p.name for p in (tmp_path / "t" / "r").glob("spans-*.jsonl"))
    assert names == sorted([f"spans-driver-0-{pids['0']}.jsonl", f"spans-worker-1-{pids['1']}.jsonl"])


def test_a_nested_run_joins_the_outer_run_or_starts_its_own(tmp_path: Path) -> None:
    """lens-rl run inside a lens-rl run of the same run keeps the outer's claim, root, attempt and launch (one
    job); inside another run's job, it is a run of its own: its claim, a root under the outer's, attempt 0."""
    from lens_rl.frameworks.run import job_environment
    from lens_rl.lifecycle import launched

    outer = job_environment({}, trace_dir=str(tmp_path), run_id="r", claim="/outer", launch=time.time())
    same = job_environment(outer, claim="/inner", launch=time.time() + 5)
    kept = (launched.CLAIM_ENV, "TRACEPARENT", "LENS_RL_OTEL_ATTEMPT", "LENS_RL_OTEL_LAUNCH_TIME")
    assert [same[name] for name in kept] == [outer[name] for name in kept]
    other = job_environment({**outer, "LENS_RL_OTEL_ATTEMPT": "3"}, run_id="s", claim="/inner", launch=1000.5)
    assert other[launched.CLAIM_ENV] == "/inner" and other[launched.PARENT_ENV] == outer["TRACEPARENT"]
    assert other["LENS_RL_OTEL_ATTEMPT"] == "0" and other["LENS_RL_OTEL_LAUNCH_TIME"] == "1000.500000"
    assert job_environment({"PYTHONPATH": ":/opt/x"})["PYTHONPATH"].split(os.pathsep)[1:] == ["", "/opt/x"]


#: A phase before the first step (TRL's data loading), on disk in the lazy worker's file; then the first step makes
#: the process the driver (which adopts that file) and the process is SIGKILLed ``argv[2]`` seconds into it.
KILLED_AFTER_ADOPTION = """
import glob, os, signal, sys, time
from lens_rl import traced_phase

with traced_phase("data_loading"):
    time.sleep(0.01)
deadline = time.time() + 60
while not glob.glob(os.path.join(sys.argv[1], "spans-worker-*.jsonl")) and time.time() < deadline:
    time.sleep(0.01)  # the lazy worker flushes when its last phase ends
with traced_phase("step", step=1):
    time.sleep(float(sys.argv[2]))
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.01, 0.2])
def test_a_driver_killed_right_after_adopting_its_file_keeps_its_spans(tmp_path: Path, delay: float) -> None:
    """A process killed just after its first step made it the driver keeps the phase it had written before:
    one driver file (no leftover, no second copy) holds it once, and the store reads."""
    (tmp_path / "job.py").write_text(KILLED_AFTER_ADOPTION)
    store = tmp_path / "t" / "r"
    out = _run(tmp_path, sys.executable, "job.py", str(store), str(delay))
    assert out.returncode == 137, out.stderr
    assert [p.name.split("-")[1] for p in store.glob("spans-*")] == ["driver"]  # (no side file left either)
    assert _header(next(store.glob("spans-*")))["role"] == "driver"
    from lens_rl.store import iter_rows

    assert [row.n for _, row in iter_rows(next(store.glob("spans-*")))].count("data_loading") == 1
    report = subprocess.run([*LENS_RL, "goodput", str(store), "--json"], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and json.loads(report.stdout)["job"]["seconds"]["overhead"] > 0, report.stderr
