"""``lens-rl run`` beside OpenTelemetry's own tooling: an interpreter of the job without lens_rl (another venv)
whose auto-configuration reads ``OTEL_PYTHON_ID_GENERATOR``, and ``opentelemetry-instrument`` run inside the
job, whose ``sitecustomize`` goes first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env

LENS_RL = [sys.executable, "-m", "lens_rl"]

#: The id generator OpenTelemetry's auto-configuration builds from the environment, or the error it raises.
ID_GENERATOR = """
from opentelemetry.sdk._configuration import _get_id_generator, _import_id_generator
try:
    print("generator", type(_import_id_generator(_get_id_generator())).__name__)
except Exception as exc:
    print("failed", repr(exc))
"""


def _in_job(folder: Path, shell: str) -> subprocess.CompletedProcess[str]:
    """``lens-rl run -- sh -c SHELL`` in ``folder``, its output captured."""
    return subprocess.run(
        [*LENS_RL, "run", "--trace-dir", "t", "--", "sh", "-c", shell],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=120,
    )


def test_an_interpreter_without_lens_rl_keeps_opentelemetrys_own_id_generator(tmp_path: Path) -> None:
    """A Python of the job where lens_rl cannot be imported (here a ``lens_rl`` that fails to import, first
    on its path) does not get ``OTEL_PYTHON_ID_GENERATOR=lens_rl``: OpenTelemetry's auto-configuration there
    builds its default generator instead of failing; where lens_rl is importable it builds lens_rl's."""
    pytest.importorskip("opentelemetry.sdk._configuration")
    elsewhere = tmp_path / "elsewhere" / "lens_rl"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("raise ImportError('no lens_rl in this interpreter')\n")
    (tmp_path / "ids.py").write_text(ID_GENERATOR)
    runs = {}
    # (right after the bootstrap folder, the first entry: the bootstrap runs, lens_rl does not import)
    without = f'PYTHONPATH="${{PYTHONPATH%%:*}}:{elsewhere.parent}:${{PYTHONPATH#*:}}" '
    for case, prefix in (("without", without), ("with", "")):
        out = _in_job(tmp_path, f"{prefix}exec {sys.executable} ids.py")
        runs[case] = out.stdout.strip()
        assert out.returncode == 0, out.stderr
    assert runs["without"] == "generator RandomIdGenerator", runs
    assert runs["with"].startswith("generator") and runs["with"] != "generator RandomIdGenerator", runs


def test_a_python_with_lens_rl_started_by_one_without_gets_lens_rls_id_generator_back(tmp_path: Path) -> None:
    """A launcher interpreter without lens_rl (another venv) that starts the training Python, which has it: the
    launcher's auto-configuration builds OpenTelemetry's default generator, the training process lens_rl's
    (the launcher's drop of ``OTEL_PYTHON_ID_GENERATOR`` reached every process it started)."""
    pytest.importorskip("opentelemetry.sdk._configuration")
    elsewhere = tmp_path / "elsewhere" / "lens_rl"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("raise ImportError('no lens_rl in this interpreter')\n")
    (tmp_path / "ids.py").write_text(ID_GENERATOR)
    (tmp_path / "launcher.py").write_text(
        "import os, subprocess, sys\n"
        + ID_GENERATOR
        + "env = dict(os.environ)\n"
        + f"env['PYTHONPATH'] = env['PYTHONPATH'].replace({str(elsewhere.parent)!r} + ':', '')\n"
        + "sys.exit(subprocess.run([sys.executable, 'ids.py'], env=env).returncode)\n"
    )
    without = f'PYTHONPATH="${{PYTHONPATH%%:*}}:{elsewhere.parent}:${{PYTHONPATH#*:}}" '
    out = _in_job(tmp_path, f"{without}exec {sys.executable} launcher.py")
    assert out.returncode == 0, out.stderr
    launcher, trainer = out.stdout.strip().splitlines()
    assert launcher == "generator RandomIdGenerator", out.stdout
    assert trainer.startswith("generator") and trainer != "generator RandomIdGenerator", out.stdout


def test_opentelemetry_instrument_inside_the_job_is_named_in_the_last_line(tmp_path: Path) -> None:
    """``lens-rl run -- opentelemetry-instrument python ...`` weaves nothing (its ``sitecustomize`` goes first
    and runs no other): the last line says so and gives the order that works."""
    instrument = shutil.which("opentelemetry-instrument", path=os.path.dirname(sys.executable))
    if instrument is None:
        pytest.skip("opentelemetry-instrument is not installed")
    env = clean_env({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"})
    out = subprocess.run(
        [*LENS_RL, "run", "--trace-dir", "t", "--", instrument, sys.executable, "-c", "pass"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    last = out.stderr.splitlines()[-1]
    assert "no process wrote" in last and "opentelemetry-instrument lens-rl run -- " in last, last
