"""What profiler windows cost when none opens: a step boundary with a ``profile`` config that never matches.

Run:  python benchmarks/profile_boundary.py [--rounds 25] [--json out.json]

Three figures, each timed in interleaved rounds against its baseline (medians compared, so a noisy neighbour hits
both sides alike), in one process with telemetry on and a no-op export pipeline:

* ``boundary``: the hook's own call, ``Profiler.boundary(step, None)``, with a new step every call (every call is
  a boundary: the worst case), ``profile`` = ``steps=1000000-1000001`` (never reached); the request file is
  looked at once a second. Goal: at most 2 µs.
* ``umbrella``: ``with traced_phase("step", step=s): pass`` with the hook installed vs none (``RUNTIME.step_hook``
  None): what a step umbrella pays for the boundary, in place.
* ``phase``: a phase inside a step (``with traced_phase("forward")``, carrying the step) with and without the
  hook: the hot path, unchanged (the hook is only called when the step changes).
* ``auto_phase``: a worker's phase carrying its step with ``steps: auto``'s per-step tally kept vs not: what
  ``auto`` adds to every phase of a worker.
* ``auto_boundary``: a worker's step boundary with ``steps: auto`` (its step line appended) vs ``boundary``.

Exits 1 when ``boundary`` is beyond twice its goal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import timeit
from itertools import count
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clean_environment, null_pipeline

clean_environment()

from lens_rl import traced_phase
from lens_rl._runtime import RUNTIME
from lens_rl.config.profile import as_profile
from lens_rl.devices.profile import Profiler

GOAL_BOUNDARY_NS = 2000.0
#: What the baseline (a Python call of ``next`` on a counter) costs on an unloaded machine: figures are also given
#: normalised by the measured baseline against it (``over * reference / baseline``), as overhead.py does.
REFERENCE_BASELINE_NS = 50.0


def _median_pair(base: Any, case: Any, rounds: int, number: int) -> tuple[float, float]:
    b, c = [], []
    for _ in range(rounds):
        b.append(timeit.timeit(base, number=number) / number * 1e9)
        c.append(timeit.timeit(case, number=number) / number * 1e9)
    return statistics.median(b), statistics.median(c)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder, null_pipeline(trace_dir=folder, run_id="bench") as rec:
        spec = as_profile("steps=1000000-1000001,backend=torch", "profile")
        handle = rec.handle

        class _Config:
            def __getattr__(self, name: str) -> Any:
                return spec if name == "profile" else getattr(handle.config, name)

        class _Handle:
            config = _Config()
            resource = handle.resource
            role = "driver"

        profiler = Profiler(_Handle())
        steps = count()

        def call_boundary() -> None:
            profiler.boundary(next(steps), None)

        def nothing() -> None:
            next(steps)

        base, case = _median_pair(nothing, call_boundary, args.rounds, args.number)
        results["boundary"] = {
            "baseline_ns": base,
            "case_ns": case,
            "over_ns": case - base,
            "over_at_reference_ns": (case - base) * REFERENCE_BASELINE_NS / base,
            "goal_ns": GOAL_BOUNDARY_NS,
        }

        umbrella_steps = count()

        def umbrella() -> None:
            with traced_phase("step", step=next(umbrella_steps) % 1000):
                pass

        def with_hook() -> None:
            RUNTIME.step_hook = profiler
            umbrella()

        def without_hook() -> None:
            RUNTIME.step_hook = None
            umbrella()

        number = max(args.number // 10, 100)
        base, case = _median_pair(without_hook, with_hook, args.rounds, number)
        results["umbrella"] = {"baseline_ns": base, "case_ns": case, "over_ns": case - base}

        def inner(hook: Any) -> Any:
            def run() -> None:
                RUNTIME.step_hook = hook
                with traced_phase("forward"):
                    pass

            return run

        with traced_phase("step", step=7):
            profiler.boundary(7, None)
            base, case = _median_pair(inner(None), inner(profiler), args.rounds, number)
        results["phase"] = {"baseline_ns": base, "case_ns": case, "over_ns": case - base}
        RUNTIME.step_hook = None

        def worker_phase(tally: Any) -> Any:
            def run() -> None:
                RUNTIME.step_tally = tally
                with traced_phase("forward", bucket="productive", step=7):
                    pass

            return run

        base, case = _median_pair(worker_phase(None), worker_phase({}), args.rounds, number)
        results["auto_phase"] = {"baseline_ns": base, "case_ns": case, "over_ns": case - base}
        RUNTIME.step_tally = None
        auto_spec = as_profile("steps=auto,backend=torch", "profile")

        class _AutoConfig(_Config):
            def __getattr__(self, name: str) -> Any:
                return auto_spec if name == "profile" else getattr(handle.config, name)

        class _AutoHandle(_Handle):
            config = _AutoConfig()
            role = "worker"

        auto = Profiler(_AutoHandle())
        RUNTIME.step_tally = {}
        auto_steps = count()

        def auto_boundary() -> None:
            auto.boundary(next(auto_steps), None)

        base, case = _median_pair(call_boundary, auto_boundary, args.rounds, max(args.number // 100, 100))
        results["auto_boundary"] = {"baseline_ns": base, "case_ns": case, "over_ns": case - base}
        RUNTIME.step_tally = None
    for name, row in results.items():
        goal = (
            f"  (at reference {row['over_at_reference_ns']:.0f} ns; goal {row['goal_ns']:.0f} ns)"
            if "goal_ns" in row
            else ""
        )
        print(
            f"{name:10s} baseline {row['baseline_ns']:9.0f} ns  with the hook {row['case_ns']:9.0f} ns  "
            f"over {row['over_ns']:7.0f} ns{goal}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)
    return 1 if results["boundary"]["over_at_reference_ns"] > 2 * GOAL_BOUNDARY_NS else 0


if __name__ == "__main__":
    sys.exit(main())
