"""Shared fixtures: every test starts with a clean environment and clean lens_rl state."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator

import pytest

from lens_rl import testing

_OWNED_PREFIXES = ("LENS_RL_", "OTEL_")
_OWNED = (
    "TRACEPARENT",
    "TRACESTATE",
    "RANK",
    "WORLD_SIZE",
    "SLURM_JOB_ID",
    "SLURM_RESTART_COUNT",
    "SLURM_JOB_START_TIME",
    "TORCHELASTIC_RESTART_COUNT",
)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """os.environ without lens_rl/OTel/rank variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWNED_PREFIXES) and k not in _OWNED}
    env.update(extra or {})
    return env


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No telemetry env leaks in or out of a test; lens_rl globals are reset around it."""
    for key in list(os.environ):
        if key.startswith(_OWNED_PREFIXES) or key in _OWNED:
            monkeypatch.delenv(key)
    testing.reset()
    yield
    testing.reset()
    for key in list(os.environ):  # variables the code under test added (monkeypatch restores the rest)
        if key.startswith(_OWNED_PREFIXES) or key in _OWNED:
            del os.environ[key]


@pytest.fixture
def receiver() -> Iterator[testing.OTLPReceiver]:
    """A real OTLP/HTTP receiver on loopback."""
    rx = testing.OTLPReceiver()
    yield rx
    rx.close()


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 60, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with a clean telemetry environment."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def run_in_threads(target: Callable[[], object], count: int) -> None:
    """``target`` run on ``count`` threads at once; returns when all have finished."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
