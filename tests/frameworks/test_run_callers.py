"""``lens-rl run`` under any launch script: one that sets its own ``PYTHONPATH``, changes folder, retries its
loop after a crash, runs a second ``lens-rl run``, has no ``#!`` line, keeps an empty ``PYTHONPATH`` entry or
names its run with a character the store replaces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from tests.conftest import clean_env

LENS_RL = [sys.executable, "-m", "lens_rl"]
#: The folder that holds the lens_rl under test (a launch script that sets PYTHONPATH names it itself).
REPO = str(Path(lens_rl.__file__).resolve().parents[1])

#: Four steps of 0.2 s productive work; the first run (no ``crashed`` file yet) dies after step 1.
CRASHY = """
import os, sys, time
from lens_rl import traced_phase

for step in range(4):
    with traced_phase("step", step=step):
        with traced_phase("policy_training", bucket="productive"):
            time.sleep(0.2)
    if step == 1 and sys.argv[1:] == ["crash"] and not os.path.exists("crashed"):
        open("crashed", "w").close()
        raise SystemExit(1)
"""

#: Start-up before the loop (its wall starts at the launch), then three steps.
LOOP = """
import os, time
from lens_rl import traced_phase

time.sleep(0.3)
print("loop", os.getpid(), time.time(), flush=True)
for step in range(3):
    with traced_phase("step", step=step):
        with traced_phase("policy_training", bucket="productive"):
            time.sleep(0.05)
"""


def _run(tmp_path: Path, *command: str, args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [*LENS_RL, "run", *args, "--", *command],
        cwd=tmp_path,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _goodput(store: Path) -> dict[str, Any]:
    out = subprocess.run([*LENS_RL, "goodput", str(store), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _drivers(store: Path) -> list[int]:
    """The attempt of each driver file of the store."""
    headers = [json.loads(p.read_text().splitlines()[0]) for p in store.glob("spans-*.jsonl")]
    return sorted(h["resource"]["rl.attempt"] for h in headers if h["role"] == "driver")


@pytest.mark.slow
def test_a_launch_script_that_sets_pythonpath_keeps_the_driver_and_the_launch(tmp_path: Path) -> None:
    """A launch script that sets PYTHONPATH (dropping lens-rl run's bootstrap): the loop is still the driver,
    alone in the store, its wall from the launch on (a `launch` span); one line for the job says the bootstrap
    was lost, however many processes import lens_rl."""
    (tmp_path / "loop.py").write_text(LOOP)
    (tmp_path / "launch.sh").write_text(
        f'#!/bin/sh\nexport PYTHONPATH="$PWD/src:{REPO}"\n'
        f"{sys.executable} -c 'import lens_rl'\nexec {sys.executable} loop.py\n"
    )
    (tmp_path / "launch.sh").chmod(0o755)
    out = _run(tmp_path, "./launch.sh", args=("--trace-dir", "t", "--run-id", "r"))
    assert out.returncode == 0, out.stderr
    store = tmp_path / "t" / "r"
    assert sorted(p.name.split("-")[1] for p in store.glob("spans-*.jsonl")) == ["driver"]
    assert out.stderr.count("lost lens-rl run's bootstrap") == 1, out.stderr
    report = _goodput(store)
    assert report["job"]["view"] == "driver" and [s["step"] for s in report["steps"]] == [0, 1, 2]
    rows = [json.loads(line) for line in next(store.glob("spans-*.jsonl")).read_text().splitlines()[1:]]
    launch = next(r for r in rows if r["n"] == "launch")
    loop_at = float(next(line for line in out.stdout.splitlines() if line.startswith("loop ")).split()[2])
    assert launch["b"] < loop_at * 1e9 <= launch["e"]  # the start-up before the loop is the launch's


@pytest.mark.slow
def test_a_relative_trace_dir_is_lens_rl_runs_whatever_folder_the_job_changes_to(tmp_path: Path) -> None:
    """`--trace-dir t` and a job that changes folder first: the store is `t` beside lens-rl run, and the last
    line names it."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "loop.py").write_text(LOOP)
    out = _run(tmp_path, "sh", "-c", f"cd work && exec {sys.executable} loop.py", args=("--trace-dir", "t"))
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "work" / "t").exists()
    (store,) = (tmp_path / "t").iterdir()
    assert list(store.glob("spans-driver-*.jsonl"))
    assert f"the store is {store};" in out.stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_retry_loop_in_the_launch_script_is_the_next_attempt(tmp_path: Path) -> None:
    """`until python train.py; do :; done`: the run that crashed after step 1 is attempt 0, the retry that
    finished is the driver of attempt 1, and the crashed run's steps 0 and 1 are wasted (re-run)."""
    (tmp_path / "train.py").write_text(CRASHY)
    (tmp_path / "launch.sh").write_text(f"#!/bin/sh\nuntil {sys.executable} train.py crash; do :; done\n")
    (tmp_path / "launch.sh").chmod(0o755)
    out = _run(tmp_path, "./launch.sh", args=("--trace-dir", "t", "--run-id", "r"))
    assert out.returncode == 0, out.stderr
    store = tmp_path / "t" / "r"
    assert _drivers(store) == [0, 1]
    report = _goodput(store)
    assert [(s["step"], s["attempt"]) for s in report["steps"]] == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert [a["attempt"] for a in report["attempts"]] == [0, 1]
    assert report["attempts"][0]["rerun_steps"] == [0, 1]
    assert report["job"]["wasted_reasons"]["rerun"] >= 0.4  # the crashed run's two steps of 0.2 s


@pytest.mark.slow
def test_a_nested_run_of_the_same_run_never_makes_two_drivers_of_one_attempt(tmp_path: Path) -> None:
    """A launch script that trains, then runs its loop again under a second lens-rl run: one run, whose second
    loop is the next attempt's driver (one driver an attempt), its steps the re-run ones."""
    (tmp_path / "train.py").write_text(CRASHY)
    script = f"{sys.executable} train.py && {sys.executable} -m lens_rl run -- {sys.executable} train.py"
    out = _run(tmp_path, "sh", "-c", script, args=("--trace-dir", "t", "--run-id", "r"))
    assert out.returncode == 0, out.stderr
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["r"]
    assert _drivers(tmp_path / "t" / "r") == [0, 1]
    report = _goodput(tmp_path / "t" / "r")
    assert [a["attempt"] for a in report["attempts"]] == [0, 1] and report["attempts"][0]["rerun_steps"] == [0, 1, 2, 3]


def test_a_script_without_a_shebang_runs_with_sh(tmp_path: Path) -> None:
    """An executable script with no `#!` line runs with /bin/sh (as a shell, env or timeout run it), its exit
    status passed through."""
    (tmp_path / "train.sh").write_text('echo "job ran"\nexit 4\n')
    (tmp_path / "train.sh").chmod(0o755)
    out = _run(tmp_path, "./train.sh", "arg", args=("--trace-dir", "t"))
    assert (out.returncode, out.stdout) == (4, "job ran\n"), out.stderr


def test_an_empty_pythonpath_entry_is_still_the_jobs_folder(tmp_path: Path) -> None:
    """`PYTHONPATH=:...` (an empty entry: the current folder) imports the job's module from its folder, as
    without lens-rl run."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "mymod.py").write_text("X = 1\n")
    (tmp_path / "sub" / "job.py").write_text("import mymod\nprint('imported', mymod.X)\n")
    env = clean_env({"PYTHONPATH": f":{REPO}"})
    out = _run(tmp_path, sys.executable, "sub/job.py", args=("--trace-dir", "t"), env=env)
    assert (out.returncode, out.stdout) == (0, "imported 1\n"), out.stderr


def test_a_run_id_the_store_replaces_names_its_real_folder(tmp_path: Path) -> None:
    """`--run-id 'exp 1'` (stored as exp_1): the last line names t/exp_1, and `goodput --run 'exp 1'` reads it."""
    (tmp_path / "loop.py").write_text(LOOP.replace("time.sleep(0.3)", ""))
    out = _run(tmp_path, sys.executable, "loop.py", args=("--trace-dir", "t", "--run-id", "exp 1"))
    assert out.returncode == 0, out.stderr
    assert f"the store is {tmp_path / 't' / 'exp_1'};" in out.stderr.splitlines()[-1]
    read = subprocess.run(
        [*LENS_RL, "goodput", str(tmp_path / "t"), "--run", "exp 1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert read.returncode == 0, read.stderr
    assert [s["step"] for s in json.loads(read.stdout)["steps"]] == [0, 1, 2]


def test_a_job_that_never_loaded_lens_rl_is_told_why_nothing_was_written(tmp_path: Path) -> None:
    """A job whose Python replaced PYTHONPATH and never imported lens_rl (a framework-only job, unwoven): the
    last line says no process loaded lens_rl; a Python job that ran the bootstrap but recorded nothing is not
    told so."""
    lost = _run(tmp_path, "sh", "-c", f"PYTHONPATH=/nowhere {sys.executable} -c pass", args=("--trace-dir", "t"))
    assert lost.returncode == 0 and "no Python process of the job loaded lens_rl" in lost.stderr.splitlines()[-1]
    kept = _run(tmp_path, sys.executable, "-c", "pass", args=("--trace-dir", "t"))
    assert kept.returncode == 0 and "no process wrote" in kept.stderr and "loaded lens_rl" not in kept.stderr, (
        kept.stderr
    )


@pytest.mark.parametrize("how", ["script", "-m lens_rl", "-m lens_rl.cli"])
def test_a_reading_command_in_the_job_keeps_the_never_loaded_hint(tmp_path: Path, how: str) -> None:
    """A reading command run inside a job that never loaded lens_rl (`lens-rl goodput`, `python -m lens_rl
    goodput`, `-m lens_rl.cli`: each imports lens_rl) is lens-rl's own, not the job's: the last line still says
    no process loaded lens_rl."""
    reader = shutil.which("lens-rl", path=os.path.dirname(sys.executable)) if how == "script" else None
    command = f"{reader} goodput t" if how == "script" else f"{sys.executable} {how} goodput t"
    out = _run(
        tmp_path,
        "sh",
        "-c",
        f"PYTHONPATH=/nowhere {sys.executable} -c pass; {command}; true",
        args=("--trace-dir", "t"),
    )
    assert "no Python process of the job loaded lens_rl" in out.stderr.splitlines()[-1], out.stderr


def test_a_reading_command_under_a_pythonpath_the_job_set_says_nothing_of_a_lost_bootstrap(tmp_path: Path) -> None:
    """`lens-rl goodput` run by a launch script that set its own PYTHONPATH needs no bootstrap: no line says the
    job lost it (nor is the one line for the job spent on it), and the last line still says no process loaded
    lens_rl."""
    out = _run(
        tmp_path,
        "sh",
        "-c",
        f"PYTHONPATH={REPO} {sys.executable} -m lens_rl goodput t; true",
        args=("--trace-dir", "t"),
    )
    assert "lost lens-rl run's bootstrap" not in out.stderr, out.stderr
    assert "no Python process of the job loaded lens_rl" in out.stderr.splitlines()[-1], out.stderr
