"""Stragglers: a rank over the group's median by 20 % and 3 MADs, per step; persistent when flagged in half its steps."""

from __future__ import annotations

import pytest

from lens_rl.offline.table import format_table
from tests.stores import rollup, v1_record


def _straggler_store(slow_rank: int, slow_steps: set[int], steps: int = 10, ranks: int = 8) -> list[dict]:
    recs = []
    for step in range(steps):
        for rank in range(ranks):
            compute = 1.5 if rank == slow_rank and step in slow_steps else 1.0 + 0.01 * rank
            t = step * 10.0
            recs.append(
                v1_record(
                    "policy_training",
                    t,
                    t + compute,
                    span=f"t{step}-{rank}",
                    group="lm_policy",
                    rank=rank,
                    pid=100 + rank,
                    **{"rl.bucket": "productive", "rl.step": step},
                )
            )
            # the collective wait evens the ranks out: an idle child, not compared
            recs.append(
                v1_record(
                    "barrier",
                    t + compute,
                    t + 2.0,
                    span=f"b{step}-{rank}",
                    group="lm_policy",
                    rank=rank,
                    pid=100 + rank,
                    **{"rl.bucket": "idle", "rl.step": step},
                )
            )
    return recs


def test_a_rank_slow_in_most_steps_is_a_persistent_straggler() -> None:
    """One rank 1.5x slower in 8 of 10 steps is flagged in those steps and persistent; the table says so."""
    report = rollup(_straggler_store(3, set(range(8))))
    flagged = report["stragglers"]["per_step"]
    assert {(s["rank"], s["step"], s["phase"]) for s in flagged} == {(3, s, "policy_training") for s in range(8)}
    assert report["stragglers"]["persistent"] == [
        {"worker_group": "lm_policy", "rank": 3, "steps_flagged": 8, "of_steps": 10}
    ]
    assert all(s["over_median"] == pytest.approx(1.5 / 1.045 - 1, abs=1e-6) for s in flagged)  # median of 8 ranks
    assert "persistent: lm_policy rank 3" in format_table(report)


def test_a_rank_slow_once_is_not_persistent() -> None:
    """Slow in one step of ten: flagged for that step only."""
    report = rollup(_straggler_store(5, {4}))
    assert [(s["rank"], s["step"]) for s in report["stragglers"]["per_step"]] == [(5, 4)]
    assert report["stragglers"]["persistent"] == []


def test_stragglers_over_ragged_steps_and_a_restarted_rank() -> None:
    """Ranks that did not all run the same steps (one joined late) are compared step by step among those
    present; a rank seen under two pids (a restart) is one rank, its steps counted once."""
    recs = [
        r
        for r in _straggler_store(2, set(range(2, 10)))
        if not (r["resource"]["nv.dl.rank"] == 7 and r["attributes"]["rl.step"] < 2)
    ]
    for r in recs:
        if r["resource"]["nv.dl.rank"] == 2 and r["attributes"]["rl.step"] >= 5:
            r["resource"] = {**r["resource"], "process.pid": 900}
    report = rollup(recs)
    flagged = report["stragglers"]["per_step"]
    assert {(s["rank"], s["step"]) for s in flagged} == {(2, s) for s in range(2, 10)}  # under both pids
    assert report["stragglers"]["persistent"] == [
        {"worker_group": "lm_policy", "rank": 2, "steps_flagged": 8, "of_steps": 10}
    ]
