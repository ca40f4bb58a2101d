"""The device check (benchmarks/gpu_check.py) runs here too: without a GPU it says so and exits cleanly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lens_rl.testing import nvml
from tests.conftest import clean_env

SCRIPT = str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py")


def test_without_a_gpu_it_says_so_and_exits_0_or_1_when_required(tmp_path: Path) -> None:
    """No GPU (no torch, or only the stand-in NVML): one line saying so, no traceback; --require-gpu exits 1."""
    scenario = nvml.write_scenario(tmp_path / "gpus.json", [{"uuid": "GPU-fake"}])
    for env in (clean_env(), clean_env(nvml.env(scenario, base={}))):
        out = subprocess.run([sys.executable, SCRIPT], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "no NVIDIA GPU to check here" in out.stdout and "Traceback" not in out.stderr
    out = subprocess.run(
        [sys.executable, SCRIPT, "--require-gpu"], env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1 and "no NVIDIA GPU" in out.stdout
