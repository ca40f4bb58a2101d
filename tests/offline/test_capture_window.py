"""A profiler capture's span ``rl.profile`` (bucket ``overhead``, its ``rl.step``) on hand-written stores: its
window is the profiled step's time, not the capture's; ``lens-rl goodput`` (totals, step rows, critical path,
the refresh cache) counts as overhead only the capture's own cost (its children ``rl.profile.start`` /
``rl.profile.stop``), on a worker (the window hangs from a driver phase in another process) and on the driver
(under the step umbrella), and a store written before the span carried a bucket reads the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.run.timeline import window_file
from lens_rl.store import span_files
from tests.devices.profile_helpers import goodput, rewritten
from tests.stores import span, write_process

WINDOW = {"rl.profile.step": 0, "rl.profile.backend": "torch", "rl.profile.reason": "config"}


def _worker_run(run: Path) -> None:
    """A driver step (0-4 s) whose training phase calls a worker; the worker's step 0 is profiled: its window
    (0.05-3.5 s) hangs from the driver's phase as the worker's phases do, starting costs 0.55 s, stopping 0.3 s."""
    write_process(
        run,
        "driver",
        0,
        1,
        [
            span("rl.job", 0, 5, "job"),
            span("step", 0, 4, "s", parent="job", step=0),
            span("policy_training", 0, 3.6, "t", parent="s", bucket="productive"),
        ],
        root="job",
        role="driver",
    )
    write_process(
        run,
        "lm_policy",
        0,
        2,
        [
            span("rl.profile.start", 0.05, 0.6, "w0", parent="w", bucket="overhead", step=0),
            span("train", 0.6, 2.0, "f", parent="t", remote=True, bucket="productive", step=0),
            span("optimizer", 2.0, 3.2, "o", parent="t", remote=True, bucket="productive", step=0),
            span("rl.profile.stop", 3.2, 3.5, "w1", parent="w", bucket="overhead", step=0),
            span("rl.profile", 0.05, 3.5, "w", parent="t", remote=True, bucket="overhead", step=0, **WINDOW),
        ],
    )


def _driver_run(run: Path) -> None:
    """The driver's step 0 (0-4 s) profiled: its window (0.1-4.2 s) under the umbrella, starting costs 0.9 s,
    stopping (after the umbrella ended, as the step's end closes it) 0.2 s."""
    write_process(
        run,
        "driver",
        0,
        1,
        [
            span("rl.profile.start", 0.1, 1.0, "w0", parent="w", bucket="overhead", step=0),
            span("forward", 1.0, 3.0, "f", parent="s", bucket="productive"),
            span("wait", 3.0, 3.9, "i", parent="s", bucket="idle"),
            span("rl.profile.stop", 4.0, 4.2, "w1", parent="w", bucket="overhead", step=0),
            span("rl.profile", 0.1, 4.2, "w", parent="s", bucket="overhead", step=0, **WINDOW),
            span("step", 0, 4, "s", parent="job", step=0),
            span("rl.job", 0, 5, "job"),
        ],
        root="job",
        role="driver",
    )


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    """What the capture's window must leave as it is: the job's seconds and wall, the step rows, the critical path."""
    keys = ("job", "steps", "worker_groups", "ranks", "stragglers", "critical_path", "pipeline", "step_time")
    return {key: report[key] for key in keys}


def _overhead(report: dict[str, Any]) -> float:
    """The overhead seconds of every process (a worker's are in its group's row: the job's view is the driver's)."""
    return float(sum(group["seconds"]["overhead"] for group in report["worker_groups"]))


@pytest.mark.parametrize(("make", "cost"), [(_worker_run, 0.85), (_driver_run, 1.1)], ids=["worker", "driver"])
def test_a_capture_window_counts_only_its_own_cost_as_overhead(tmp_path: Path, make: Any, cost: float) -> None:
    """Goodput of a store with a capture window: overhead is the capture's cost (start + stop), not the window;
    productive time, walls, step rows and the critical path are those of the store with the window left out;
    a store whose window has no bucket nor step (written before) reads the same."""
    run = tmp_path / "r"
    make(run)
    profiled = analyze(span_files(run), jobs=1)
    excluded = analyze(span_files(rewritten(run, tmp_path / "excluded" / "r", drop=True)), jobs=1)
    before = analyze(span_files(rewritten(run, tmp_path / "before" / "r", drop=False)), jobs=1)
    assert _overhead(profiled) == pytest.approx(cost)
    assert _figures(profiled) == _figures(excluded)
    assert before == profiled
    on_path = {p["phase"] for p in profiled["critical_path"]["phases"]}
    assert "rl.profile" not in on_path and "rl.profile.start" in on_path  # (the capture's cost, never the window)


@pytest.mark.parametrize(("make", "group", "cut"), [(_worker_run, "lm_policy", 3), (_driver_run, "driver", 6)])
def test_the_refresh_cache_reads_a_capture_window_as_a_cold_read_does(
    tmp_path: Path, make: Any, group: str, cut: int
) -> None:
    """``lens-rl goodput --json`` of a file cut short (the window's spans, or the umbrella they hang from, not yet
    written), then twice after it grew (a refresh, then from the cache), and with ``--no-cache``: one answer, the
    window's time not counted as overhead."""
    run = tmp_path / "traces" / "r"
    make(run)
    path = next(run.glob(f"spans-{group}-*.jsonl"))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:cut]))
    goodput(run)
    with path.open("a") as out:
        out.write("".join(lines[cut:]))
    warm, again, cold = goodput(run), goodput(run), goodput(run, "--no-cache")
    assert (run / ".lens_rl-cache").is_dir()
    assert warm == cold and again == cold
    assert _overhead(cold) == pytest.approx(0.85 if group == "lm_policy" else 1.1)


def test_the_reports_timeline_draws_a_capture_window_as_a_container(tmp_path: Path) -> None:
    """The report's timeline of the profiled step draws the window with no bucket (as an umbrella, under the
    phases it holds, never an overhead bar over them) and its start and stop as overhead."""
    run = tmp_path / "r"
    _driver_run(run)
    drawn = {item["name"]: item for item in window_file(next(run.glob("spans-*.jsonl")), (0, 0), 100, None)}
    assert drawn["rl.profile"]["bucket"] is None and drawn["rl.profile"]["attrs"]["rl.step"] == 0
    assert drawn["rl.profile.start"]["bucket"] == drawn["rl.profile.stop"]["bucket"] == "overhead"
    assert drawn["forward"]["bucket"] == "productive"


def test_a_window_with_no_children_under_a_step_with_no_other_is_no_path(tmp_path: Path) -> None:
    """A step umbrella whose one child is a capture window with no start or stop span of its own (a store cut
    short): the step's critical path is its own time, the window claims none of it."""
    run = tmp_path / "r"
    write_process(
        run,
        "driver",
        0,
        1,
        [
            span("rl.job", 0, 5, "job"),
            span("step", 0, 4, "s", parent="job", step=0),
            span("rl.profile", 0.1, 3.9, "w", parent="s", bucket="overhead", step=0, **WINDOW),
        ],
        root="job",
        role="driver",
    )
    report = analyze(span_files(run), jobs=1)
    (step,) = report["critical_path"]["steps"]
    assert step["by_phase"] == {"driver step": pytest.approx(4.0)}
    assert report["job"]["seconds"]["overhead"] == 0.0
