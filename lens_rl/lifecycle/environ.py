"""The environment a job's processes share: what the driver projects for its workers, and what a worker reads.

The driver writes ``LENS_RL_OTEL_*`` (``setdefault``: a variable the user set wins), ``TRACEPARENT`` and the
job's identity into ``os.environ`` once, at the end of a successful start, remembering what it wrote so a
later init (sweeps, notebooks) can undo it and honour its own config.
"""

from __future__ import annotations

import os

from lens_rl._errors import warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.config import ENV, near_telemetry_key, parse_bool, unknown_env_names

__all__ = [
    "forget_projection",
    "project",
    "telemetry_enabled_in_env",
    "vllm_native_tracing_requested",
    "warn_about_env",
]


def telemetry_enabled_in_env() -> bool:
    """True when this process's environment turns telemetry on (never raises; a bad value warns once)."""
    env = os.environ
    try:
        if "OTEL_SDK_DISABLED" in env and parse_bool(env["OTEL_SDK_DISABLED"], "OTEL_SDK_DISABLED"):
            return False
        return parse_bool(env.get(ENV["enabled"], ""), f"enabled (from ${ENV['enabled']})")
    except ValueError as exc:
        warn_once("enabled-env", "lens_rl: telemetry off in this process, bad environment: %s", exc)
        return False


def warn_about_env(master_config: object = None) -> None:
    """Did-you-mean warnings: an unknown ``LENS_RL_OTEL_*`` variable, a misspelt ``telemetry`` block."""
    for name, close in unknown_env_names():
        hint = f"; did you mean {close}?" if close else ""
        warn_once(f"unknown-env-{name}", "lens_rl: unknown environment variable %s is ignored%s", name, hint)
    near = near_telemetry_key(master_config)
    if near is not None:
        warn_once(
            f"near-telemetry-{near}",
            "lens_rl: the master config has no 'telemetry' block but a key %r; "
            "did you mean 'telemetry'? Telemetry stays off.",
            near,
        )


def project(name: str, value: str, *, overwrite: bool = False) -> None:
    """Write ``name`` into the environment for workers (``setdefault`` unless ``overwrite``), remembering it."""
    before = os.environ.get(name)
    if before is not None and not overwrite:
        return
    known = RUNTIME.projected.get(name)
    if known is not None and before == known[0]:
        before = known[1]  # (still what lens_rl wrote: what was there before it is what shutdown puts back)
    os.environ[name] = value
    RUNTIME.projected[name] = (value, before)


def forget_projection() -> None:
    """Undo an earlier init's environment writes (those nobody changed since): re-init honours its config."""
    for name, (value, before) in list(RUNTIME.projected.items()):
        if os.environ.get(name) == value:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before
    RUNTIME.projected.clear()


def vllm_native_tracing_requested() -> bool:
    """True when telemetry is on *and* ``vllm_native_tracing`` asks for vLLM's own tracing."""
    try:
        return telemetry_enabled_in_env() and parse_bool(os.environ.get(ENV["vllm_native_tracing"], ""))
    except ValueError:
        return False
