"""The enabled path's cost ratio as a pytest check (run on demand: ``pytest benchmarks``, outside the suite).

Total CPU per phase, export included (benchmarks/enabled_cpu.py, both sides in one process, interleaved),
stays under 0.6x of a raw SDK span exported by OpenTelemetry's OTLP exporter (the goal is 0.25; the
headroom absorbs a busy machine).
"""

from __future__ import annotations

from enabled_cpu import run


def test_an_enabled_phase_costs_well_under_a_raw_opentelemetry_span_exported() -> None:
    """lens_rl's phase, exported, costs well under a raw OpenTelemetry SDK span exported."""
    rows = run(phases=2000, rounds=3, cases=[("otlp", 1), ("file", 32)])
    assert all(r["ratio"] <= 0.6 for r in rows), rows
