"""The report's rows: a phase's share is of the job's wall for the driver and of its group's lifetimes for a
worker group; unbucketed leaf phases are named above 5 % of the steps' wall, with a did-you-mean; groups and
ranks in resource-seconds, concurrent phases flagged; end-to-end tokens per second per GPU over complete steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.read.parts import ProcessPart, merge_parts
from lens_rl.offline.rollup.rows import (
    UNBUCKETED_SHARE,
    group_and_rank_rows,
    phase_rows,
    throughput_row,
    unbucketed_rows,
)
from lens_rl.offline.run.analyze import analyze_parts
from lens_rl.store import span_files
from tests.stores import span, write_process


def _processes(tmp_path: Path) -> list[ProcessPart]:
    """A driver (job 0-20 s, two 10 s steps) and two GPU workers of lm_policy, rank 1 with two overlapping
    productive phases on two threads."""
    driver = [span("rl.job", 0, 20, "job")]
    worker0: list[dict[str, Any]] = []
    worker1: list[dict[str, Any]] = []
    for step in (0, 1):
        t = step * 10.0
        driver += [
            span("step", t, t + 10, f"s{step}", parent="job", step=step, **{"rl.num_tokens": 4000}),
            span("generation", t, t + 6, f"g{step}", parent=f"s{step}", bucket="productive"),
            span("mystery_wait", t + 6, t + 7, f"m{step}", parent=f"s{step}"),  # 10 % of the wall, no bucket
            span("update_actr", t + 7, t + 7.3, f"u{step}", parent=f"s{step}"),  # 3 %: under the line
            span("weight_sync", t + 7.3, t + 8, f"w{step}", parent=f"s{step}", bucket="overhead"),
        ]
        worker0.append(
            span("policy_training", t + 1, t + 5, f"a{step}", parent=f"g{step}", remote=True, bucket="productive")
        )
        worker1.append(
            span("policy_training", t + 1, t + 9, f"b{step}", parent=f"g{step}", remote=True, bucket="productive")
        )
        worker1.append(
            dict(span("logprob", t + 2, t + 9, f"c{step}", parent=f"g{step}", remote=True, bucket="productive"), th=2)
        )
    write_process(tmp_path, "driver", 0, 1, driver, root="job", role="driver")
    write_process(tmp_path, "lm_policy", 0, 10, worker0, **{"rl.num_gpus": 1})
    write_process(tmp_path, "lm_policy", 1, 11, worker1, **{"rl.num_gpus": 1})
    parts, _ = analyze_parts(span_files(tmp_path), jobs=1)
    return merge_parts(parts)


def test_a_phase_share_is_of_the_jobs_wall_or_of_its_groups_lifetimes(tmp_path: Path) -> None:
    """The driver's phases first, each a share of the 20 s wall; lm_policy's of its two processes' lifetimes."""
    processes = _processes(tmp_path)
    rows = phase_rows(processes, job_wall_s=20.0)
    assert [r["worker_group"] for r in rows][:1] == ["driver"]
    gen = next(r for r in rows if r["phase"] == "generation")
    assert (gen["count"], gen["total_s"], gen["share"], gen["share_of"]) == (2, 12.0, 0.6, "job wall")
    train = next(r for r in rows if r["phase"] == "policy_training")
    lifetimes = sum(p.lifetime_ns for p in processes if p.key.group == "lm_policy") / 1e9
    assert train["count"] == 4 and train["share_of"] == "group lifetime"
    assert train["share"] == pytest.approx(train["total_s"] / lifetimes, abs=1e-6)
    assert phase_rows(processes, job_wall_s=None)[0]["share"] is None  # no wall: no share for the driver


def test_unbucketed_leaf_phases_above_five_percent_are_named_with_a_did_you_mean(tmp_path: Path) -> None:
    """mystery_wait (10 % of the steps' wall) is named; update_actr (3 %) is not; no steps, no rows."""
    processes = _processes(tmp_path)
    rows = unbucketed_rows(processes, steps_wall_s=20.0)
    assert [(r["worker_group"], r["phase"], r["share"]) for r in rows] == [("driver", "mystery_wait", 0.1)]
    assert rows[0]["share"] > UNBUCKETED_SHARE
    below = unbucketed_rows(processes, steps_wall_s=20.0 / 0.02)  # the same seconds over a far longer wall
    assert below == []
    assert unbucketed_rows(processes, steps_wall_s=0.0) == []
    assert unbucketed_rows(processes, steps_wall_s=2.0)[-1]["did_you_mean"] == "update_actor"


def test_groups_and_ranks_in_resource_seconds_with_concurrent_phases_flagged(tmp_path: Path) -> None:
    """One row per group (processes counted) and per rank, driver first; rank 1's overlapping phases sum past
    its lifetime: concurrent."""
    groups, ranks, concurrent = group_and_rank_rows(_processes(tmp_path))
    assert [(g["worker_group"], g["processes"]) for g in groups] == [("driver", 1), ("lm_policy", 2)]
    assert [(r["worker_group"], r["rank"], r["pid"]) for r in ranks] == [
        ("driver", 0, 1),
        ("lm_policy", 0, 10),
        ("lm_policy", 1, 11),
    ]
    assert concurrent


def test_end_to_end_tokens_per_second_per_gpu_over_complete_steps(tmp_path: Path) -> None:
    """4,000 tokens a 10 s step on the job's 2 GPUs: 200 tokens/s/GPU per step and for the run."""
    processes = _processes(tmp_path)
    steps = [{"step": 0, "incomplete": False}, {"step": 1, "incomplete": False}]
    out = throughput_row(processes, steps, [10 * 10**9, 10 * 10**9])
    assert out == {"gpus": 2, "tokens": 8000, "e2e_tokens_per_s_per_gpu": 200.0}
    assert [s["e2e_tokens_per_s_per_gpu"] for s in steps] == [200.0, 200.0] and steps[0]["tokens"] == 4000
