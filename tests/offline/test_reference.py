"""lens_rl's job figures across attempts against Google's ml-goodput-measurement on the same timelines.

Real drivers (a fresh interpreter per attempt: killed mid-step by ``os._exit``, resumed from a checkpoint
with the same run id) write lens_rl's store and, beside it, what ml-goodput-measurement's recorder is told:
each attempt's start, each step's start, the clean end. Those entries are replayed through its own
``GoodputRecorder`` into an in-memory logger (as its own tests do, ``tests/goodput_test.py``), and its
``GoodputCalculator`` computes the job. Every step is one productive phase, so the semantics meet:
lens_rl's wall vs its total elapsed time, productive vs productive, rerun + restart vs wasted progress
from disruption + infrastructure recovery.

Skipped cleanly without the optional dependency (``pip install ml-goodput-measurement``).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
from tests.integration.attempt_job import run_attempt, timeline

pytestmark = pytest.mark.slow

#: (first step, last step, how it ends, the step it ends in) per attempt; a pause between attempts
TIMELINES = {
    "killed in step 7, resumed from 4": [(0, 7, "exit", 7), (4, 11, "clean", None)],
    "two restarts": [(0, 5, "exit", 5), (3, 7, "exit", 7), (6, 9, "clean", None)],
    "one clean attempt": [(0, 5, "clean", None)],
}
STEP_S = 0.2
PAUSE_S = 0.8


class MemoryLogger:
    """ml-goodput-measurement's logger interface, in memory (its tests' ``MockCloudLogger``)."""

    def __init__(self) -> None:
        from ml_goodput_measurement.src import goodput_utils

        self._stamp = goodput_utils.get_timestamp_from_log_entry
        self.entries: list[tuple[datetime.datetime, dict[str, Any]]] = []
        self.last_entry_info: Any = None

    def write_cloud_logging_entry(self, entry: dict[str, Any]) -> None:
        stamp = self._stamp(entry)
        if stamp is not None:
            self.entries.append((stamp, entry))
            self.last_entry_info = (stamp, stamp)

    def flush(self) -> None:
        pass

    def read_cloud_logging_entries(self, start_time: Any = None, end_time: Any = None, last_entry_info: Any = None):
        def aware(value: Any) -> Any:
            return value.replace(tzinfo=datetime.timezone.utc) if value is not None and value.tzinfo is None else value

        lo, hi = aware(start_time), aware(end_time)
        return [
            entry for stamp, entry in self.entries if (lo is None or stamp > lo) and (hi is None or stamp <= hi)
        ], self.last_entry_info


def reference(entries: list[dict[str, Any]], cache_dir: str) -> dict[str, float]:
    """The job as ml-goodput-measurement's own recorder and calculator see it: total, productive, wasted
    (wasted progress from disruption + infrastructure recovery from disruption), in seconds."""
    from ml_goodput_measurement.src import goodput, goodput_utils

    def at(seconds: float) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)

    logger = MemoryLogger()
    recorder = goodput.GoodputRecorder("lens-rl-job", "log", True, logger)
    for entry in entries:
        if "job_start" in entry:
            recorder.record_job_start_time(at(entry["job_start"]))
        elif "step" in entry:
            recorder.record_step_start_time(entry["step"], at(entry["t"]))
        else:
            recorder.record_job_end_time(at(entry["job_end"]))
    calculator = goodput.GoodputCalculator("lens-rl-job", "log", logger, cache_dir=cache_dir)
    calculator.get_job_goodput(include_badput_breakdown=True)
    details = calculator.get_job_goodput_details()
    badput = details["badput_time"]
    kind = goodput_utils.BadputType
    return {
        "total": details["total_elapsed_time"],
        "productive": details["goodput_time"][goodput_utils.GoodputType.TOTAL],
        "wasted": badput.get(kind.WASTED_PROGRESS_FROM_DISRUPTION, 0.0)
        + badput.get(kind.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, 0.0),
        "disruptions": details["disruption_count"],
    }


def lens(tmp: Path, run_id: str) -> dict[str, float]:
    report = analyze(span_files(tmp / "traces" / run_id), jobs=1)
    why = report["job"]["wasted_reasons"]
    return {
        "total": report["job"]["wall_s"],
        "productive": report["job"]["seconds"]["productive"],
        "wasted": why["rerun"] + why["restart"],
        "disruptions": report["job"]["restarts"],
    }


@pytest.mark.parametrize("name", list(TIMELINES))
def test_job_figures_agree_with_ml_goodput_measurement(name: str, tmp_path: Path) -> None:
    """On the same real timeline, lens_rl's total, productive and wasted (rerun + restart) seconds agree with
    ml-goodput-measurement's total, productive and wasted progress + infrastructure recovery (within 5 %, or
    0.1 s: lens_rl's wall ends at rl.job's end, after the last flush; the reference counts a step from its
    start to the next one's, the loop's few milliseconds between steps included)."""
    pytest.importorskip("ml_goodput_measurement.src.goodput")
    run_id = "job-" + name.split()[0]
    for n, (first, last, end, at) in enumerate(TIMELINES[name]):
        if n:
            time.sleep(PAUSE_S)  # the downtime: the scheduler's restart
        code = run_attempt(str(tmp_path), run_id, first, last, end=end, at=at, step_s=STEP_S)
        assert code == (3 if end == "exit" else 0)
    ours = lens(tmp_path, run_id)
    theirs = reference(timeline(str(tmp_path), run_id), str(tmp_path))
    side_by_side = json.dumps({"lens_rl": ours, "ml-goodput-measurement": theirs})
    (tmp_path / "side_by_side.json").write_text(side_by_side)
    if os.environ.get("GOODPUT_REFERENCE_OUT"):  # the closing note's table: the figures of each timeline
        with open(os.environ["GOODPUT_REFERENCE_OUT"], "a") as out:
            out.write(json.dumps({"timeline": name, "lens_rl": ours, "reference": theirs}) + "\n")
    for key in ("total", "productive", "wasted"):
        assert abs(ours[key] - theirs[key]) <= max(0.05 * theirs[key], 0.1), (key, side_by_side)
    assert ours["disruptions"] == theirs["disruptions"] == len(TIMELINES[name]) - 1, side_by_side
    steps = max(last for _, last, _, _ in TIMELINES[name]) + 1
    assert abs(ours["productive"] - steps * STEP_S) <= 0.1 * steps * STEP_S, side_by_side
