"""Enabled cost: total CPU per phase, lens_rl against a raw OpenTelemetry SDK span exported by OpenTelemetry.

Run:  python benchmarks/enabled_cpu.py [--phases 5000] [--rounds 7] [--json out.json]

What is measured is *process* CPU time (every thread: the phase's own, lens_rl's export
and metrics threads, OpenTelemetry's ``BatchSpanProcessor`` thread) from the first
phase until everything is exported, divided by the phases. Both sides send to the same
OTLP/HTTP sink, a separate process on loopback that reads each request and answers 200
(its CPU is not counted).

* raw: ``TracerProvider`` + ``BatchSpanProcessor`` (queue large enough to drop nothing)
  + OpenTelemetry's ``OTLPSpanExporter``; ``with tracer.start_as_current_span(...)``.
* lens_rl: ``init_telemetry_driver`` with its defaults (live metrics on), exporter
  ``otlp`` to the same sink, or ``file`` (the embedded store);
  ``with traced_phase(name, bucket="productive", attributes=...)``.

Each row is one process running both sides in interleaved blocks (raw, lens_rl, raw,
lens_rl, ...), each block flushed before the next starts; the figure is the median of
the blocks, the ratio the median of per-round ratios, so a machine that speeds up or
slows down between minutes hits both sides alike. Attributes: 1 (``rl.bucket``) or 32
(``rl.bucket`` plus 31 of strings and ints). Goal (issue 14): ratio <= 0.25.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0"); self.end_headers()
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

CASE = """
import json, logging, sys, tempfile, time
exporter, nattrs, phases, rounds, endpoint = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
attrs = {"rl.bucket": "productive", **{f"app.attr_{i}": (f"value-{i}" if i % 2 else i) for i in range(nattrs - 1)}}
user = {k: v for k, v in attrs.items() if k != "rl.bucket"}

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
provider = TracerProvider(resource=Resource.create({"service.name": "raw"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces"),
                                               max_queue_size=1 << 20, max_export_batch_size=512))
tracer = provider.get_tracer("raw")

import lens_rl
lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": exporter, "endpoint": endpoint,
                                             "trace_dir": tempfile.mkdtemp(), "run_id": "bench",
                                             "max_queue_spans": 1 << 20, "max_queue_bytes": 1 << 33}}, "grpo")

def raw_block():
    for _ in range(phases):
        with tracer.start_as_current_span("generation", attributes=attrs):
            pass
    provider.force_flush()

def lens_block():
    for _ in range(phases):
        with lens_rl.traced_phase("generation", bucket="productive", attributes=user):
            pass
    assert lens_rl.flush_telemetry(120_000)

def cpu(block):
    t = time.process_time()
    block()
    return (time.process_time() - t) / phases * 1e6

raw_block(); lens_block()  # warm up both
out = {"raw": [], "lens": []}
for _ in range(rounds):
    out["raw"].append(cpu(raw_block))
    out["lens"].append(cpu(lens_block))
print(json.dumps(out))
"""


def _environment() -> dict[str, str]:
    """This environment without LENS_RL_* and OTEL_* variables (both sides measured at their defaults) and
    without COVERAGE_* (a coverage run traces lens_rl's lines, not OpenTelemetry's: the ratio would lie)."""
    drop = ("LENS_RL_", "OTEL_", "TRACEPARENT", "COVERAGE_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def measure(exporter: str, nattrs: int, phases: int, rounds: int, endpoint: str) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-c", CASE, exporter, str(nattrs), str(phases), str(rounds), endpoint],
        capture_output=True,
        text=True,
        check=False,
        env=_environment(),
    )
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    data = json.loads(res.stdout.strip().splitlines()[-1])
    ratios = [lens / raw for raw, lens in zip(data["raw"], data["lens"], strict=True)]
    return {
        "exporter": exporter,
        "attributes": nattrs,
        "raw_us": statistics.median(data["raw"]),
        "lens_us": statistics.median(data["lens"]),
        "ratio": statistics.median(ratios),
    }


def run(phases: int = 5000, rounds: int = 7, cases: Any = None) -> list[dict[str, Any]]:
    """Every case (default: otlp and file, 1 and 32 attributes) against one sink."""
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True, env=_environment())
    try:
        endpoint = f"http://127.0.0.1:{sink.stdout.readline().strip()}"  # type: ignore[union-attr]
        cases = cases or [(exporter, nattrs) for nattrs in (1, 32) for exporter in ("otlp", "file")]
        return [measure(exporter, nattrs, phases, rounds, endpoint) for exporter, nattrs in cases]
    finally:
        sink.kill()


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'lens_rl exporter':17s} {'attrs':>5s} {'raw OTel us':>12s} {'lens_rl us':>11s} {'ratio':>6s}  goal <= 0.25"
    )
    for r in rows:
        verdict = "ok" if r["ratio"] <= 0.25 else "over goal"
        print(
            f"{r['exporter']:17s} {r['attributes']:5d} {r['raw_us']:12.1f} {r['lens_us']:11.1f} {r['ratio']:6.3f}  {verdict}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=int, default=5000, help="phases per block")
    parser.add_argument("--rounds", type=int, default=7, help="blocks per side")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    rows = run(args.phases, args.rounds)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
