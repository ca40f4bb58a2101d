"""Parent links between processes read by the one tree rule: a cycle through a step umbrella and spans of
another process is cut and counted, and a chain that crosses processes at every link, however deep, is
walked in a loop; ``goodput``, ``report`` and ``perfetto --steps`` finish on both as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
from tests.conftest import clean_env
from tests.stores import span, write_process


def _cycle_run(run: Path, driver_first: bool = True) -> Path:
    """A driver step umbrella ``u`` whose parent is the worker's ``y``, whose parent is the worker's ``x``,
    whose parent is ``u``: a cycle of three spans through a step umbrella, across two processes; and a
    well-formed step beside it."""
    driver = [
        span("rl.job", 0, 100, "job"),
        span("step", 1, 10, "u", parent="y", remote=True, step=3),
        span("step", 20, 30, "u2", parent="job", step=4),
        span("generation", 21, 29, "g2", parent="u2", bucket="productive"),
    ]
    worker = [
        span("generate", 1, 10, "x", parent="u", remote=True, bucket="productive"),
        span("score", 1, 10, "y", parent="x", bucket="overhead"),
    ]
    names = ("spans-a.jsonl", "spans-b.jsonl") if driver_first else ("spans-b.jsonl", "spans-a.jsonl")
    write_process(run, "driver", 0, 1, driver, root="job", role="driver", name=names[0])
    write_process(run, "rollout", 0, 2, worker, name=names[1])
    return run


def _chain_run(run: Path, depth: int) -> Path:
    """A step umbrella over a chain ``depth`` spans deep whose every link crosses between the driver and a
    worker (each span's parent is in the other process), a productive leaf at its bottom."""
    driver = [span("rl.job", 0, 100, "job"), span("step", 1, 10, "c0", parent="job", step=1)]
    worker: list[dict[str, Any]] = []
    for k in range(1, depth):
        bucket = "productive" if k == depth - 1 else None
        level = span(f"level{k % 7}", 1 + k * 1e-5, 10 - k * 1e-5, f"c{k}", parent=f"c{k - 1}", remote=True)
        if bucket:
            level.setdefault("a", {})["rl.bucket"] = bucket
        (worker if k % 2 else driver).append(level)
    write_process(run, "driver", 0, 1, driver, root="job", role="driver")
    write_process(run, "rollout", 0, 2, worker)
    return run


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "lens_rl", *args], capture_output=True, text=True, timeout=timeout, env=clean_env()
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def _every_command(run: Path, tmp_path: Path, step: int) -> dict[str, Any]:
    """goodput --json, report and perfetto --steps on ``run``: each exits 0; the goodput report."""
    good = _cli("goodput", str(run), "--json", "--no-cache")
    assert good.returncode == 0, good.stderr[-3000:]
    page = _cli("report", str(run), "-o", str(tmp_path / "r.html"), "--no-cache")
    assert page.returncode == 0, page.stderr[-3000:]
    trace = _cli("perfetto", str(run), "-o", str(tmp_path / "t.json"), "--steps", f"{step}-{step}")
    assert trace.returncode == 0, trace.stderr[-3000:]
    return dict(json.loads(good.stdout))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("driver_first", [True, False])
def test_a_cycle_of_three_spans_across_two_processes(tmp_path: Path, driver_first: bool) -> None:
    """The umbrella -> worker -> worker -> umbrella cycle: every command exits 0, the cycle is counted once
    (and named in a note), the step keeps its wall and its critical path is its wall, once."""
    report = _every_command(_cycle_run(tmp_path / "r1", driver_first), tmp_path, 3)
    assert report["broken_cycles"] == 1
    assert any("1 parent cycle(s) broken" in note for note in report["notes"])
    three = next(r for r in report["steps"] if r["step"] == 3)
    assert three["wall_s"] == 9.0
    critical = {r["step"]: r["critical_s"] for r in report["critical_path"]["steps"]}
    assert critical == {3: 9.0, 4: 10.0}


def test_the_cut_is_the_same_cold_and_in_process(tmp_path: Path) -> None:
    """The cross-process cut counts the same in a read of one process (no jobs) as the command's."""
    run = _cycle_run(tmp_path / "r1")
    report = analyze(span_files(run), jobs=1)
    assert report["broken_cycles"] == 1
    assert {r["step"]: r["critical_s"] for r in report["critical_path"]["steps"]} == {3: 9.0, 4: 10.0}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_chain_one_hundred_thousand_deep_across_processes(tmp_path: Path) -> None:
    """100,000 spans, each the child of a span in the other process: every command exits 0 (no recursion),
    no cycle is counted, and the step's critical path is its wall, the leaf's time counted once."""
    depth = 100_000
    report = _every_command(_chain_run(tmp_path / "r1", depth), tmp_path, 1)
    assert report["broken_cycles"] == 0
    (step,) = report["critical_path"]["steps"]
    assert step["step"] == 1 and step["critical_s"] == pytest.approx(9.0, abs=1e-6)
    assert step["top"]["phase"] == f"level{(depth - 1) % 7}"  # the productive leaf, its whole interval once
    assert step["top"]["seconds"] == pytest.approx(9 - 2 * (depth - 1) * 1e-5, abs=1e-5)


def test_which_ids_are_wanted_is_exact_where_their_low_bits_collide() -> None:
    """Which span ids a link wants is exact: ids sharing low bits with a wanted one (the flag table's false
    hits) are told apart from it, sequential and random ids alike, as numpy's own membership test says."""
    import numpy as np

    from lens_rl.offline.read.crosslinks import _TABLE_BITS, _among

    rng = np.random.default_rng(7)
    wanted = rng.integers(0, 2**63, 5000, dtype=np.uint64)
    ids = rng.integers(0, 2**63, 50_000, dtype=np.uint64)
    ids[::100] = wanted[:500]
    ids[1::100] = wanted[:500] ^ np.uint64(1 << (_TABLE_BITS + 3))  # (same low bits, another id)
    assert (_among(ids, wanted) == np.isin(ids, wanted)).all()
    sequential, every_seventh = np.arange(200_000, dtype=np.uint64), np.arange(0, 400_000, 7, dtype=np.uint64)
    assert (_among(sequential, every_seventh) == np.isin(sequential, every_seventh)).all()
    assert not _among(ids, np.zeros(0, np.uint64)).any()


def test_which_ids_are_wanted_is_exact_whichever_of_their_bits_collide() -> None:
    """The passes over an id's low, middle and high bits only rule ids out: ids equal to a wanted one in any of
    those slices, in all of them but the top bits, past 2**63, or drawn from a handful of values, are told
    apart exactly, as numpy's own membership test says (random sets, a few hundred draws)."""
    import numpy as np

    from lens_rl.offline.read.crosslinks import _among

    rng = np.random.default_rng(11)
    for draw in range(300):
        pool = rng.integers(0, 2**64, 64 if draw % 3 else 8, dtype=np.uint64)
        wanted = rng.choice(pool, int(rng.integers(0, 200)))
        ids = rng.choice(pool, int(rng.integers(0, 400)))
        if len(wanted) and len(ids):  # (another id sharing one slice, or every slice but the top bits)
            bits = [np.uint64(1 << b) for b in (3, 25, 45, 61, 63)]
            ids[: len(ids) // 2] ^= bits[draw % len(bits)]
        assert (_among(ids, wanted) == np.isin(ids, wanted)).all()


def test_whether_any_id_is_wanted_is_the_exact_rule_whichever_process_holds_it() -> None:
    """Whether any process's span id is an entry's parent is looked up process by process against tables made
    once, and says what numpy's membership test over every id at once says (random processes, a wanted id
    in any of them, in none, ids sharing bits with wanted ones)."""
    from types import SimpleNamespace

    import numpy as np

    from lens_rl.offline.read.crosslinks import _none_wanted

    rng = np.random.default_rng(17)
    for draw in range(200):
        pool = rng.integers(0, 2**64, 300, dtype=np.uint64)
        crits = []
        for _ in range(int(rng.integers(1, 8))):
            nodes = rng.choice(pool[:150], int(rng.integers(0, 60)))
            parents = rng.choice(pool[150:], int(rng.integers(0, 30))) ^ np.uint64(1 << int(rng.integers(0, 64)))
            crits.append(SimpleNamespace(node_ids=array("Q", nodes.tolist()), e_parent=array("Q", parents.tolist())))
        if draw % 3 == 0 and len(crits[-1].node_ids):  # (a wanted id: another process's span)
            crits[0].e_parent.append(crits[-1].node_ids[-1])
        every = np.array([i for c in crits for i in c.node_ids], np.uint64)
        wanted = np.array([i for c in crits for i in c.e_parent], np.uint64)
        assert _none_wanted(crits) == (not np.isin(every, wanted).any())
