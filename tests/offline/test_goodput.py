"""Goodput rollup: exclusive time, views, steps, groups and ranks, against known sleeps."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import lens_rl
from lens_rl import traced_phase, with_bucket
from lens_rl.offline.show.table import format_table
from lens_rl.testing import recording
from tests.stores import rollup, rollup_recorded, v1_record


def test_nested_bucketed_span_takes_its_time_from_the_outer_one() -> None:
    """A checkpoint inside training counts once, as overhead; concurrent children are unioned, and on the
    driver's wall their overlap (3-4 s: checkpointing beside the wait) counts once, to the first bucket."""
    recs = [
        v1_record("step", 0, 10, span="s", **{"rl.step": 1}),
        v1_record("policy_training", 0, 8, span="t", parent="s", **{"rl.bucket": "productive"}),
        v1_record("checkpointing", 2, 4, span="c", parent="t", **{"rl.bucket": "overhead"}),
        v1_record("inner", 3, 5, span="i", parent="t"),  # unbucketed wrapper...
        v1_record("wait", 3, 6, span="w", parent="i", **{"rl.bucket": "idle"}),  # ...its bucketed child still counts
    ]
    report = rollup(recs)
    assert report["job"]["seconds"] == {"productive": 4.0, "overhead": 2.0, "idle": 2.0, "wasted": 0.0}
    step = report["steps"][0]
    assert step["seconds"] == report["job"]["seconds"]
    assert {r["phase"]: r["exclusive_s"] for r in report["phases"]}["wait"] == 3.0  # per span, as before
    assert step["step"] == 1 and step["wall_s"] == 10.0 and step["unattributed_s"] == 2.0
    assert report["goodput"] == pytest.approx(4 / 10)  # productive over the wall: the 2 s no bucket covers count too
    assert step["goodput"] == pytest.approx(4 / 10)


def test_driver_view_for_the_job_and_resource_seconds_for_groups() -> None:
    """The job figure uses the driver's spans; groups and ranks sum their own processes."""
    recs = [
        v1_record("generation", 0, 4, span="g", **{"rl.bucket": "productive", "rl.step": 1}),
        v1_record("weight_sync", 4, 5, span="w", **{"rl.bucket": "overhead", "rl.step": 1}),
        v1_record("policy_training", 0, 3, span="p0", group="lm_policy", rank=0, pid=2, **{"rl.bucket": "productive"}),
        v1_record("policy_training", 0, 2, span="p1", group="lm_policy", rank=1, pid=3, **{"rl.bucket": "productive"}),
        v1_record("checkpointing", 2, 3, span="k1", group="lm_policy", rank=1, pid=3, **{"rl.bucket": "overhead"}),
    ]
    report = rollup(recs)
    assert report["job"]["view"] == "driver" and report["goodput"] == pytest.approx(0.8)
    groups = {g["worker_group"]: g for g in report["worker_groups"]}
    assert groups["lm_policy"]["processes"] == 2
    assert groups["lm_policy"]["seconds"]["productive"] == 5.0 and groups["lm_policy"]["seconds"]["overhead"] == 1.0
    ranks = {(r["worker_group"], r["rank"]): r["goodput"] for r in report["ranks"]}
    assert ranks[("lm_policy", 0)] == 1.0 and ranks[("lm_policy", 1)] == pytest.approx(2 / 3)


def test_without_driver_spans_all_processes_are_summed() -> None:
    """With no driver process in the store, the job view sums every process."""
    recs = [
        v1_record("generation", 0, 1, span="a", group="g", pid=5, **{"rl.bucket": "productive"}),
        v1_record("wait", 1, 2, span="b", group="h", pid=6, **{"rl.bucket": "idle"}),
    ]
    report = rollup(recs)
    assert report["job"]["view"] == "all processes" and report["goodput"] == 0.5


def test_real_phases_with_known_sleeps() -> None:
    """Phases recorded live roll up to their slept time, within scheduling noise."""
    with recording(worker_group="driver") as rec:
        with traced_phase("step", step=1):
            with traced_phase("policy_training"):
                time.sleep(0.2)
                with traced_phase("checkpointing"):
                    time.sleep(0.1)
            with with_bucket("idle"), traced_phase("generation"):
                time.sleep(0.1)
            time.sleep(0.05)  # unattributed
        report = rollup_recorded(rec.spans)

    def dur(name: str) -> float:
        span = rec.find(name)
        return (span.end_time - span.start_time) / 1e9

    secs = report["job"]["seconds"]
    # Exact against the spans' own times (load may stretch a sleep, never shrink it).
    assert secs["productive"] == pytest.approx(dur("policy_training") - dur("checkpointing"), abs=1e-5)
    assert secs["overhead"] == pytest.approx(dur("checkpointing"), abs=1e-5)
    assert secs["idle"] == pytest.approx(dur("generation"), abs=1e-5)
    assert secs["productive"] >= 0.2 and secs["overhead"] >= 0.1 and secs["idle"] >= 0.1
    step = report["steps"][0]
    assert step["wall_s"] == pytest.approx(dur("step"), abs=1e-5) and step["wall_s"] >= 0.45
    bucketed = dur("policy_training") + dur("generation")
    assert step["unattributed_s"] == pytest.approx(dur("step") - bucketed, abs=1e-5) and step["unattributed_s"] >= 0.05


# ---------------------------------------------------------------------- issue 11: trust and read


def _job_with_workers(steps: int = 3) -> list[dict]:
    """A driver (start-up 0-10 s, then steps of 10 s) and one worker busy 5 s per step."""
    recs = [
        v1_record("rl.job", 0, 10 + 10 * steps, span="job"),
        v1_record("cluster_setup", 0, 10, span="setup", parent="job", **{"rl.bucket": "overhead"}),
        v1_record("policy.init", 1, 3, span="winit", group="lm_policy", pid=7, **{"rl.bucket": "overhead"}),
    ]
    for i in range(steps):
        t = 10 + 10 * i
        recs += [
            v1_record("step", t, t + 10, span=f"s{i}", parent="job", **{"rl.step": i}),
            v1_record("generation", t, t + 8, span=f"g{i}", parent=f"s{i}", **{"rl.bucket": "productive"}),
            v1_record("weight_sync", t + 8, t + 9, span=f"w{i}", parent=f"s{i}", **{"rl.bucket": "overhead"}),
            v1_record(
                "policy_training",
                t + 1,
                t + 6,
                span=f"pt{i}",
                group="lm_policy",
                pid=7,
                **{"rl.bucket": "productive", "rl.step": i},
            ),
        ]
    return recs


def test_worker_idle_is_measured_over_its_lifetime() -> None:
    """A worker alive from 1 s to 36 s and busy 2 + 3 x 5 s: the rest of its lifetime is idle."""
    report = rollup(_job_with_workers(3))
    worker = next(r for r in report["ranks"] if r["worker_group"] == "lm_policy")
    assert worker["seconds"]["productive"] == 15.0 and worker["seconds"]["overhead"] == 2.0
    assert worker["seconds"]["idle"] == pytest.approx((36 - 1) - 17.0)
    assert worker["wall_s"] == 35.0


def test_two_headline_figures_start_up_and_steady_state() -> None:
    """goodput counts start-up; steady_state_goodput covers the steps after the first; both over the wall."""
    report = rollup(_job_with_workers(3))
    assert report["goodput"] == pytest.approx(24 / 40)  # rl.job's 40 s: 10 start-up, 3 x (8 + 1 + 1 unattributed)
    assert report["steady_state_goodput"] == pytest.approx(16 / 20)  # steps 1 and 2: 8 productive of 10 s each
    assert rollup(_job_with_workers(3), warmup_steps=0)["steady_state_goodput"] == pytest.approx(24 / 30)


def test_a_long_run_reads_in_a_summary() -> None:
    """500 steps: step time p50/p95/max, the 5 slowest, at most 20 step rows unless all are asked for."""
    recs = [v1_record("rl.job", 0, 5000, span="job")]
    for i in range(500):
        wall = 2.0 if i % 100 == 7 else 1.0  # five slow steps
        t = i * 10
        recs += [
            v1_record("step", t, t + wall, span=f"s{i}", parent="job", **{"rl.step": i}),
            v1_record("generation", t, t + wall, span=f"g{i}", parent=f"s{i}", **{"rl.bucket": "productive"}),
        ]
    report = rollup(recs)
    assert report["step_time"] == {"p50_s": 1.0, "p95_s": 1.0, "max_s": 2.0}
    assert sorted(s["step"] for s in report["slowest_steps"]) == [7, 107, 207, 307, 407]
    table = format_table(report)

    def step_rows(text: str) -> int:
        return len([line for line in text.splitlines() if re.match(r"step \d+ ", line)])

    assert step_rows(table) == 20 and "480 more steps" in table
    assert step_rows(format_table(report, all_steps=True)) == 500
    window = rollup(recs, steps=(100, 109))
    assert [s["step"] for s in window["steps"]] == list(range(100, 110))


def test_phase_breakdown_with_tokens_per_second() -> None:
    """Per phase: count, total, mean, p95, share of wall, and tokens/s where rl.num_tokens is recorded."""
    recs = [v1_record("rl.job", 0, 100, span="job")]
    for i in range(10):
        recs.append(
            v1_record(
                "generation",
                i * 10,
                i * 10 + 4,
                span=f"g{i}",
                parent="job",
                **{"rl.bucket": "productive", "rl.num_tokens": 2000},
            )
        )
        recs.append(
            v1_record(
                "policy_training",
                i * 10 + 4,
                i * 10 + 4 + (1 if i < 9 else 10),
                span=f"t{i}",
                parent="job",
                **{"rl.bucket": "productive"},
            )
        )
    report = rollup(recs)
    gen = next(p for p in report["phases"] if p["phase"] == "generation")
    assert (gen["count"], gen["total_s"], gen["mean_s"], gen["share"], gen["tokens_per_s"]) == (
        10,
        40.0,
        4.0,
        0.4,
        500.0,
    )
    train = next(p for p in report["phases"] if p["phase"] == "policy_training")
    assert train["p95_s"] == 10.0 and train["tokens_per_s"] is None
    assert "tokens/s" in format_table(report)


def test_parts_merge_exactly_whatever_the_order(tmp_path: Path) -> None:
    """Each file reduces to its process's part; parts merge exactly (integer nanoseconds), so the report is
    the same read serially, in parallel, or with the files in any order."""
    from lens_rl.offline.rollup.goodput import report_from_parts
    from lens_rl.offline.run.analyze import analyze, analyze_parts
    from lens_rl.store import span_files
    from tests.stores import write_received

    recs = _job_with_workers(4)
    recs += [
        {**r, "resource": {**r["resource"], "nv.dl.rank": 1, "process.pid": 8}, "span_id": r["span_id"] + "b"}
        for r in recs
        if r["resource"]["rl.worker_group"] == "lm_policy"
    ]
    paths = span_files(write_received(recs, tmp_path))
    whole = analyze(paths, jobs=1)
    assert analyze(paths, jobs=2) == whole and analyze(paths[::-1], jobs=1)["steps"] == whole["steps"]
    parts, stats = analyze_parts(paths, jobs=1)
    assert report_from_parts(parts[::-1], files=stats.files) == {**whole, "skipped_lines": 0, "notes": []}


def test_step_goodput_live_on_the_driver() -> None:
    """step_goodput() returns the last completed step's seconds, wall time and goodput, as the rollup computes."""
    assert lens_rl.step_goodput() is None
    with recording(worker_group="driver") as rec:
        for step in range(2):
            with traced_phase("step", step=step):
                with traced_phase("generation"):
                    time.sleep(0.03)
                with traced_phase("weight_sync"):
                    time.sleep(0.01)
        live = lens_rl.step_goodput()
        offline = rollup_recorded(rec.spans)["steps"][-1]
    assert live["step"] == 1 and live["seconds"]["productive"] == pytest.approx(
        offline["seconds"]["productive"], abs=1e-5
    )
    assert live["goodput"] == pytest.approx(offline["goodput"], abs=1e-4) and live["wall_s"] >= 0.04


def test_the_table_shows_a_stores_control_characters_escaped(tmp_path: Path) -> None:
    """A phase and a worker group whose names hold a terminal escape, a newline and a bell (a job named them
    so, or a store written by hand): ``lens-rl goodput`` shows them escaped, so the screen is not cleared and no
    row is forged; ``--json`` keeps them exact."""
    import json

    from tests.conftest import lens
    from tests.stores import span, write_process

    forged_phase, forged_group = "gen\x1b[2J\nFORGED ROW", "policy\x07\nFORGED GROUP"
    spans = [
        span("step", 0, 4, "st", step=0),
        span(forged_phase, 1, 2, "a", bucket="productive", step=0, parent="st"),
    ]
    write_process(tmp_path / "r1", forged_group, 0, 7, spans, name="spans-g-0-7.jsonl")
    out = lens("goodput", str(tmp_path / "r1"))
    assert out.returncode == 0, out.stderr
    assert not any(c in out.stdout for c in "\x1b\x07"), out.stdout
    assert not any(line.lstrip().startswith("FORGED") for line in out.stdout.splitlines()), out.stdout
    assert "gen\\x1b[2J\\nFORGED ROW" in out.stdout, out.stdout
    exact = json.loads(lens("goodput", str(tmp_path / "r1"), "--json").stdout)
    assert forged_phase in [p["phase"] for p in exact["phases"]]
