"""A real async loop on the CPU (driver, generator and trainer processes, a bounded queue): the pipeline's verdict
and busy figures match what the loop's own clock recorded, once rollout-bound and once trainer-bound."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.read.intervals import merge_intervals
from lens_rl.offline.rollup.verdict import verdict
from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.show.pipeline import format_pipeline
from lens_rl.store import span_files

LOOP = Path(__file__).with_name("pipeline_loop.py")
STEPS = 30


def _covered(intervals: list[Any], wall: list[tuple[int, int]]) -> int:
    """How much of ``wall`` the union of ``intervals`` covers, ns."""
    union = merge_intervals((a, b) for a, b, *_ in intervals)
    return sum(max(min(b, hi) - max(a, lo), 0) for a, b in union for lo, hi in wall)


def _run(tmp_path: Path, gen_s: float, train_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the loop; its report's pipeline and the same figures from its own clock."""
    clock = tmp_path / "clock.json"
    subprocess.run(
        [sys.executable, str(LOOP), str(tmp_path / "traces"), str(clock), str(gen_s), str(train_s), str(STEPS)],
        check=True,
        timeout=300,
    )
    own = json.loads(clock.read_text())
    wall = merge_intervals(tuple(w) for w in own["steps"][1:])  # the steady state: after the first step
    length = sum(b - a for a, b in wall)
    rollout = _covered(own["generation"], wall) / length
    trainer = _covered(own["training"], wall) / length
    pause = (_covered(own["syncs"] + own["generation"], wall) - _covered(own["generation"], wall)) / length
    expected = {
        "rollout": rollout,
        "trainer": trainer,
        "verdict": verdict(1 - trainer, 1 - rollout, pause)["verdict"],
    }
    report = analyze(span_files(tmp_path / "traces"), jobs=1)
    print("\n".join(format_pipeline(report)))
    return report["pipeline"], expected  # type: ignore[return-value]


def _busy(pipe: dict[str, Any], pool: str) -> float:
    return next(p["busy"] for p in pipe["pools"] if p["pool"] == pool)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("gen_s", "train_s", "bound"),
    [(0.08, 0.02, "rollout-bound"), (0.02, 0.08, "trainer-bound")],
    ids=["rollout", "trainer"],
)
def test_a_real_async_loop_reads_as_its_own_clock(tmp_path: Path, gen_s: float, train_s: float, bound: str) -> None:
    """Each pool's busy share within 3 points of the loop's own clock, the verdict the clock's figures give by
    the SPEC's rules (and the one the sleeps make), a weight sync per step that pauses little, staleness read."""
    pipe, expected = _run(tmp_path, gen_s, train_s)
    # (3 points: the loop's clock and the span's are read a moment apart, and under CI's load (a vLLM engine on
    # the other core) that moment is a context switch now and then: 0.949 against 0.974 once in a 29-step wall)
    assert _busy(pipe, "rollout") == pytest.approx(expected["rollout"], abs=0.03)
    assert _busy(pipe, "trainer") == pytest.approx(expected["trainer"], abs=0.03)
    assert pipe["verdict"]["verdict"] == expected["verdict"] == bound
    assert pipe["steps"] == STEPS - 1 and pipe["weight_sync"]["count"] >= 1
    assert pipe["staleness"] is not None and pipe["staleness"]["max"] >= 0
