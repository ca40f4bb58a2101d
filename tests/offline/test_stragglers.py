"""Stragglers: a rank over the group's median by 20 % and 3 MADs, per step; persistent when flagged in half its steps."""

from __future__ import annotations

import random
from array import array

import pytest

from lens_rl.offline.read.parts import ProcessPart, Series
from lens_rl.offline.rollup.stragglers import stragglers
from lens_rl.offline.show.table import format_table
from lens_rl.store import Process
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


@pytest.mark.parametrize("ranks", [3, 7, 8])
@pytest.mark.parametrize("selection", [None, (20, 70)])
def test_ranks_that_share_their_steps_are_judged_exactly_as_step_by_step(
    ranks: int, selection: tuple[int, int] | None
) -> None:
    """Ranks with the same integer steps are judged all steps at once (a table); the flags and their
    over-median figures are the per-step rule's exactly: odd and even rank counts (an integer median or the
    mean of two), ties, zero-time steps, one rank far out, a step selection."""
    rng = random.Random(ranks)
    step_list = list(range(100))
    values = {
        rank: [rng.choice([0, 1_000, 1_000, 1_001, 1_050, 1_300, 5_000, rng.randrange(900, 2_000)]) for _ in step_list]
        for rank in range(ranks)
    }
    if ranks == 7:  # step 50: the slowest exactly 3 MADs out (not flagged); step 51: just past them
        for rank, ns in enumerate([1_000, 1_000, 900, 1_100, 900, 1_100, 1_300]):
            values[rank][50], values[rank][51] = ns, ns + (rank == 6)

    def parts(series: bool) -> list[ProcessPart]:
        out = []
        for rank, ns in values.items():
            by_step = Series(array("q", step_list), array("q", ns)) if series else dict(zip(step_list, ns, strict=True))
            out.append(ProcessPart(key=Process("lm_policy", rank, 100 + rank), compute={"policy_training": by_step}))
        return out

    as_table, step_by_step = stragglers(parts(True), selection), stragglers(parts(False), selection)
    assert as_table == step_by_step and as_table["per_step"]  # (some steps flagged, so the rule was exercised)
    assert all(type(s["step"]) is int for s in as_table["per_step"])
    if ranks == 7:
        assert {s["step"] for s in as_table["per_step"] if s["step"] in (50, 51)} == {51}
    if selection:
        assert all(selection[0] <= s["step"] <= selection[1] for s in as_table["per_step"])


def test_ranks_restarted_with_re_run_steps_are_judged_on_their_summed_time() -> None:
    """A resumed job: every rank under two pids, the second re-running the first's last steps. Each rank's
    time per step is the sum over its pids, judged as the per-step rule judges it (the flags and figures of
    one pid per rank holding the sums), re-run steps counted once among its steps."""
    rng = random.Random(5)
    first, second = list(range(0, 60)), list(range(55, 120))  # steps 55-59 ran twice
    values = {
        (rank, attempt): [rng.choice([1_000, 1_000, 1_010, 1_200, 4_000]) for _ in steps]
        for rank in range(6)
        for attempt, steps in ((0, first), (1, second))
    }
    restarted = [
        ProcessPart(
            key=Process("lm_policy", rank, 1000 * (attempt + 1) + rank, attempt),
            compute={"policy_training": Series(array("q", steps), array("q", values[(rank, attempt)]))},
        )
        for rank in range(6)
        for attempt, steps in ((0, first), (1, second))
    ]
    summed = []
    for rank in range(6):
        by_step: dict[int, int] = {}
        for attempt, steps in ((0, first), (1, second)):
            for step, ns in zip(steps, values[(rank, attempt)], strict=True):
                by_step[step] = by_step.get(step, 0) + ns
        summed.append(ProcessPart(key=Process("lm_policy", rank, 100 + rank), compute={"policy_training": by_step}))
    found = stragglers(restarted, None)
    assert found == stragglers(summed, None) and found["per_step"]
    assert {p["of_steps"] for p in found["persistent"]} <= {120}
