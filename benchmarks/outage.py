"""A collector outage: up, down for --outage-s seconds (spans keep ending), back on the same port.

Run:  python benchmarks/outage.py [--outage-s 60] [--rate 200]

Reports spans ended before, during and after the outage, how many the collector
received, how long delivery took once it was back, and what was dropped (counted).
Exits 1 when a span that fit in the queue was lost.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clean_environment

clean_environment()

import lens_rl
from lens_rl import traced_phase
from lens_rl.testing import OTLPReceiver


def run(outage_s: float, rate: int) -> int:
    rx = OTLPReceiver()
    port = rx.endpoint.rsplit(":", 1)[1]
    handle = lens_rl.init_telemetry_driver(
        {
            "telemetry": {
                "enabled": True,
                "exporter": "otlp",
                "endpoint": rx.endpoint,
                "export_timeout_ms": 2000,
                "metrics_enabled": False,
            }
        },
        "grpo",
    )

    def phases(seconds: float, name: str) -> int:
        count = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(max(rate // 10, 1)):
                with traced_phase(name):
                    pass
                count += 1
            time.sleep(0.1)
        return count

    before = phases(2, "before")
    lens_rl.flush_telemetry(5000)
    rx.close()
    print(f"collector down for {outage_s:.0f}s ...", flush=True)
    during = phases(outage_s, "during")
    rx = OTLPReceiver(port=int(port))
    t0 = time.monotonic()
    delivered = lens_rl.flush_telemetry(120_000)
    recover_s = time.monotonic() - t0
    after = phases(2, "after")
    ok = lens_rl.shutdown_telemetry(10_000)
    got = {name: sum(s["name"] == name for s in rx.spans) for name in ("during", "after")}
    stats = handle.stats()
    rx.close()
    print(f"ended: before {before}, during {during}, after {after}")
    print(f"received after the outage: during {got['during']}/{during}, after {got['after']}/{after}")
    print(
        f"delivery once back: {recover_s:.1f}s (flush={delivered}); dropped {stats['dropped']}, failed {stats['failed']}; "
        f"shutdown ok={ok}"
    )
    lost = during - got["during"] - stats["dropped"]
    return 1 if lost > 0 or got["after"] != after else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage-s", type=float, default=60)
    parser.add_argument("--rate", type=int, default=200)
    args = parser.parse_args()
    return run(args.outage_s, args.rate)


if __name__ == "__main__":
    sys.exit(main())
