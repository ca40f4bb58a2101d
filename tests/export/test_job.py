"""A small job end to end, on whichever OpenTelemetry release is installed (.ci/otel-range.sh runs it at both
ends of the supported range): a driver and a worker process into the file store, read back by
``lens-rl goodput``; the same job over OTLP/HTTP to a real receiver, one trace across both processes."""

from __future__ import annotations

import json
from pathlib import Path

from lens_rl import testing
from tests.conftest import lens, run_python

_JOB = """
import os, subprocess, sys
import lens_rl
lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, %(telemetry)s}}, "grpo")
worker = '''
import lens_rl
lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="lm_policy")
for step in range(2):
    with lens_rl.traced_phase("policy_training", step=step):
        pass
assert lens_rl.shutdown_telemetry(10000), "worker shutdown lost data"
'''
for step in range(2):
    with lens_rl.traced_phase("step", step=step):
        with lens_rl.traced_phase("generation"):
            pass
subprocess.run([sys.executable, "-c", worker], check=True)  # inherits the driver's projected environment
assert lens_rl.shutdown_telemetry(10000), "driver shutdown lost data"
"""


def test_a_job_writes_the_file_store_and_goodput_reads_it(tmp_path: Path) -> None:
    """Driver and worker write one run folder; lens-rl goodput --json reads both processes and both steps."""
    store = tmp_path / "traces"
    out = run_python(_JOB % {"telemetry": f"'trace_dir': {str(store)!r}, 'run_id': 'job'"}, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    report = lens("goodput", "--json", str(store / "job"))
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert {s["step"] for s in data["steps"]} == {0, 1}
    assert data["job"]["seconds"]["productive"] > 0 and {"driver", "lm_policy"} <= {
        g["worker_group"] for g in data["worker_groups"]
    }


def test_a_job_exports_one_trace_over_otlp(receiver: testing.OTLPReceiver) -> None:
    """Driver and worker spans reach a real OTLP/HTTP receiver, with their metrics, in the job's one trace."""
    telemetry = f"'exporter': 'otlp', 'endpoint': {receiver.endpoint!r}, 'metrics_interval_ms': 200"
    out = run_python(_JOB % {"telemetry": telemetry}, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    names = {s["name"] for s in receiver.spans}
    assert {"rl.job", "step", "generation", "policy_training"} <= names
    assert len({s["trace_id"] for s in receiver.spans}) == 1
    assert {s["resource"]["rl.worker_group"] for s in receiver.spans} == {"driver", "lm_policy"}
    assert "rl.phase.duration" in receiver.metric_names()


def test_goodput_reads_a_store_whose_header_holds_an_integer_past_64_bits(tmp_path: Path) -> None:
    """A store written before identities were range-checked (attempt and rank past 64 bits in a header) is
    still read: lens-rl goodput answers, no traceback."""
    from tests.stores import span, write_process

    huge = 99999999999999999999999
    write_process(tmp_path / "r", "driver", huge, 7, [span("step", 0, 2, "s", step=0)], **{"rl.attempt": huge})
    for args in (("goodput",), ("goodput", "--json")):
        out = lens(*args, str(tmp_path / "r"))
        assert out.returncode == 0, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
