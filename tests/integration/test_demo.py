"""The README's first command: `lens-rl demo` end to end on a real local Ray cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import clean_env

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def test_demo_runs_traces_and_prints_goodput(tmp_path: Path) -> None:
    """The demo finishes in under a minute, prints a line per step and the table, and leaves a trace."""
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "lens_rl", "demo", "--steps", "2", "--trace-dir", str(tmp_path)],
                         capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=180)  # fmt: skip
    elapsed_s = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert elapsed_s < 120  # ~20 s here; wide headroom for a busy machine
    assert "step 1/2" in out.stdout and "step 2/2" in out.stdout and "goodput" in out.stdout
    assert "workers 4/4 flushed" in out.stdout
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert (run_dir / "trace.perfetto.json").exists()
    report = json.loads(subprocess.run([sys.executable, "-m", "lens_rl", "goodput", str(tmp_path), "--json"],
                                       capture_output=True, text=True, env=clean_env()).stdout)  # fmt: skip
    groups = {g["worker_group"] for g in report["worker_groups"]}
    assert groups == {"driver", "lm_policy", "vllm_policy", "rollout_server"}
    assert report["job"]["seconds"]["wasted"] > 0 and report["job"]["seconds"]["idle"] > 0
    assert 0 < report["goodput"] < 1
