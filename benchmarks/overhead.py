"""lens_rl overhead, side by side with a bare call and raw OpenTelemetry, in one process.

Run:  python benchmarks/overhead.py [--rounds 25] [--json out.json] [--pure-python]

``--pure-python`` measures as if no C compiler had been there at install time (the
goals are then twice as wide for calls and a bare ``with``, four times for the keyword forms: the SPEC's
settled decision).

Each case is timed against its baseline in interleaved rounds (baseline, case,
baseline, case, ...) and the medians are compared, so a noisy neighbour hits both
sides alike. Goals are the issue's, stated for machines where a bare call costs
~25 ns and a preallocated no-op ``with`` ~120 ns. Machines (and one machine, from one
minute to the next) differ, so each case's "over baseline" is also normalised by its
own interleaved baseline against that baseline's reference cost
(``over * reference_baseline / measured_baseline``); the verdict uses the normalised
figure. The script exits 1 when any case is beyond twice its goal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit
from typing import Any

REFERENCE_BARE_NS = 25.0
REFERENCE_WITH_NS = 120.0

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clean_environment, null_pipeline

clean_environment()
PURE_PYTHON = "--pure-python" in sys.argv
if PURE_PYTHON:
    sys.modules["lens_rl.record._speedups"] = None  # type: ignore[assignment]

import lens_rl
from lens_rl import Bucket, testing, traced_phase
from lens_rl.record._impl import ACCELERATED as _ACCELERATED


class _Noop:
    """A preallocated no-op context manager: the floor for any ``with`` statement."""

    __slots__ = ()

    def __enter__(self) -> _Noop:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        return None


def bare(x: int) -> int:
    return x


class Obj:
    def meth(self, x: int) -> int:
        return x

    @traced_phase("policy_training")
    def traced_meth(self, x: int) -> int:
        return x


traced = traced_phase("generation")(bare)


def interleaved(
    pairs: dict[str, tuple[str, str]], env: dict[str, Any], rounds: int, number: int
) -> dict[str, tuple[float, float]]:
    """case -> (baseline median ns, case median ns), timed alternately."""
    out = {}
    for name, (base_stmt, case_stmt) in pairs.items():
        tb = timeit.Timer(base_stmt, globals=env)
        tc = timeit.Timer(case_stmt, globals=env)
        b, c = [], []
        for _ in range(rounds):
            b.append(tb.timeit(number) / number * 1e9)
            c.append(tc.timeit(number) / number * 1e9)
        out[name] = (statistics.median(b), statistics.median(c))
    return out


def import_cost_ms(module: str, runs: int = 7) -> float:
    samples = []
    for _ in range(runs):
        code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
        samples.append(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout))
    return statistics.median(samples) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--number", type=int, default=50_000)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--pure-python", action="store_true", help="without the C accelerator (goals x2, keyword forms x4)"
    )
    parser.add_argument(
        "--no-enabled-cpu",
        action="store_true",
        help="skip the enabled CPU-per-phase table (benchmarks/enabled_cpu.py, ~30 s)",
    )
    args = parser.parse_args(argv)

    testing.reset()
    traced(1)  # resolve the environment: telemetry off
    assert lens_rl.get_telemetry_handle() is None
    obj = Obj()
    # PRODUCTIVE is hoisted: on Python 3.11 evaluating `Bucket.PRODUCTIVE` costs ~180 ns by
    # itself (Enum member lookup), a cost of the argument expression, not of lens_rl.
    env = {
        "bare": bare,
        "traced": traced,
        "obj": obj,
        "NOOP": _Noop(),
        "traced_phase": traced_phase,
        "PRODUCTIVE": Bucket.PRODUCTIVE,
        "ATTRS": {"gen_ai.model": "m"},
        "CARRIER": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    }
    disabled = interleaved(
        {
            "@traced_phase function call": ("bare(1)", "traced(1)"),
            "@traced_phase method call": ("obj.meth(1)", "obj.traced_meth(1)"),
            'with traced_phase("x")': ("with NOOP: pass", 'with traced_phase("x"): pass'),
            "same with bucket= and one keyword": (
                "with NOOP: pass",
                'with traced_phase("x", bucket=PRODUCTIVE, step=1): pass',
            ),
            'same, bucket="productive" (a string)': (
                "with NOOP: pass",
                'with traced_phase("x", bucket="productive", step=1): pass',
            ),
            "same with attributes={...}": (
                "with NOOP: pass",
                'with traced_phase("x", attributes=ATTRS, step=1): pass',
            ),
            "same with parent=carrier": (
                "with NOOP: pass",
                'with traced_phase("x", parent=CARRIER, step=1): pass',
            ),
        },
        env,
        args.rounds,
        args.number,
    )
    bare_ns = disabled["@traced_phase function call"][0]
    scale = REFERENCE_BARE_NS / bare_ns

    # Enabled: lens_rl vs raw OpenTelemetry on the same provider and the same processor.
    with null_pipeline() as rec:
        tracer = rec.handle.tracer

        # Raw OpenTelemetry records the same attribute lens_rl adds (rl.bucket), so the
        # comparison is of the layer, not of how much is recorded.
        @tracer.start_as_current_span("generation", attributes={"rl.bucket": "productive"})
        def raw_traced(x: int) -> int:
            return x

        env.update(tracer=tracer, raw_traced=raw_traced)
        enabled = interleaved(
            {
                'with traced_phase("x") vs start_as_current_span': (
                    'with tracer.start_as_current_span("x"): pass',
                    'with traced_phase("x"): pass',
                ),
                "@traced_phase function vs OTel decorator": ("raw_traced(1)", "traced(1)"),
            },
            env,
            args.rounds,
            2000,
        )

    import_lens = import_cost_ms("lens_rl")
    import_wrapt = import_cost_ms("wrapt")

    goals = {  # case -> (goal ns over baseline, the baseline's reference cost ns)
        "@traced_phase function call": (50, REFERENCE_BARE_NS),
        "@traced_phase method call": (80, REFERENCE_BARE_NS),
        'with traced_phase("x")': (50, REFERENCE_WITH_NS),
        "same with bucket= and one keyword": (120, REFERENCE_WITH_NS),
        'same, bucket="productive" (a string)': (120, REFERENCE_WITH_NS),
        "same with attributes={...}": (120, REFERENCE_WITH_NS),
        "same with parent=carrier": (120, REFERENCE_WITH_NS),
    }
    if PURE_PYTHON:  # the SPEC's settled decision: 2x for calls and a bare with, 4x for the keyword forms
        goals = {name: (goal * (4 if goal == 120 else 2), ref) for name, (goal, ref) in goals.items()}
    rows = []
    failed = False
    print(
        f"bare call here: {bare_ns:.1f} ns (reference {REFERENCE_BARE_NS:.0f} ns); "
        f"C accelerator: {'off (goals x2, keyword forms x4)' if PURE_PYTHON else 'on' if _ACCELERATED else 'not built'}\n"
    )
    print(f"{'disabled path':40s} {'base ns':>8s} {'lens ns':>8s} {'over':>7s} {'over@ref':>8s} {'goal':>5s}  verdict")
    for name, (b, c) in disabled.items():
        over = c - b
        goal, reference_ns = goals[name]
        norm = over * reference_ns / b
        verdict = "ok" if norm <= goal else ("over goal" if norm <= 2 * goal else "FAIL (>2x goal)")
        failed |= norm > 2 * goal
        rows.append(
            {
                "case": name,
                "baseline_ns": b,
                "lens_ns": c,
                "over_ns": over,
                "over_ns_at_reference": norm,
                "goal_ns": goal,
                "verdict": verdict,
            }
        )
        print(f"{name:40s} {b:8.1f} {c:8.1f} {over:7.1f} {norm:8.1f} {goal:5d}  {verdict}")
    print(f"\n{'enabled path':52s} {'raw OTel ns':>11s} {'lens ns':>9s} {'over':>8s} {'over %':>7s}  verdict")
    for name, (b, c) in enabled.items():
        over = c - b
        pct = over / b * 100
        norm = over * scale  # enabled costs: normalised by the bare call
        ok = norm <= 2000 or pct <= 15
        verdict = "ok" if ok else ("over goal" if norm <= 4000 or pct <= 30 else "FAIL (>2x goal)")
        failed |= verdict.startswith("FAIL")
        rows.append(
            {
                "case": name,
                "raw_otel_ns": b,
                "lens_ns": c,
                "over_ns": over,
                "over_pct": pct,
                "over_ns_at_reference": norm,
                "goal": "<= 2000 ns or 15 %",
                "verdict": verdict,
            }
        )
        print(f"{name:52s} {b:11.0f} {c:9.0f} {over:8.0f} {pct:6.1f}%  {verdict} ({norm:.0f} ns at reference)")
    extra_ms = import_lens - import_wrapt
    verdict = "ok" if extra_ms <= 10 else ("over goal" if extra_ms <= 20 else "FAIL (>2x goal)")
    failed |= verdict.startswith("FAIL")
    rows.append(
        {
            "case": "import lens_rl vs import wrapt",
            "lens_ms": import_lens,
            "wrapt_ms": import_wrapt,
            "extra_ms": extra_ms,
            "goal_ms": 10,
            "verdict": verdict,
        }
    )
    print(
        f"\nimport lens_rl {import_lens:.1f} ms vs import wrapt {import_wrapt:.1f} ms: {extra_ms:+.1f} ms (goal <= +10)  {verdict}"
    )
    if not args.no_enabled_cpu:
        import enabled_cpu

        print("\nenabled, total CPU per phase (every thread, until exported) vs raw OpenTelemetry + its OTLP exporter:")
        cpu_rows = enabled_cpu.run(phases=5000, rounds=5)
        enabled_cpu.print_table(cpu_rows)
        rows.extend(
            {"case": f"enabled CPU per phase, {r['exporter']}, {r['attributes']} attributes", **r} for r in cpu_rows
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"bare_call_ns": bare_ns, "rows": rows}, handle, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
