"""The code stays ruff and mypy clean and ruff-formatted (the house style's bar)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    """ruff reports nothing across the package, tests and benchmarks."""
    if (
        shutil.which("ruff") is None
        and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode
    ):
        pytest.skip("ruff is not installed")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_owns_the_layout() -> None:
    """Every file is as ``ruff format`` lays it out (tables it must not touch sit in ``# fmt: off``)."""
    if (
        shutil.which("ruff") is None
        and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode
    ):
        pytest.skip("ruff is not installed")
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_mypy_clean() -> None:
    """mypy finds no type errors in lens_rl."""
    pytest.importorskip("mypy")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "lens_rl",
            "--ignore-missing-imports",
            "--python-version",
            "3.10",
            "--no-error-summary",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
