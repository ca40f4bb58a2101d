"""Shared fixtures: every test starts with a clean environment and clean lens_rl state."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lens_rl import _errors, testing

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
def _no_internal_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test fails when lens_rl logs an internal error in its process, unless marked to expect one.

    ``_isolated`` requests it, so its teardown runs after the reset's (a shutdown's faults
    count too). Faults in a subprocess are not seen here.
    """
    before = sum(_errors.FAULTS.values())
    yield
    faults = sum(_errors.FAULTS.values()) - before
    if faults and request.node.get_closest_marker("expects_internal_error") is None:
        recent = list(_errors.RECENT)[-min(faults, len(_errors.RECENT)) :]
        pytest.fail(
            f"lens_rl logged {faults} internal error(s) (mark the test expects_internal_error if that is "
            f"the behaviour under test): {recent}",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, _no_internal_errors: None) -> Iterator[None]:
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


def lens(
    *args: str, cwd: str | os.PathLike[str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``lens-rl ARGS`` in a fresh interpreter (from the checkout's root unless ``cwd``), its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "lens_rl", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=cwd or os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        timeout=timeout,
    )


def driver_job(
    receiver: testing.OTLPReceiver, body: str, *, prelude: str = "", metrics: bool = False, timeout: float = 60
) -> Any:
    """Run ``body`` inside a driver job that exports to ``receiver``; fail with the child's stderr."""
    code = (
        "import sys, time, threading, asyncio\n"
        "import lens_rl\n"
        "from lens_rl import traced_phase, with_bucket, attach_context, inject_context\n"
        + prelude
        + f"lens_rl.init_telemetry_driver({{'telemetry': {{'enabled': True, 'exporter': 'otlp', "
        f"'endpoint': {receiver.endpoint!r}, 'metrics_enabled': {metrics!r}, 'metrics_interval_ms': 200}}}}, 'grpo')\n"
        + body
        + "\nassert lens_rl.shutdown_telemetry(10000), 'shutdown lost data'\n"
    )
    out = run_python(code, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["span_id"]: s for s in spans}


def job_root(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return next(s for s in spans if s["name"] == "rl.job")


def run_in_threads(target: Callable[[], object], count: int) -> None:
    """``target`` run on ``count`` threads at once; returns when all have finished."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
