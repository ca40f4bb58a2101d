"""Soak: a collector that accepts and never answers, spans ended at a steady rate.

Run:  python benchmarks/soak_hung_collector.py [--seconds 300] [--rate 5000] [--queue 32768]

Every second it prints the process RSS, the spans ended, the mean cost per phase
(µs), the queue depth and the spans dropped. It checks that memory stays within the
documented bound (queue x ~3 KB plus headroom) and that the cost per phase at the end
is not worse than at the start (beyond noise). Exits 1 when either fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clean_environment

clean_environment()

import lens_rl
from lens_rl import traced_phase
from lens_rl.testing import hung_endpoint

BYTES_PER_QUEUED_SPAN = 3000


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def soak(seconds: float, rate: int, queue: int, out=print) -> dict:  # type: ignore[no-untyped-def]
    url, sock = hung_endpoint()
    handle = lens_rl.init_telemetry_driver(
        {
            "telemetry": {
                "enabled": True,
                "exporter": "otlp",
                "endpoint": url,
                "max_queue_spans": queue,
                "export_timeout_ms": 10_000,
            }
        },
        "grpo",
    )
    start_rss = rss_mb()
    per_tick = max(rate // 100, 1)
    rows = []
    t_end = time.monotonic() + seconds
    out(f"{'t_s':>5s} {'rss_mb':>8s} {'spans':>7s} {'us/phase':>9s} {'queued':>7s} {'dropped':>8s}")
    second = 0
    while time.monotonic() < t_end:
        second += 1
        window_end = time.monotonic() + 1.0
        spans = 0
        busy_s = 0.0
        while time.monotonic() < window_end:
            t0 = time.perf_counter()
            for _ in range(per_tick):
                with traced_phase("generation", step=second):
                    pass
            busy_s += time.perf_counter() - t0
            spans += per_tick
            sleep_s = 0.01 - (time.perf_counter() - t0)
            if sleep_s > 0:
                time.sleep(sleep_s)
        stats = handle.stats()
        row = {
            "t_s": second,
            "rss_mb": rss_mb(),
            "spans": spans,
            "us_per_phase": busy_s / spans * 1e6,
            "queued": stats["queued"],
            "dropped": stats["dropped"],
        }
        rows.append(row)
        out(
            f"{second:5d} {row['rss_mb']:8.1f} {spans:7d} {row['us_per_phase']:9.1f} {row['queued']:7d} {row['dropped']:8d}"
        )
    t0 = time.monotonic()
    ok = lens_rl.shutdown_telemetry(1000)
    shutdown_s = time.monotonic() - t0
    sock.close()
    bound_mb = start_rss + queue * BYTES_PER_QUEUED_SPAN / 2**20 * 1.5 + 50
    head = statistics.median(r["us_per_phase"] for r in rows[: max(len(rows) // 5, 1)])
    tail = statistics.median(r["us_per_phase"] for r in rows[-max(len(rows) // 5, 1) :])
    return {
        "start_rss_mb": start_rss,
        "peak_rss_mb": max(r["rss_mb"] for r in rows),
        "bound_mb": bound_mb,
        "us_per_phase_start": head,
        "us_per_phase_end": tail,
        "dropped": rows[-1]["dropped"],
        "shutdown_s": shutdown_s,
        "shutdown_ok": ok,
        "rows": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--queue", type=int, default=32768)
    args = parser.parse_args()
    result = soak(args.seconds, args.rate, args.queue)
    print(
        f"\nrss {result['start_rss_mb']:.0f} -> peak {result['peak_rss_mb']:.0f} MB (bound {result['bound_mb']:.0f} MB); "
        f"cost per phase {result['us_per_phase_start']:.1f} -> {result['us_per_phase_end']:.1f} us; "
        f"dropped {result['dropped']} (counted); shutdown {result['shutdown_s']:.2f}s (ok={result['shutdown_ok']})"
    )
    bad = (
        result["peak_rss_mb"] > result["bound_mb"]
        or result["us_per_phase_end"] > result["us_per_phase_start"] * 1.5 + 5
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
