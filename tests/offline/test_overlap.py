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
