"""The driver's view over the wall: phases of one process that ran at once (threads, async tasks) count once."""

from __future__ import annotations

from pathlib import Path

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
from tests.stores import span, write_process


def _overlapped(run: Path, group: str = "driver") -> dict:
    """A driver step of 0.5 s: training over all of it, a generation thread 0.4 s inside it."""
    write_process(
        run,
        group,
        0,
        1,
        [
            span("generation", 0.05, 0.45, "g", parent="s", bucket="productive"),
            span("policy_training", 0.0, 0.5, "t", parent="s", bucket="productive"),
            span("step", 0.0, 0.5, "s", step=1),
        ],
    )
    return analyze(span_files(run), jobs=1)


def test_a_generation_thread_beside_the_trainer_is_not_counted_twice(tmp_path: Path) -> None:
    """0.4 s of generation inside 0.5 s of training on the driver: 0.5 s productive, goodput 1.0 for the step
    and the job (not 1.8), while the phase rows keep each span's own seconds."""
    report = _overlapped(tmp_path / "r1")
    step = report["steps"][0]
    assert step["seconds"]["productive"] == pytest.approx(0.5) and step["goodput"] == pytest.approx(1.0)
    assert report["job"]["seconds"]["productive"] == pytest.approx(0.5)
    assert report["goodput"] == pytest.approx(1.0) and report["steady_state_goodput"] is None
    rows = {r["phase"]: r["exclusive_s"] for r in report["phases"]}
    assert rows["generation"] == pytest.approx(0.4) and rows["policy_training"] == pytest.approx(0.5)


def test_overlap_of_two_buckets_goes_to_productive_first(tmp_path: Path) -> None:
    """A checkpoint (overhead) 1-3 s beside training 0-2 s: productive 2 s, overhead only its 1 s alone; the
    buckets add up to the covered wall."""
    write_process(
        tmp_path / "r1",
        "driver",
        0,
        1,
        [
            span("policy_training", 0.0, 2.0, "t", parent="s", bucket="productive"),
            span("checkpointing", 1.0, 3.0, "c", parent="s", bucket="overhead"),
            span("step", 0.0, 4.0, "s", step=1),
        ],
    )
    step = analyze(span_files(tmp_path / "r1"), jobs=1)["steps"][0]
    assert step["seconds"] == {"productive": 2.0, "overhead": 1.0, "idle": 0.0, "wasted": 0.0}
    assert step["unattributed_s"] == 1.0 and step["goodput"] == pytest.approx(0.5)


def test_a_worker_keeps_its_per_thread_seconds(tmp_path: Path) -> None:
    """The resource view of a worker sums its threads' exclusive seconds (the table says so): unchanged."""
    report = _overlapped(tmp_path / "r1", group="rollout")
    assert report["worker_groups"][0]["seconds"]["productive"] == pytest.approx(0.9)


def test_a_phase_that_outlives_its_step_counts_inside_the_step_only(tmp_path: Path) -> None:
    """Step 0 (0-10 s) whose generation runs 5-15 s (a thread outliving its step), step 1 (10-20 s) training
    10-12 s: step 0 reads 5 s productive and 5 s unattributed, goodput 0.5 (it read 10 s productive beside 5 s
    unattributed in a 10 s wall: 1.0), step 1 2 s; through the cache, the answer of a cold read."""
    import json

    from tests.conftest import lens

    run = tmp_path / "r1"
    rows = [
        span("step", 0, 10, "s0", step=0),
        span("generation", 5, 15, "g0", bucket="productive", parent="s0", step=0),
        span("step", 10, 20, "s1", step=1),
        span("policy_training", 10, 12, "t1", bucket="productive", parent="s1", step=1),
    ]
    write_process(run, "driver", 0, 1, rows, role="driver")
    steps = {s["step"]: s for s in analyze(span_files(run), jobs=1)["steps"]}
    assert steps[0]["seconds"]["productive"] == pytest.approx(5.0) and steps[0]["unattributed_s"] == pytest.approx(5)
    assert steps[0]["goodput"] == pytest.approx(0.5) and steps[0]["wall_s"] == pytest.approx(10.0)
    assert steps[1]["seconds"]["productive"] == pytest.approx(2.0) and steps[1]["unattributed_s"] == pytest.approx(8)
    looks = [lens("goodput", str(run), "--json", *extra) for extra in ((), (), ("--no-cache",))]
    assert all(look.returncode == 0 for look in looks), [look.stderr for look in looks]
    answers = [{k: v for k, v in json.loads(look.stdout).items() if k != "elapsed_s"} for look in looks]
    assert answers[0] == answers[1] == answers[2]
