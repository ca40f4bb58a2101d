"""Speed checks moved out of the suite (run on demand: ``pytest benchmarks``): each asserts a cost, so a busy
machine can fail it; the behaviour each one times stays asserted in ``tests/``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from lens_rl._attributes import clean_value
from lens_rl.offline.show.status import format_status, run_status

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' helpers (a heartbeat as a process writes it)

from tests.conftest import clean_env
from tests.offline.test_status import NOW, beat, phase
from tests.test_attributes import hostile_values


def test_import_cost_is_within_budget_of_wrapt() -> None:
    """`import lens_rl` costs at most 10 ms more than `import wrapt` (best of 7, interleaved; 3x headroom)."""

    def once(module: str) -> float:
        code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
        out = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, cwd=ROOT)
        return float(out.stdout)

    # Interleaved, and the best of 7 each: load on a shared machine only ever adds time.
    samples: dict[str, list[float]] = {"lens_rl": [], "wrapt": []}
    for _ in range(7):
        for module in samples:
            samples[module].append(once(module))
    assert min(samples["lens_rl"]) <= min(samples["wrapt"]) + 0.010 * 3, samples


def test_coercion_of_hostile_values_takes_milliseconds() -> None:
    """A cyclic, a 10,000-deep and a 100,000-key value are each coerced in under 0.25 s (~ms here)."""
    for value in hostile_values():
        t0 = time.perf_counter()
        clean_value(value)
        elapsed_s = time.perf_counter() - t0
        assert elapsed_s < 0.25, elapsed_s


def test_two_thousand_heartbeats_are_summarised_in_under_a_second(tmp_path: Path) -> None:
    """2,000 heartbeats are read and summarised in under a second (it takes a fraction)."""
    run = tmp_path / "r"
    beat(run, "driver", 0, 1)
    for rank in range(1999):
        beat(run, "lm_policy", rank, 100 + rank, open_phases=[phase("policy_training", 5)])
    started = time.perf_counter()
    format_status(run_status(run, NOW))
    elapsed_s = time.perf_counter() - started
    assert elapsed_s < 1.0, elapsed_s
