"""One job across crashes and resumes, with real processes: drivers killed by ``os._exit`` or SIGKILL
mid-step, ended by an uncaught exception, resumed with the same run id; a Ray job whose two workers die with
their driver; old workers still writing as the new driver starts; a resume that skips ahead; one from
step 0. Read back through the store's headers, ``lens-rl goodput --json``, the table and the report (its
attempts figure drawn in headless Chromium)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lens_rl.store import heads, span_files
from tests.browser import browser
from tests.conftest import run_python
from tests.integration.attempt_job import run_attempt

pytestmark = pytest.mark.slow
STEP_S = 0.15


def goodput_json(run: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(run), "--json"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_job_killed_mid_step_and_resumed_is_one_job(tmp_path: Path) -> None:
    """SIGKILL in step 5, a resume from step 3 with the same run id: the headers say attempts 0 and 1 (the
    resumed driver found the first in the store); steps 3-4 of attempt 0 are wasted (rerun), the downtime
    is wasted (restart), each step counts once, from its final run; attempt 0 was lost, 1 shut down."""
    assert run_attempt(str(tmp_path), "r", 0, 7, end="hang", at=5, step_s=STEP_S, kill=True) == -9
    time.sleep(0.5)
    assert run_attempt(str(tmp_path), "r", 3, 7, step_s=STEP_S) == 0
    run = tmp_path / "traces" / "r"
    attempts = sorted(h.process.attempt for path in span_files(run) for h in heads(path))
    assert attempts == [0, 1]
    report = goodput_json(run)
    first, second = report["attempts"]
    assert (first["ended"], second["ended"]) == ("lost", "shutdown")
    assert first["rerun_steps"] == [3, 4] and first["first_step"] == 0 and second["resumed_from_step"] == 3
    assert second["downtime_before_s"] >= 0.4
    why = report["job"]["wasted_reasons"]
    assert why["rerun"] == pytest.approx(2 * STEP_S, rel=0.25) and why["restart"] >= 0.4 and why["phases"] == 0
    assert report["job"]["seconds"]["wasted"] == pytest.approx(why["rerun"] + why["restart"], abs=1e-5)
    assert report["job"]["restarts"] == 1
    steps = {row["step"]: row["attempt"] for row in report["steps"]}
    assert steps == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
    assert report["job"]["seconds"]["productive"] == pytest.approx(8 * STEP_S, rel=0.1)
    assert report["job"]["wall_s"] >= first["wall_s"] + second["wall_s"] + second["downtime_before_s"] - 0.01
    table = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(run)], capture_output=True, text=True, timeout=120
    ).stdout
    assert "re-run steps" in table and "downtime between attempts" in table
    assert "lost; steps 3, 4 run again later" in table


def test_an_uncaught_exception_ends_the_attempt_in_error_and_the_process_exits_as_before(tmp_path: Path) -> None:
    """The driver raises in step 2: it exits with status 1 and Python's own traceback (the chained hook
    ran), and the attempt ended in error with the exception's type and message, also in the table."""
    job = {
        "trace_dir": str(tmp_path / "traces"),
        "run_id": "e",
        "first": 0,
        "last": 4,
        "step_s": STEP_S,
        "end": "raise",
        "at": 2,
        "timeline": str(tmp_path / "t.jsonl"),
    }
    from tests.integration import attempt_job

    out = run_python(
        f"import runpy, sys; sys.argv = ['job', {json.dumps(job)!r}]; "
        f"runpy.run_path({attempt_job.__file__!r}, run_name='__main__')",
        env={"LENS_RL_OTEL_LAUNCH_TIME": repr(time.time())},
    )
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "RuntimeError: CUDA out of memory in step 2" in out.stderr
    report = goodput_json(tmp_path / "traces" / "e")
    (only,) = report["attempts"]
    assert only["ended"] == "error"
    assert only["error"] == {"type": "RuntimeError", "message": "CUDA out of memory in step 2"}
    table = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(tmp_path / "traces" / "e")],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "error (RuntimeError: CUDA out of memory in step 2)" not in table  # one attempt: no attempts section
    assert report["job"]["restarts"] == 0


def test_a_resume_that_skips_ahead_reruns_nothing_and_one_from_step_0_reruns_everything(tmp_path: Path) -> None:
    """Skip-ahead (0-2 killed by os._exit in 3, then 3-5): no rerun, the downtime wasted. From step 0
    (0-2 lost in 3, then 0-3): every step of attempt 0 is a rerun; steps count once."""
    assert run_attempt(str(tmp_path), "ahead", 0, 5, end="exit", at=3, step_s=STEP_S) == 3
    assert run_attempt(str(tmp_path), "ahead", 4, 5, step_s=STEP_S) == 0
    ahead = goodput_json(tmp_path / "traces" / "ahead")
    assert ahead["job"]["wasted_reasons"]["rerun"] == 0 and ahead["job"]["wasted_reasons"]["restart"] > 0
    assert [a["rerun_steps"] for a in ahead["attempts"]] == [[], []]
    assert [row["step"] for row in ahead["steps"]] == [0, 1, 2, 4, 5]

    assert run_attempt(str(tmp_path), "zero", 0, 5, end="exit", at=3, step_s=STEP_S) == 3
    assert run_attempt(str(tmp_path), "zero", 0, 3, step_s=STEP_S) == 0
    zero = goodput_json(tmp_path / "traces" / "zero")
    assert zero["attempts"][0]["rerun_steps"] == [0, 1, 2]
    assert zero["attempts"][1]["resumed_from_step"] == 0
    assert {row["step"]: row["attempt"] for row in zero["steps"]} == {0: 1, 1: 1, 2: 1, 3: 1}
    assert zero["job"]["wasted_reasons"]["rerun"] == pytest.approx(3 * STEP_S, rel=0.25)


def test_a_ray_job_killed_mid_step_wastes_its_workers_reruns_and_the_report_draws_the_attempts(tmp_path: Path) -> None:
    """A driver with two Ray trainers, SIGKILLed in step 4 and resumed from step 2: each trainer of attempt 0
    has its steps 2-3 as wasted (rerun) seconds, the resumed trainers carry attempt 1, stragglers and steps
    use final runs only; the report's attempts figure is drawn in headless Chromium."""
    assert run_attempt(str(tmp_path), "ray", 0, 5, end="hang", at=4, step_s=0.3, ray=True, kill=True) == -9
    time.sleep(1.0)
    assert run_attempt(str(tmp_path), "ray", 2, 5, step_s=0.3, ray=True) == 0
    run = tmp_path / "traces" / "ray"
    report = goodput_json(run)
    workers = [r for r in report["ranks"] if r["worker_group"] == "lm_policy"]
    assert sorted((r["attempt"], r["rank"]) for r in workers) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for row in workers:
        if row["attempt"] == 0:
            assert row["seconds"]["wasted"] >= 2 * 0.3 * 0.8  # steps 2 and 3 ran again later
            assert row["seconds"]["productive"] == pytest.approx(2 * 0.3 + 0.15, abs=0.2)  # 0, 1, half of 4
        else:
            assert row["seconds"]["wasted"] == 0
    assert report["attempts"][0]["rerun_steps"] == [2, 3]
    page = tmp_path / "r.html"
    out = subprocess.run(
        [sys.executable, "-m", "lens_rl", "report", str(run), "-o", str(page)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    dom = browser(page.as_uri(), "--dump-dom", profile=tmp_path / "profile").stdout
    section = dom[dom.index('<section id="attempts">') :]
    section = section[: section.index("</section>")]
    assert "run, ended: lost" in section and "run, ended: shutdown" in section
    assert "downtime (wasted: restart)" in section and "re-run later (wasted: rerun)" in section
    assert section.count('class="point"') >= 4  # bars drawn: two runs, the downtime, the re-run stretch


def test_old_workers_still_writing_as_the_new_driver_starts_count_no_downtime(tmp_path: Path) -> None:
    """Attempt 0's worker keeps writing steps 2-3 while attempt 1's driver (resumed from step 2) runs: the
    attempts overlap (a note says so, no downtime counted), and the old worker's steps 2-3 are reruns."""
    trace_dir = tmp_path / "traces"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time, lens_rl\n"
            "lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group='lm_policy')\n"
            "for step in range(0, 4):\n"
            "    with lens_rl.traced_phase('policy_training', step=step):\n"
            "        time.sleep(0.4)\n"
            "    lens_rl.flush_telemetry()\n"
            "lens_rl.shutdown_telemetry()\n",
        ],
        env={
            **__import__("tests.conftest", fromlist=["clean_env"]).clean_env(),
            "LENS_RL_OTEL_ENABLED": "1",
            "LENS_RL_OTEL_TRACE_DIR": str(trace_dir),
            "LENS_RL_OTEL_RUN_ID": "o",
            "LENS_RL_OTEL_ATTEMPT": "0",
        },
    )
    time.sleep(0.9)  # the old worker is in its step 2 when the new driver starts
    assert run_attempt(str(tmp_path), "o", 2, 4, step_s=STEP_S, env={"LENS_RL_OTEL_ATTEMPT": "1"}) == 0
    assert worker.wait(timeout=60) == 0
    report = goodput_json(trace_dir / "o")
    assert report["job"]["wasted_reasons"]["restart"] == 0
    assert any("attempts overlap" in note for note in report["notes"])
    (old,) = [r for r in report["ranks"] if r["worker_group"] == "lm_policy"]
    assert old["attempt"] == 0 and old["seconds"]["wasted"] == pytest.approx(2 * 0.4, rel=0.2)


def test_the_readmes_resume_example_makes_one_job_of_two_attempts(tmp_path: Path) -> None:
    """The README's resume.py, run twice as it says: one run, two attempts, steps 4-6 re-run, 0-9 once each."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = readme.split("# resume.py:", 1)[1].split("```", 1)[0]
    (tmp_path / "resume.py").write_text("# resume.py:" + code)
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "resume.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=__import__("tests.conftest", fromlist=["clean_env"]).clean_env(),
        )
    assert out.returncode == 0, out.stderr
    (run,) = (tmp_path / "lens_traces").iterdir()
    report = goodput_json(run)
    assert [a["ended"] for a in report["attempts"]] == ["lost", "shutdown"]
    assert report["attempts"][0]["rerun_steps"] == [4, 5, 6]
    assert [row["step"] for row in report["steps"]] == list(range(10))
