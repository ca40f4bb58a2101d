"""``lens-rl run -- COMMAND``: the job's exit status and signals pass through, every Python process is woven
by a sitecustomize that chains the one already there, and the store is named at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env

LENS_RL = [sys.executable, "-m", "lens_rl"]

#: A stand-in framework a job imports: its timer is woven by a framework registered from the job's own
#: sitecustomize (what a framework module of lens_rl does, without a real framework installed).
STANDIN = """
__version__ = "1.0"

class Timer:
    def start(self, name):
        pass

    def stop(self, name):
        pass
"""

JOB_SITECUSTOMIZE = """
import os
os.environ["JOB_SITECUSTOMIZE_RAN"] = "yes"
try:
    from lens_rl.frameworks import _base, _registry

    loose = os.environ.get("STANDIN_LOOSE") == "1"  # a start/stop timer's phases: never made current
    phases = _base.OpenPhases(loose=loose)
    steps = _base.StepUmbrella("step", loose=loose)

    def start(original, args, kwargs):
        if args[1] == "step":
            steps.begin()
        else:
            phases.start((id(args[0]), args[1]), args[1])
        return original(*args, **kwargs)

    def stop(original, args, kwargs):
        if args[1] == "step":
            steps.end()
        else:
            phases.stop((id(args[0]), args[1]))
        return original(*args, **kwargs)

    def weave(module, weaver):
        weaver.around(module.Timer, "start", start)
        weaver.around(module.Timer, "stop", stop)

    _registry.register(_base.Framework("standin", "no-such-distribution", ">=1,<2", {"standin_timer": weave}))
    _registry.SUPPORTED = (*_registry.SUPPORTED, "standin")
except ImportError:
    pass
"""

JOB = """
import multiprocessing as mp
import os
import sys
import time

import standin_timer


def one_step(step):
    timer = standin_timer.Timer()
    timer.start("step")
    timer.start("generation")
    time.sleep(0.02)
    timer.stop("generation")
    timer.stop("step")


def child():
    timer = standin_timer.Timer()
    timer.start("reward")  # the child's first phase, before any step: it starts the child's telemetry
    timer.stop("reward")
    one_step(0)


if __name__ == "__main__":
    print("sitecustomize:", os.environ.get("JOB_SITECUSTOMIZE_RAN"), flush=True)
    for step in range(2):
        one_step(step)
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=child)
    proc.start()
    proc.join()
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job folder: the job script, a stand-in framework, and a sitecustomize of the job's own on its path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(JOB_SITECUSTOMIZE)
    (site / "standin_timer.py").write_text(STANDIN)
    (tmp_path / "job.py").write_text(JOB)
    return tmp_path


def _env(job: Path, *, loose: bool = False) -> dict[str, str]:
    """The job's site folder first on the path, then the tree under test (a worktree's, not the venv's);
    ``loose``: the stand-in's phases are a start/stop timer's (never made current)."""
    path = os.pathsep.join(filter(None, [str(job / "site"), os.environ.get("PYTHONPATH")]))
    return clean_env({"PYTHONPATH": path, "STANDIN_LOOSE": "1" if loose else "0"})


def _spans(store: Path) -> list[dict[str, object]]:
    rows = []
    for path in store.glob("spans-*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "n" in row:
                rows.append(row)
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("loose", [False, True], ids=["scoped", "loose"])
def test_run_weaves_every_python_process_and_chains_the_jobs_sitecustomize(job: Path, loose: bool) -> None:
    """The job's own sitecustomize still runs; the driver and a spawned child both record the woven timer's
    phases under step umbrellas in one store, one trace under the job's root: a start/stop timer's loose
    phases too, the first of each process (the driver's step that claims it, the child's bare phase that
    starts it) included; the last line names the store and the command to read it."""
    out = subprocess.run(
        [*LENS_RL, "run", "--trace-dir", str(job / "traces"), "--run-id", "r1", "--", sys.executable, "job.py"],
        cwd=job,
        env=_env(job, loose=loose),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert "sitecustomize: yes" in out.stdout
    store = job / "traces" / "r1"
    assert f"the store is {store}" in out.stderr.replace(str(job / "traces") + "/r1", str(store))
    assert "lens-rl goodput" in out.stderr.splitlines()[-1]
    rows = _spans(store)
    pids = {path.name.rsplit("-", 1)[-1] for path in store.glob("spans-*.jsonl")}
    assert len(pids) == 2  # the driver and the spawned child
    steps = [r for r in rows if r["n"] == "step"]
    assert len(steps) == 3 and all(r["a"]["rl.step"] for r in steps)  # type: ignore[index]
    gens = [r for r in rows if r["n"] == "generation"]
    assert len(gens) == 3 and all(r["a"]["rl.bucket"] == "productive" for r in gens)  # type: ignore[index]
    root = [r for r in rows if r["n"] == "rl.job"]
    assert len(root) == 1 and {r["t"] for r in rows} == {root[0]["t"]}  # one job, one trace
    assert all(r.get("p") for r in rows if r is not root[0])  # (and no other root in it)
    assert [r["p"] for r in rows if r["n"] == "reward"] == [root[0]["s"]]
    # the loop is the driver; the child it spawned opened a step too, later: a worker, under the job's root
    roles = sorted(path.name.split("-")[1] for path in store.glob("spans-*.jsonl"))
    assert roles == ["driver", "worker"]
    (worker,) = store.glob("spans-worker-*.jsonl")
    worker_steps = [json.loads(line) for line in worker.read_text().splitlines()[1:] if '"n":"step"' in line]
    assert [r["p"] for r in worker_steps] == [root[0]["s"]]


@pytest.mark.slow
def test_run_exits_with_the_jobs_status(job: Path) -> None:
    """A job that exits 3 makes lens-rl run exit 3; a command that cannot start is one line and the status env
    and a shell give: 127 not found, 126 not runnable."""
    code = subprocess.run(
        [*LENS_RL, "run", "--trace-dir", str(job / "traces"), "--", sys.executable, "job.py", "3"],
        cwd=job,
        env=_env(job),
        capture_output=True,
        timeout=180,
    )
    assert code.returncode == 3
    missing = subprocess.run(
        [*LENS_RL, "run", "--", "no-such-command-lens-rl"], env=clean_env(), capture_output=True, text=True
    )
    assert missing.returncode == 127 and missing.stderr.count("\n") == 1 and "cannot start" in missing.stderr
    (job / "not-runnable").write_text("#!/bin/sh\n")
    denied = subprocess.run(
        [*LENS_RL, "run", "--", str(job / "not-runnable")], env=clean_env(), capture_output=True, text=True
    )
    assert denied.returncode == 126 and "cannot start" in denied.stderr


def test_run_rejects_an_unknown_framework_with_a_did_you_mean(tmp_path: Path) -> None:
    """--instrument trll is refused before the job starts, naming the flag (not an env var never set) and trl."""
    out = subprocess.run(
        [*LENS_RL, "run", "--instrument", "trll", "--", sys.executable, "-c", "raise SystemExit(7)"],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 2 and "did you mean 'trl'" in out.stderr
    assert "(from --instrument)" in out.stderr and "$LENS_RL" not in out.stderr, out.stderr


def test_job_environment_turns_telemetry_on_and_puts_the_bootstrap_first() -> None:
    """The job's environment: enabled, all frameworks by default, a fixed run id, lens_rl's id generator, the
    bootstrap first on PYTHONPATH with the job's entries kept after it (once)."""
    from lens_rl.frameworks.run import BOOTSTRAP_DIR, job_environment

    env = job_environment({"PYTHONPATH": f"/a{os.pathsep}{BOOTSTRAP_DIR}"}, trace_dir="/x")
    assert env["LENS_RL_OTEL_ENABLED"] == "true" and env["LENS_RL_OTEL_INSTRUMENT"] == "all"
    assert env["LENS_RL_OTEL_TRACE_DIR"] == "/x" and env["LENS_RL_OTEL_RUN_ID"]
    assert env["OTEL_PYTHON_ID_GENERATOR"] == "lens_rl"
    assert env["PYTHONPATH"].split(os.pathsep) == [BOOTSTRAP_DIR, "/a"]
    assert job_environment({"LENS_RL_OTEL_INSTRUMENT": "verl"})["LENS_RL_OTEL_INSTRUMENT"] == "verl"
    assert job_environment({}, instrument="trl", run_id="r9")["LENS_RL_OTEL_RUN_ID"] == "r9"
