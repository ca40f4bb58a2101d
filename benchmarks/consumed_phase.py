"""What a training phase saying what it consumed costs: ``traced_phase(..., trajectory_versions=[4096 ints],
trajectory_tokens=[4096 ints])`` against the same phase without them.

Run:  python benchmarks/consumed_phase.py [--items 4096] [--rounds 15] [--json out.json]

In one process, interleaved rounds (medians compared, so a noisy neighbour hits both sides alike), telemetry on
(a no-op export pipeline) and off: ``plain`` is ``with traced_phase("policy_training", step=s): pass``;
``listed`` adds the two lists of ``--items`` each (a batch of a few versions, as a real one is); ``numpy`` the
same as numpy arrays (where numpy is installed). The figures are µs per phase and the extra over ``plain``: the
staleness keywords are checked and recorded as a version histogram once per phase (a training step's phase,
seconds long: the figure is what one step pays). Run it on two trees (``PYTHONPATH=<tree>``) to compare them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import timeit
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clean_environment, null_pipeline

clean_environment()

from lens_rl import traced_phase


def _cases(items: int) -> dict[str, Any]:
    versions = [7 - (n % 4) for n in range(items)]  # four versions, interleaved (a mixed batch)
    tokens = [100 + n % 50 for n in range(items)]

    def plain() -> None:
        with traced_phase("policy_training", step=7):
            pass

    def listed() -> None:
        with traced_phase("policy_training", step=7, trajectory_versions=versions, trajectory_tokens=tokens):
            pass

    cases = {"plain": plain, "listed": listed}
    try:
        import numpy as np
    except ImportError:
        return cases
    versions_np, tokens_np = np.array(versions, np.int64), np.array(tokens, np.int64)

    def numpy() -> None:
        with traced_phase("policy_training", step=7, trajectory_versions=versions_np, trajectory_tokens=tokens_np):
            pass

    cases["numpy"] = numpy
    return cases


def _timed(cases: dict[str, Any], rounds: int, number: int) -> dict[str, float]:
    got: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            got[name].append(timeit.timeit(case, number=number) / number * 1e6)
    return {name: round(statistics.median(values), 2) for name, values in got.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=50)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    cases = _cases(args.items)
    off = _timed(cases, args.rounds, args.number)
    with null_pipeline():
        on = _timed(cases, args.rounds, args.number)
    result = {"items": args.items, "off_us": off, "on_us": on}
    for mode, figures in (("off", off), ("on", on)):
        extra = {name: round(us - figures["plain"], 2) for name, us in figures.items() if name != "plain"}
        print(f"{mode:3s} µs/phase: {figures}  extra over plain: {extra}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
