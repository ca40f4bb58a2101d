"""veRL's own ``marked_timer``, bare and woven by lens_rl, side by side in one process (ns per use).

Run (where veRL is installed, e.g. ``.ci-venvs/verl``):  python benchmarks/verl_timer_overhead.py [--rounds 15]

Cases: bare (veRL's ``_timer`` as shipped), woven with telemetry off (lens_rl's generated function in front of
it: one flag check and a call), woven with telemetry on (each use a phase, exported into a pipeline whose
exporter does nothing). Bare and each case alternate round by round; medians. The SPEC's goal: woven-off at
most 1 us more per use than bare. Exits 1 beyond it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clean_environment, null_pipeline

clean_environment()

from verl.utils.profiler import marked_timer, performance

from lens_rl import testing
from lens_rl.frameworks import instrument, uninstrument

GOAL_NS = 1000.0


def per_use_ns(number: int) -> float:
    timing_raw: dict[str, float] = {}

    def use() -> None:
        with marked_timer("gen", timing_raw):
            pass

    return timeit.timeit(use, number=number) / number * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    bare_timer = performance._timer
    instrument("verl")
    woven_timer = performance._timer
    rows = {"bare": [], "woven, off": [], "woven, on": []}
    for _ in range(args.rounds):
        performance._timer = bare_timer
        rows["bare"].append(per_use_ns(args.number))
        performance._timer = woven_timer
        rows["woven, off"].append(per_use_ns(args.number))
        with null_pipeline():
            rows["woven, on"].append(per_use_ns(args.number // 10))
    uninstrument("verl")
    testing.reset()
    bare = statistics.median(rows["bare"])
    print(f"{'marked_timer use':<18} {'ns':>8} {'over bare':>10}")
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"{name:<18} {median:>8.0f} {median - bare:>+10.0f}")
    over_off = statistics.median(rows["woven, off"]) - bare
    return 0 if over_off <= GOAL_NS else 1


if __name__ == "__main__":
    sys.exit(main())
