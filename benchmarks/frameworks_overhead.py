"""A woven framework timer's cost, side by side with the bare timer, in one process (ns per use).

Run:  python benchmarks/frameworks_overhead.py [--rounds 15] [--json out.json]

Two timer shapes, as frameworks have them: a ``start(name)`` / ``stop(name)`` pair (NeMo-RL's ``Timer``) and a
context manager's ``__enter__`` / ``__exit__`` (TRL's ``ProfilingContext``, SkyRL's ``Timer``), each doing what
those do (``perf_counter`` into a dict). Each is timed bare (a class never woven), woven with telemetry off
(lens_rl's generated plain functions, what the framework modules use), woven through wrapt's
``FunctionWrapper`` with telemetry off (the alternative, for comparison), and woven with telemetry on (each
use a phase, exported into a pipeline whose exporter does nothing). Baseline and case alternate round by
round; medians. The SPEC's goal: woven-off costs at most 1 us more per use than bare. Exits 1 beyond it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import timeit
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clean_environment, null_pipeline

clean_environment()

from lens_rl import testing
from lens_rl._runtime import RUNTIME
from lens_rl.frameworks import _registry
from lens_rl.frameworks._base import Framework, OpenPhases, Weaver

GOAL_NS = 1000.0


def timer_classes() -> tuple[type, type]:
    """A fresh start/stop timer class and a fresh context-manager timer class (one per variant)."""

    class Timer:
        def __init__(self) -> None:
            self.starts: dict[str, float] = {}
            self.seconds: dict[str, float] = {}

        def start(self, name: str) -> None:
            self.starts[name] = time.perf_counter()

        def stop(self, name: str) -> None:
            self.seconds[name] = time.perf_counter() - self.starts.pop(name)

    class Block:
        def __init__(self, name: str) -> None:
            self.name = name
            self.t0 = 0.0

        def __enter__(self) -> Block:
            self.t0 = time.perf_counter()
            return self

        def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> bool:
            self.seconds = time.perf_counter() - self.t0
            return False

    return Timer, Block


PHASES = OpenPhases()
LOOSE = OpenPhases(loose=True)  # a start/stop timer's phases, as NeMo-RL's are woven: never made current


def _start(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    LOOSE.start((id(args[0]), args[1]), args[1])
    return original(*args, **kwargs)


def _stop(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)
    LOOSE.stop((id(args[0]), args[1]))
    return result


def _enter(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    PHASES.start(id(args[0]), args[0].name)
    return original(*args, **kwargs)


def _exit(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    PHASES.stop(id(args[0]))
    return original(*args, **kwargs)


def _wrapt(on_call: Any) -> Any:
    return lambda wrapped, instance, args, kwargs: on_call(wrapped, (instance, *args), kwargs)


def woven(style: str) -> tuple[type, type]:
    """Timer classes woven by a registered stand-in framework, with ``around`` (plain) or ``wrap`` (wrapt)."""
    timer, block = timer_classes()

    def weave(module: Any, weaver: Weaver) -> None:
        if style == "plain":
            weaver.around(timer, "start", _start)
            weaver.around(timer, "stop", _stop)
            weaver.around(block, "__enter__", _enter)
            weaver.around(block, "__exit__", _exit)
        else:
            weaver.wrap(timer, "start", _wrapt(_start))
            weaver.wrap(timer, "stop", _wrapt(_stop))
            weaver.wrap(block, "__enter__", _wrapt(_enter))
            weaver.wrap(block, "__exit__", _wrapt(_exit))

    name = f"bench_{style}"
    _registry.register(Framework(name, "no-such-distribution", ">=0", {"json": weave}))  # (json: imported)
    assert _registry.instrument(name) == [name]
    return timer, block


PAIR = "t.start('gen'); t.stop('gen')"
WITH = "with B('gen'): pass"


def measure(rounds: int, number: int) -> dict[str, dict[str, float]]:
    bare_timer, bare_block = timer_classes()
    plain_timer, plain_block = woven("plain")
    wrapt_timer, wrapt_block = woven("wrapt")
    shapes = {
        "start/stop pair": (PAIR, {"bare": bare_timer, "plain": plain_timer, "wrapt": wrapt_timer}, "t"),
        "enter/exit": (WITH, {"bare": bare_block, "plain": plain_block, "wrapt": wrapt_block}, "B"),
    }
    out: dict[str, dict[str, float]] = {}
    for shape, (stmt, classes, var) in shapes.items():

        def env(kind: str, classes: dict[str, type] = classes, var: str = var) -> dict[str, Any]:
            cls = classes[kind]
            return {var: cls() if var == "t" else cls}

        samples: dict[str, list[float]] = {"bare": [], "woven off": [], "wrapt off": [], "woven on": []}
        for _ in range(rounds):
            testing.reset()
            RUNTIME.mark_off()
            for label, kind in (("bare", "bare"), ("woven off", "plain"), ("wrapt off", "wrapt")):
                samples[label].append(timeit.Timer(stmt, globals=env(kind)).timeit(number) / number * 1e9)
            with null_pipeline():
                samples["woven on"].append(
                    timeit.Timer(stmt, globals=env("plain")).timeit(number // 10) / (number // 10) * 1e9
                )
        out[shape] = {label: statistics.median(values) for label, values in samples.items()}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    results = measure(args.rounds, args.number)
    print(f"{'ns per use':<18}{'bare':>10}{'woven off':>12}{'wrapt off':>12}{'woven on':>12}{'off - bare':>12}")
    failed = False
    for shape, row in results.items():
        over = row["woven off"] - row["bare"]
        failed |= over > GOAL_NS
        cells = "".join(f"{row[k]:>12.0f}" for k in ("woven off", "wrapt off", "woven on"))
        print(f"{shape:<18}{row['bare']:>10.0f}{cells}{over:>12.0f}")
    print(f"goal: woven off at most {GOAL_NS:.0f} ns over bare per use: {'FAILED' if failed else 'met'}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
