"""The rollup across attempts on hand-written stores whose figures are known exactly: re-runs wasted on the
driver and on every process, the downtime wasted, final runs everywhere, each attempt's warm-up skipped,
how each attempt ended; the same whatever the parallelism, and with two attempts in one file (same pid)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.rollup.attempts import superseded_steps
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.show.table import format_table
from lens_rl.store import span_files
from tests.stores import header, span, write_process


def test_superseded_steps_are_those_a_later_attempt_ran_again() -> None:
    """Each attempt's steps that any later attempt ran; the last attempt's never are."""
    assert superseded_steps({0: {0, 1, 2, 3}, 1: {2, 3, 4}, 2: {4, 5}}) == {0: frozenset({2, 3}), 1: frozenset({4})}
    assert superseded_steps({0: {0, 1}, 1: {2, 3}}) == {}
    assert superseded_steps({3: {1}}) == {}


def _driver(attempt: int, first: int, last: int, t0: float, *, job: str | None, launch: float = 0.0) -> list[Any]:
    """A driver's spans: steps of 10 s from ``t0 + launch`` (a 9 s productive phase each); ``job``: how
    its rl.job ended (None: there is none, the attempt was lost)."""
    label = f"a{attempt}"
    spans = []
    t = t0 + launch
    for step in range(first, last + 1):
        parent = f"{label}-job" if job is not None else None
        spans.append(span("step", t, t + 10, f"{label}-s{step}", parent=parent, step=step))
        spans.append(
            span("policy_training", t, t + 9, f"{label}-p{step}", parent=f"{label}-s{step}", bucket="productive")
        )
        t += 10
    if launch:
        spans.append(span("launch", t0, t0 + launch, f"{label}-launch", parent=f"{label}-job", bucket="overhead"))
    if job is not None:
        row = span("rl.job", t0, t, f"{label}-job")
        if job == "error":
            row["st"], row["sm"] = "ERROR", "RuntimeError: CUDA OOM"
            row["ev"] = [
                {
                    "n": "exception",
                    "ts": int(t * 1e9),
                    "a": {"exception.type": "RuntimeError", "exception.message": "CUDA OOM"},
                }
            ]
        spans.append(row)
    return spans


def _worker(attempt: int, first: int, last: int, t0: float, launch: float = 0.0) -> list[Any]:
    """A trainer's spans: an 8 s productive phase in each driver step (a remote parent)."""
    label = f"w{attempt}"
    t = t0 + launch
    out = []
    for step in range(first, last + 1):
        out.append(
            span(
                "train",
                t,
                t + 8,
                f"{label}-{step}",
                parent=f"a{attempt}-p{step}",
                remote=True,
                bucket="productive",
                step=step,
            )
        )
        t += 10
    return out


def _store(run: Path) -> Path:
    """Attempt 0 ran steps 0-3 and was lost (killed in step 4, nothing of it recorded); 10 s later attempt
    1 launched (2 s of launch), resumed from step 2 and ran 2-5 to a clean end. A trainer beside each."""
    write_process(run, "driver", 0, 100, _driver(0, 0, 3, 0.0, job=None), **{"rl.attempt": 0})
    write_process(run, "lm_policy", 0, 200, _worker(0, 0, 3, 0.0), since_s=0.5, **{"rl.attempt": 0})
    write_process(
        run,
        "driver",
        0,
        101,
        _driver(1, 2, 5, 50.0, job="shutdown", launch=2.0),
        root="a1-job",
        since_s=51,
        **{"rl.attempt": 1},
    )
    write_process(run, "lm_policy", 0, 201, _worker(1, 2, 5, 50.0, launch=2.0), since_s=51.5, **{"rl.attempt": 1})
    return run


def test_reruns_and_downtime_are_wasted_and_every_step_counts_once(tmp_path: Path) -> None:
    """Re-run steps 2-3 of attempt 0 (20 s on the driver) and the downtime 40 s -> 50 s are wasted; the job
    wall runs 0 s -> 92 s; steps 0-5 each once, 2-5 from attempt 1; productive 6 x 9 s."""
    report = analyze(span_files(_store(tmp_path / "r")), jobs=1)
    job = report["job"]
    assert job["wall_s"] == pytest.approx(92.0)
    assert job["wasted_reasons"] == {"rerun": 20.0, "restart": 10.0, "phases": 0.0}
    assert job["seconds"] == {"productive": 54.0, "overhead": 2.0, "idle": 0.0, "wasted": 30.0}
    assert job["unattributed_s"] == pytest.approx(92 - 54 - 2 - 30)  # the steps' last second each
    assert job["restarts"] == 1
    assert report["goodput"] == pytest.approx(54 / 92)
    assert [(r["step"], r["attempt"]) for r in report["steps"]] == [(0, 0), (1, 0), (2, 1), (3, 1), (4, 1), (5, 1)]
    first, second = report["attempts"]
    assert first == {
        "attempt": 0,
        "start_s": 0.0,
        "wall_s": 40.0,
        "first_step": 0,
        "last_step": 3,
        "resumed_from_step": None,
        "rerun_steps": [2, 3],
        "rerun_s": 20.0,
        "downtime_before_s": 0.0,
        "ended": "lost",
        "goodput": pytest.approx(18 / 40),
    }
    assert second["start_s"] == 50.0 and second["downtime_before_s"] == 10.0 and second["ended"] == "shutdown"
    assert second["resumed_from_step"] == 2 and second["rerun_steps"] == []
    assert second["goodput"] == pytest.approx(36 / 42)


def test_every_process_wastes_its_reruns_and_stragglers_see_final_runs(tmp_path: Path) -> None:
    """Attempt 0's trainer: steps 2-3 (16 s) wasted, its productive steps 0-1 only; attempt 1's trainer has
    no waste; the phase table and the compute series count final runs (6 trains of 8 s)."""
    report = analyze(span_files(_store(tmp_path / "r")), jobs=1)
    ranks = {(r["worker_group"], r["attempt"]): r for r in report["ranks"]}
    old, new = ranks[("lm_policy", 0)], ranks[("lm_policy", 1)]
    assert old["seconds"]["wasted"] == 16.0 and old["seconds"]["productive"] == 16.0
    assert new["seconds"]["wasted"] == 0.0 and new["seconds"]["productive"] == 32.0
    train = next(p for p in report["phases"] if p["phase"] == "train")
    assert (train["count"], train["total_s"]) == (6, 48.0)
    training = next(p for p in report["phases"] if p["phase"] == "policy_training")
    assert (training["count"], training["total_s"]) == (6, 54.0)


def test_the_steady_state_skips_each_attempts_first_steps(tmp_path: Path) -> None:
    """warmup_steps=1: steps 0 (attempt 0's first) and 2 (attempt 1's first) are left out."""
    report = analyze(span_files(_store(tmp_path / "r")), jobs=1, warmup_steps=1)
    assert report["steady_state_goodput"] == pytest.approx(4 * 9 / 40)
    lines = format_table(report)
    assert "each attempt's steps after its first 1" in lines


def test_the_table_has_an_attempts_section_and_an_error_names_its_exception(tmp_path: Path) -> None:
    """The table says why time was wasted and how each attempt ended; an attempt that ended in error carries
    the exception's type and message in --json."""
    run = tmp_path / "r"
    write_process(run, "driver", 0, 100, _driver(0, 0, 3, 0.0, job="error"), root="a0-job", **{"rl.attempt": 0})
    write_process(
        run, "driver", 0, 101, _driver(1, 2, 5, 50.0, job="shutdown"), root="a1-job", since_s=50.0, **{"rl.attempt": 1}
    )
    report = analyze(span_files(run), jobs=1)
    assert report["attempts"][0]["ended"] == "error"
    assert report["attempts"][0]["error"] == {"type": "RuntimeError", "message": "CUDA OOM"}
    table = format_table(report)
    assert "wasted: 20.00s re-run steps, 10.00s downtime between attempts" in table
    assert "error (RuntimeError: CUDA OOM); steps 2, 3 run again later (20.00s wasted)" in table
    assert "shutdown; downtime before 10.00s" in table
    assert "attempt 1" in table  # step rows name their attempt


def test_the_rollup_is_the_same_whatever_the_parallelism(tmp_path: Path) -> None:
    """--jobs 2 gives the very same report as one process (the parts merge exactly)."""
    paths = span_files(_store(tmp_path / "r"))
    assert json.dumps(analyze(paths, jobs=2), sort_keys=True) == json.dumps(analyze(paths, jobs=1), sort_keys=True)


def test_two_attempts_in_one_file_under_the_same_pid_are_told_apart(tmp_path: Path) -> None:
    """A restarted container gives the new driver the old pid: both attempts append to one file, the second
    under its own header; the rollup sees two attempts."""
    run = tmp_path / "r"
    path = write_process(run, "driver", 0, 7, _driver(0, 0, 3, 0.0, job=None), **{"rl.attempt": 0})
    later = header("driver", 0, 7, since_s=50.0, root="a1-job", **{"rl.attempt": 1})
    with path.open("a") as handle:
        handle.write(json.dumps(later) + "\n")
        for row in _driver(1, 2, 5, 50.0, job="shutdown"):
            handle.write(json.dumps(row) + "\n")
    report = analyze(span_files(run), jobs=1)
    assert [a["attempt"] for a in report["attempts"]] == [0, 1]
    assert report["job"]["wasted_reasons"]["rerun"] == 20.0
    assert report["job"]["wasted_reasons"]["restart"] == 10.0


def test_the_critical_path_walks_each_steps_final_run(tmp_path: Path) -> None:
    """Each step once on the critical path; a re-run step's path is its final run's (attempt 1's trainer)."""
    report = analyze(span_files(_store(tmp_path / "r")), jobs=1)
    steps = report["critical_path"]["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4, 5]
    assert all(s["critical_s"] == pytest.approx(10.0) for s in steps)
    train = next(p for p in report["critical_path"]["phases"] if p["phase"] == "train")
    assert train["critical_s"] == pytest.approx(6 * 8.0)


def test_one_attempt_launched_twice_covers_its_first_start_in_the_job_and_its_row(tmp_path: Path) -> None:
    """A launch that failed before its loop (its data-prep worker wrote 0-3 s, no driver: still attempt 0),
    then the same run again with its loop from 10 s (2 s launch, steps 0-1 to 32 s): the job covers the
    first start to the last end, 32 s, and its one attempt's row says the same wall and goodput."""
    run = tmp_path / "r"
    prep = [span("data_prep", 0.0, 3.0, "prep", bucket="overhead")]
    write_process(run, "data_prep", 0, 90, prep, since_s=0.0, **{"rl.attempt": 0})
    driver = _driver(0, 0, 1, 10.0, job="shutdown", launch=2.0)
    write_process(run, "driver", 0, 100, driver, root="a0-job", since_s=11, **{"rl.attempt": 0})
    report = analyze(span_files(run), jobs=1)
    job, (attempt,) = report["job"], report["attempts"]
    assert job["wall_s"] == pytest.approx(32.0) and report["goodput"] == pytest.approx(18 / 32)
    assert (attempt["wall_s"], attempt["goodput"]) == (job["wall_s"], job["goodput"])


def test_the_report_timeline_colours_a_superseded_run_wasted_and_the_final_run_by_its_buckets(tmp_path: Path) -> None:
    """Steps 2-3 on the report's timeline: attempt 0's runs of them (re-run later: wasted, as every figure
    counts them) are drawn wasted on both its processes; attempt 1's final runs keep their productive colour."""
    pytest.importorskip("plotly")
    from lens_rl.offline.run.timeline import page_data

    data = page_data(span_files(_store(tmp_path)), steps=(2, 3), jobs=1)
    buckets: dict[tuple[int, str], set[Any]] = {}
    for item in data.timeline:
        if item["bucket"] is not None:
            buckets.setdefault((item["attempt"], item["group"]), set()).add(item["bucket"])
    assert buckets[(0, "driver")] == buckets[(0, "lm_policy")] == {"wasted"}
    assert buckets[(1, "driver")] == buckets[(1, "lm_policy")] == {"productive"}


def test_the_report_draws_every_rank_of_a_restarted_group_of_20_each_attempt_apart(tmp_path: Path) -> None:
    """20 trainer ranks, restarted once (40 processes): a group of 20 ranks is not aggregated (that is for
    above 32 ranks), and each rank's process of each attempt is a row of its own, named with its attempt."""
    pytest.importorskip("plotly")
    from lens_rl.offline.show.report import build_report
    from tests.offline.test_report import figures

    run = tmp_path / "run"
    write_process(run, "driver", 0, 100, _driver(0, 0, 3, 0.0, job=None), **{"rl.attempt": 0})
    write_process(
        run, "driver", 0, 101, _driver(1, 2, 5, 50.0, job="shutdown"), root="a1-job", since_s=50, **{"rl.attempt": 1}
    )
    for rank in range(20):
        for attempt, (first, last, t0) in enumerate(((0, 3, 0.0), (2, 5, 50.0))):
            spans = [{**s, "s": f"{s['s']}-r{rank}"} for s in _worker(attempt, first, last, t0)]
            pid = 1000 + 100 * attempt + rank
            write_process(run, "lm_policy", rank, pid, spans, since_s=t0 + 0.5, **{"rl.attempt": attempt})
    chart = figures(build_report(span_files(run), jobs=1))["seconds-per-rank"]
    labels = chart["data"][0]["y"]
    assert not any("mean of" in label for label in labels)
    assert {f"lm_policy {rank} (attempt {a})" for rank in range(20) for a in (0, 1)} <= set(labels)
    assert len(labels) == len(set(labels)) == 2 + 40
    table = format_table(analyze(span_files(run), jobs=1))  # (the table too: 20 ranks, every process a row)
    assert "lowest goodput" not in table
    assert all(f"lm_policy rank {rank} " in table for rank in range(20)), table
