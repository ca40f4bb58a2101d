"""The pipeline's staleness from stores (``lens_rl.offline.rollup.staleness`` over the one rule in
``lens_rl.buckets``): each phase's bound for its own trajectories, hostile values skipped, phases of no step placed
by time, the histogram and the plain lists read alike."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from lens_rl.buckets import staleness
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.show.table import format_table
from lens_rl.store import span_files
from tests.stores import span, write_process


def _job(run: Path, training: list[dict[str, Any]], steps: int = 2, **resource: Any) -> dict[str, Any]:
    """A driver with ``steps`` 10 s steps (``resource`` on it), a rollout generating through each and a trainer
    whose training spans are ``training``; the report (no warm-up)."""
    driver = [span("step", 10 * k, 10 * (k + 1), f"s{k}", step=k) for k in range(steps)]
    write_process(run, "driver", 0, 1, driver, **resource)
    write_process(run, "trainer", 0, 2, training)
    gen = [span("generation", 10 * k, 10 * k + 5, f"g{k}", bucket="productive", step=k) for k in range(steps)]
    write_process(run, "rollout", 0, 3, gen)
    return analyze(span_files(run), jobs=1, warmup_steps=0)


def _train(start: float, label: str, step: Any = None, **attrs: Any) -> dict[str, Any]:
    return span("policy_training", start, start + 4, label, bucket="productive", step=step, **attrs)


def test_each_phase_is_judged_against_its_own_bound_else_the_jobs(tmp_path: Path) -> None:
    """Step 0's phase says max_staleness 5, step 1's none, the job's bound is 1, both lag 3: step 0 is within its
    bound, step 1 beyond the job's, so the job's share beyond is 0.5 (not the first phase's bound for all)."""
    training = [
        _train(5, "t0", 0, **{"rl.trajectory_versions": [-3], "rl.max_staleness": 5}),
        _train(15, "t1", 1, **{"rl.trajectory_versions": [-2]}),
    ]
    pipe = _job(tmp_path, training, **{"rl.max_staleness": 1})["pipeline"]
    assert [s["staleness_beyond"] for s in pipe["per_step"]] == [0.0, 1.0]
    assert pipe["staleness"]["beyond"] == 0.5 and pipe["staleness"]["bound"] == 1


def test_beyond_is_a_share_of_trajectories_and_phases_bounds_are_listed_where_they_differ() -> None:
    """Versions 0 (90 tokens) and 4 (10 tokens) under policy 5 and a bound of 2: one trajectory of two is beyond
    (0.5), while the mean stays token-weighted (4.6); phases of bounds 1 and 3 and no job bound say both."""
    got = staleness([(0, 5, [0, 4], [90, 10], 2)])
    assert got is not None and got["beyond"] == 0.5 and got["mean"] == 4.6 and got["bound"] == 2
    mixed = staleness([(0, 5, [3], None, 1), (1, 5, [3], None, 3)])
    assert mixed is not None and mixed["beyond"] == 0.5 and mixed["bound"] == [1, 3]


def test_the_histogram_reads_as_the_lists_it_stands_for() -> None:
    """A histogram entry (distinct versions, trajectories and summed tokens of each) gives the very figures of
    the per-trajectory lists it was made from (the form stores written before hold)."""
    versions = [7, 5, 7, 6, 5, 7, 4, 7]
    tokens = [10, 30, 5, 8, 1, 40, 2, 9]
    listed = staleness([(8, 8, versions, tokens, 2)])
    distinct = sorted(set(versions))
    counts = [versions.count(v) for v in distinct]
    summed = [sum(t for u, t in zip(versions, tokens, strict=True) if u == v) for v in distinct]
    assert staleness([(8, 8, distinct, summed, 2, counts)]) == listed
    assert listed is not None and listed["trajectories"] == 8 and listed["beyond"] == 0.375


def test_a_hostile_stores_non_finite_versions_are_skipped_and_the_table_prints(tmp_path: Path) -> None:
    """Versions, policy versions, counts or tokens a store holds that are no finite number in int64 (+-1e308,
    whose lag is not finite, text, null, a bool, 10**30, a negative count) are left out; the readable ones count, and `lens-rl goodput` prints its table and strict JSON
    (never an internal error)."""
    training = [
        _train(5, "t0", 0, **{"rl.policy_version": 1e308, "rl.trajectory_versions": [-1e308]}),
        _train(6, "t1", 0, **{"rl.trajectory_versions": [-1e308, -1, "inf", None, 10**30, True]}),
        _train(15, "t2", 1, **{"rl.policy_version": 2, "rl.trajectory_versions": [1], "rl.trajectory_counts": [-3]}),
        _train(16, "t3", 1, **{"rl.trajectory_versions": [0, 1], "rl.trajectory_tokens": ["NaN", 5]}),
        _train(17, "t4", 1, **{"rl.policy_version": 10**30, "rl.trajectory_versions": [0]}),
    ]
    report = _job(tmp_path, training)
    stale = report["pipeline"]["staleness"]
    # readable: step 0's version -1 (lag 1, one trajectory), step 1's version 1 of 5 tokens (lag 0)
    assert (stale["mean"], stale["max"], stale["trajectories"]) == (round(1 / 6, 6), 1, 2)
    assert "staleness (policy - trajectory version" in format_table(report)
    for args in ([], ["--json"]):
        out = subprocess.run(
            [sys.executable, "-m", "lens_rl", "goodput", str(tmp_path), "--warmup-steps", "0", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0 and "internal error" not in out.stderr, out.stderr[-2000:]
    parsed = json.loads(out.stdout, parse_constant=lambda c: math.nan / 0)  # (a NaN or Infinity: an error)
    assert parsed["pipeline"]["staleness"]["max"] == 1


def test_a_training_phase_of_no_step_counts_in_the_step_window_its_end_falls_in(tmp_path: Path) -> None:
    """A worker's training phases outside the driver's step context (no rl.step) are placed by their end, as
    the pipeline reads busy time and weight syncs by time: each step's staleness from the phase that ended in it,
    the policy version defaulting to that step; one ending after the last step is outside the wall."""
    training = [
        _train(3, "t0", **{"rl.policy_version": 5, "rl.trajectory_versions": [3]}),  # ends at 7: step 0
        _train(12, "t1", **{"rl.trajectory_versions": [0, 0]}),  # ends at 16: step 1, policy 1
        _train(28, "t2", **{"rl.policy_version": 9, "rl.trajectory_versions": [0]}),  # ends at 32: past the wall
    ]
    pipe = _job(tmp_path, training, steps=3)["pipeline"]
    assert [s["staleness_mean"] for s in pipe["per_step"]] == [2.0, 1.0, None]
    assert pipe["staleness"]["trajectories"] == 3 and pipe["staleness"]["max"] == 2


def test_hostile_counts_and_tokens_past_int64_are_skipped_and_goodput_exits_0(tmp_path: Path) -> None:
    """Trajectory counts or tokens a store holds past int64 (1e308 each, whose sum is no finite number) or no whole
    count (2.5) are left out: `lens-rl goodput --json` exits 0 with strict JSON and the readable phase's figures."""
    training = [
        _train(5, "t0", 0, **{"rl.policy_version": 1, "rl.trajectory_versions": [0, 1], "rl.trajectory_counts": [1e308, 1e308]}),
        _train(6, "t1", 0, **{"rl.policy_version": 1, "rl.trajectory_versions": [0, 1], "rl.trajectory_tokens": [1e308, 1e308]}),
        _train(7, "t2", 0, **{"rl.policy_version": 1, "rl.trajectory_versions": [0], "rl.trajectory_counts": [2.5]}),
        _train(8, "t3", 0, **{"rl.policy_version": 1, "rl.trajectory_versions": [0], "rl.trajectory_counts": [2**63]}),
        _train(15, "t4", 1, **{"rl.policy_version": 3, "rl.trajectory_versions": [1], "rl.trajectory_counts": [4.0]}),
    ]  # fmt: skip
    _job(tmp_path, training)
    out = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(tmp_path), "--warmup-steps", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "internal error" not in out.stderr, out.stderr[-2000:]
    stale = json.loads(out.stdout, parse_constant=lambda c: math.nan / 0)["pipeline"]["staleness"]  # strict JSON
    assert (stale["mean"], stale["max"], stale["trajectories"]) == (2, 2, 4)
