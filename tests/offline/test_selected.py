"""``lens-rl goodput --steps A-B``: every per-step figure covers the selected steps (headline, phases, worker
groups, ranks), the job-wide ones say so, through the refresh cache as read cold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.rollup.selected import cut_gpu_steps
from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
from tests.conftest import lens
from tests.gpu_stores import write_scripted_job
from tests.stores import grow_store, scale_module, span, write_process

#: per step k (1..4): the driver's generate k s and train 3 s in a 10 s umbrella; the trainer's train k s
STEPS = range(1, 5)


def _store(run: Path, cut_short: int | None = None) -> None:
    """A driver and a trainer with known per-step phase times, and a start-up phase outside every step;
    step ``cut_short``'s umbrella never written (its phases carry their step)."""
    driver = [span("setup", 0, 1, "su", bucket="overhead")]
    trainer = [span("load", 0, 2, "ld", bucket="overhead")]
    for k in STEPS:
        t = 10 * k
        under: dict[str, Any] = {"step": k} if k == cut_short else {"parent": f"s{k}"}
        if k != cut_short:
            driver.append(span("step", t, t + 10, f"s{k}", step=k))
        driver.append(span("generate", t, t + k, f"g{k}", bucket="productive", **under))
        driver.append(span("train", t + 5, t + 8, f"t{k}", bucket="productive", **under))
        trainer.append(span("train", t + 5, t + 5 + k, f"wt{k}", bucket="productive", step=k))
        trainer.append(span("sync", t + 9, t + 9.5, f"ws{k}", bucket="overhead", step=k))
    write_process(run, "driver", 0, 1, driver)
    write_process(run, "trainer", 0, 2, trainer)


def _goodput(root: Path, *extra: str) -> Any:
    out = lens("goodput", str(root), *extra)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _phase(report: Any, group: str, name: str) -> Any:
    return next(p for p in report["phases"] if p["worker_group"] == group and p["phase"] == name)


def test_steps_2_3_figures_are_the_sums_over_steps_2_and_3(tmp_path: Path) -> None:
    """--json --steps 2-3: the headline, phase, group and rank figures are the sums over steps 2 and 3 only
    (start-up and the other steps out); the job row stays job-wide; the cache answers as --no-cache."""
    _store(tmp_path / "traces" / "r")
    cold = _goodput(tmp_path / "traces", "--json", "--steps", "2-3", "--no-cache")
    assert _goodput(tmp_path / "traces", "--json", "--steps", "2-3") == cold  # (the cache made)
    assert _goodput(tmp_path / "traces", "--json", "--steps", "2-3") == cold  # (and read)
    report = json.loads(cold)
    picked = report["selection"]
    assert picked["steps"] == [2, 3] and picked["complete_steps"] == 2
    assert picked["wall_s"] == 20.0 and picked["seconds"]["productive"] == (2 + 3) + 2 * 3
    assert report["goodput"] == picked["goodput"] == 11 / 20
    assert report["job"]["wall_s"] > 40 and "job" in picked["job_wide"]  # (the job row: start-up included)
    generate, train = _phase(report, "driver", "generate"), _phase(report, "trainer", "train")
    assert (generate["count"], generate["total_s"], generate["exclusive_s"]) == (2, 5.0, 5.0)
    assert (train["count"], train["total_s"], train["mean_s"], train["share"]) == (2, 5.0, 2.5, 0.25)
    assert train["share_of"] == "group steps wall" and train["p95_s"] == 3.0  # (its spans of 2 and 3 s)
    assert not any(p["phase"] in ("setup", "load") for p in report["phases"])  # (outside every step)
    (rank,) = [r for r in report["ranks"] if r["worker_group"] == "trainer"]
    assert rank["seconds"] == {"productive": 5.0, "overhead": 1.0, "idle": 14.0, "wasted": 0.0}
    assert rank["wall_s"] == 20.0 and rank["goodput"] == 0.25
    (driver,) = [r for r in report["ranks"] if r["worker_group"] == "driver"]
    assert driver["seconds"] == picked["seconds"]  # (the driver's own steps: the headline's seconds)
    (group,) = [g for g in report["worker_groups"] if g["worker_group"] == "trainer"]
    assert group["seconds"] == rank["seconds"] and group["processes"] == 1


def test_the_table_says_the_figures_cover_the_selected_steps(tmp_path: Path) -> None:
    """The table's headline and its steps row say the figures cover steps 2-3, and which stay job-wide."""
    _store(tmp_path / "traces" / "r")
    table = _goodput(tmp_path / "traces", "--steps", "2-3")
    assert "productive over the wall of steps 2-3; figures cover these steps" in table
    assert "the job row is job-wide, start-up included" in table
    assert any(line.startswith("steps 2-3") and "55.0%" in line for line in table.splitlines())


def test_steps_all_keeps_the_whole_job(tmp_path: Path) -> None:
    """--steps all: every step row, the job-wide headline and phases (start-up included), no selection."""
    _store(tmp_path / "traces" / "r")
    report = json.loads(_goodput(tmp_path / "traces", "--json", "--steps", "all"))
    assert "selection" not in report and report["goodput"] == report["job"]["goodput"]
    assert [s["step"] for s in report["steps"]] == list(STEPS)
    assert _phase(report, "driver", "setup")["count"] == 1 and _phase(report, "trainer", "train")["count"] == 4
    assert "whole job's wall" in _goodput(tmp_path / "traces", "--steps", "all")


def test_a_range_outside_the_run_is_a_clear_error(tmp_path: Path) -> None:
    """--steps 50-60 of a run of steps 1-4: one line naming the run's steps, exit 2, no traceback."""
    _store(tmp_path / "traces" / "r")
    out = lens("goodput", str(tmp_path / "traces"), "--json", "--steps", "50-60")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--steps 50-60 selects no step: the run's steps are 1-4" in out.stderr


def test_a_selection_reads_the_same_in_process_and_through_the_cache(tmp_path: Path) -> None:
    """analyze(steps=...) through the refresh cache equals a cold read, and a partly overlapping range counts
    only the steps the run has."""
    run = tmp_path / "r"
    _store(run)
    cold = analyze(span_files(run), jobs=1, steps=(3, 9))
    warm = analyze(span_files(run), jobs=1, steps=(3, 9), cache=str(tmp_path / "c"))
    assert json.dumps(warm, sort_keys=True, default=str) == json.dumps(cold, sort_keys=True, default=str)
    assert cold["selection"]["complete_steps"] == 2 and cold["selection"]["wall_s"] == 20.0
    assert _phase(cold, "trainer", "train")["total_s"] == 3 + 4


def test_the_gpu_section_covers_the_selected_steps_and_says_so(tmp_path: Path) -> None:
    """--steps 1-1 of a job with GPU samples: the GPU step rows are step 1's, no GPU figure is named job-wide,
    the GPU goodput line is over the steps' GPU-seconds (compared with the steps' clock goodput), and the cache
    answers as --no-cache."""
    write_scripted_job(tmp_path / "traces" / "r")
    cold = _goodput(tmp_path / "traces", "--json", "--steps", "1-1", "--no-cache")
    assert _goodput(tmp_path / "traces", "--json", "--steps", "1-1") == cold
    report = json.loads(cold)
    assert [row["step"] for row in report["gpu"]["steps"]] == [1]
    assert not any(part.startswith("gpu") for part in report["selection"]["job_wide"])
    table = _goodput(tmp_path / "traces", "--steps", "1-1")
    gpu_line = next(line for line in table.splitlines() if line.startswith("GPU goodput"))
    assert "over the steps' 38.00 GPU-seconds, 2 GPUs" in gpu_line and "job-wide" not in gpu_line
    assert f"the clock's: {report['goodput'] * 100:.1f}%" in gpu_line


def test_cut_gpu_steps_keeps_the_rows_of_the_range() -> None:
    """The GPU section's step rows outside A..B (and steps that are no integers) are left out; without a
    selection, or a GPU section, the report is as it was."""
    report: dict[str, Any] = {"gpu": {"steps": [{"step": 1}, {"step": 2}, {"step": "x"}, {"step": 3}]}}
    assert cut_gpu_steps(report, (2, 3))["gpu"]["steps"] == [{"step": 2}, {"step": 3}]
    assert cut_gpu_steps({"job": 1}, (2, 3)) == {"job": 1}
    assert len(cut_gpu_steps(report, None)["gpu"]["steps"]) == 2


def test_a_selected_step_that_never_ended_is_out_of_every_figure(tmp_path: Path) -> None:
    """--steps 3-4 where step 4 has no umbrella (the driver was killed in it): the headline, phases and ranks
    cover step 3 alone, as the step figures do."""
    run = tmp_path / "r"
    _store(run, cut_short=4)
    report = analyze(span_files(run), jobs=1, steps=(3, 4))
    assert [s["step"] for s in report["steps"] if s["incomplete"]] == [4]
    assert report["selection"]["complete_steps"] == 1 and report["selection"]["wall_s"] == 10.0
    assert _phase(report, "driver", "generate")["count"] == 1 and _phase(report, "trainer", "train")["total_s"] == 3.0


def test_the_drivers_concurrent_phases_count_once_in_its_rank_row(tmp_path: Path) -> None:
    """A driver whose generation thread runs beside its trainer (6 s and 6 s overlapping in an 8 s step):
    under --steps its rank row counts each instant once, as the headline does (8 s, not 12 s)."""
    run = tmp_path / "r"
    spans = []
    for k in (1, 2):
        t = 10 * k
        spans.append(span("step", t, t + 10, f"s{k}", step=k))
        spans.append(span("generate", t, t + 6, f"g{k}", parent=f"s{k}", bucket="productive"))
        spans.append(span("train", t + 2, t + 8, f"t{k}", parent=f"s{k}", bucket="productive"))
    write_process(run, "driver", 0, 1, spans)
    report = analyze(span_files(run), jobs=1, steps=(2, 2))
    (driver,) = report["ranks"]
    assert driver["seconds"]["productive"] == report["selection"]["seconds"]["productive"] == 8.0
    assert _phase(report, "driver", "generate")["exclusive_s"] == 6.0  # (phase rows: each its own time)


@pytest.mark.slow
def test_a_grown_store_and_a_job_of_three_attempts_read_through_the_cache_as_cold(tmp_path: Path) -> None:
    """--steps A-B through the refresh cache of a store that grew (each file's new lines merged into its kept
    part) and of a resumed job of three attempts (re-run steps out) prints what --no-cache prints."""
    grow_store(tmp_path / "a" / "r", 0, 12)
    _goodput(tmp_path / "a", "--json", "--steps", "3-8")  # (the cache made)
    grow_store(tmp_path / "a" / "r", 12, 20)
    for window in ("3-8", "10-15"):
        warm = _goodput(tmp_path / "a", "--json", "--steps", window)
        assert warm == _goodput(tmp_path / "a", "--json", "--steps", window, "--no-cache")
    grown = json.loads(warm)
    assert _phase(grown, "lm_policy", "train")["count"] == 9 * 6  # (9 workers, a train a step, steps 10-15)
    scale = scale_module()
    scale.synthesize_attempts(tmp_path / "b", 20_000, 6)
    first = json.loads(_goodput(tmp_path / "b", "--json"))
    rerun = first["attempts"][0]["rerun_steps"]
    window = f"{rerun[0]}-{rerun[-1] + 3}"
    _goodput(tmp_path / "b", "--json", "--steps", window)
    scale.append_attempt_steps(tmp_path / "b", 20_000, 6, 10)
    warm = _goodput(tmp_path / "b", "--json", "--steps", window)
    assert warm == _goodput(tmp_path / "b", "--json", "--steps", window, "--no-cache")
    assert json.loads(warm)["selection"]["complete_steps"] == len(rerun) + 3
