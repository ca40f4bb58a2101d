"""What the real-vLLM tests share (``.ci/vllm.sh``'s venv): the tiny random Qwen2, built once a session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).with_name("vllm_scenario.py")


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The folder of a tiny random Qwen2 and its tokenizer (``vllm_scenario.py model``; no model hub)."""
    path = tmp_path_factory.mktemp("tiny-qwen2")
    subprocess.run([sys.executable, str(SCENARIO), "model", str(path)], check=True, timeout=300)
    return str(path)
