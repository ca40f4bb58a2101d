"""Goodput rollup: exclusive time, views, steps, groups and ranks, against known sleeps."""

from __future__ import annotations

import time

import pytest

from lens_rl import traced_phase, with_bucket
from lens_rl.goodput import goodput_ratio, rollup, spans_to_records
from lens_rl.testing import recording


def _rec(name: str, start_s: float, end_s: float, *, span: str, parent: str | None = None, group: str = "driver",
         rank: int = 0, pid: int = 1, **attrs: object) -> dict:  # fmt: skip
    return {"v": 1, "name": name, "span_id": span, "parent_span_id": parent, "trace_id": "t" * 32,
            "start_ns": int(start_s * 1e9), "end_ns": int(end_s * 1e9), "attributes": dict(attrs),
            "resource": {"rl.worker_group": group, "nv.dl.rank": rank, "process.pid": pid, "rl.run_id": "r"}}  # fmt: skip


def test_ratio() -> None:
    """goodput = productive / all bucketed seconds; None with nothing bucketed."""
    assert goodput_ratio({"productive": 3, "overhead": 1}) == 0.75
    assert goodput_ratio({}) is None


def test_nested_bucketed_span_takes_its_time_from_the_outer_one() -> None:
    """A checkpoint inside training counts once, as overhead; concurrent children are unioned."""
    recs = [
        _rec("step", 0, 10, span="s", **{"rl.step": 1}),
        _rec("policy_training", 0, 8, span="t", parent="s", **{"rl.bucket": "productive"}),
        _rec("checkpointing", 2, 4, span="c", parent="t", **{"rl.bucket": "overhead"}),
        _rec("inner", 3, 5, span="i", parent="t"),  # unbucketed wrapper...
        _rec("wait", 3, 6, span="w", parent="i", **{"rl.bucket": "idle"}),  # ...its bucketed child still counts
    ]
    report = rollup(recs)
    assert report["job"]["seconds"] == {"productive": 4.0, "overhead": 2.0, "idle": 3.0, "wasted": 0.0}
    step = report["steps"][0]
    assert step["step"] == 1 and step["wall_s"] == 10.0 and step["unattributed_s"] == 2.0
    assert report["goodput"] == pytest.approx(4 / 9)


def test_driver_view_for_the_job_and_resource_seconds_for_groups() -> None:
    """The job figure uses the driver's spans; groups and ranks sum their own processes."""
    recs = [
        _rec("generation", 0, 4, span="g", **{"rl.bucket": "productive", "rl.step": 1}),
        _rec("weight_sync", 4, 5, span="w", **{"rl.bucket": "overhead", "rl.step": 1}),
        _rec("policy_training", 0, 3, span="p0", group="lm_policy", rank=0, pid=2, **{"rl.bucket": "productive"}),
        _rec("policy_training", 0, 2, span="p1", group="lm_policy", rank=1, pid=3, **{"rl.bucket": "productive"}),
        _rec("checkpointing", 2, 3, span="k1", group="lm_policy", rank=1, pid=3, **{"rl.bucket": "overhead"}),
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
    recs = [_rec("generation", 0, 1, span="a", group="g", pid=5, **{"rl.bucket": "productive"}),
            _rec("wait", 1, 2, span="b", group="h", pid=6, **{"rl.bucket": "idle"})]  # fmt: skip
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
        report = rollup(spans_to_records(rec.spans))

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
