"""Which attempt of a job this is, and when it was launched: from the user's or the driver's variable, the
store's earlier driver files, or a scheduler's restart count."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from lens_rl.config import ATTEMPT_ENV, LAUNCH_TIME_ENV, TelemetryConfig
from lens_rl.identity.attributes import INT_LIMIT

__all__ = [
    "LAUNCH_MAX_AGE_S",
    "RESTART_COUNT_ENV",
    "attempt_from_env",
    "attempt_value",
    "launch_time_ns",
    "run_folder",
    "resolve_attempt",
]

#: What schedulers count restarts in, tried in order after the user's value and the store.
RESTART_COUNT_ENV = ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")
#: A launch time further back than this is not this attempt's (a stale variable): no launch span.
LAUNCH_MAX_AGE_S = 7 * 24 * 3600


def attempt_value(text: object) -> int | None:
    """An attempt as written in the environment: an int in [0, 2^31), else None."""
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if 0 <= value < INT_LIMIT else None


def attempt_from_env(env: Mapping[str, str]) -> int | None:
    """``LENS_RL_OTEL_ATTEMPT`` as the user (or the driver) set it; None when unset. A value that is no
    integer in [0, 2^31) raises ``ValueError`` naming it (a worker turns that into one warning)."""
    text = env.get(ATTEMPT_ENV)
    if text is None or not text.strip():
        return None
    value = attempt_value(text)
    if value is None:
        raise ValueError(
            f"{ATTEMPT_ENV}={text!r} is not valid: expected an integer in [0, 2^31) (0 for the first attempt)"
        )
    return value


def run_folder(config: TelemetryConfig) -> str:
    """The file store's folder of ``config``'s run: ``trace_dir/<run id as a safe path part>``."""
    from lens_rl.store import safe_part

    return os.path.join(config.trace_dir, safe_part(config.run_id, "run"))


def resolve_attempt(config: TelemetryConfig, env: Mapping[str, str]) -> tuple[int, int | None]:
    """The driver's attempt, resolved once (the SPEC's order): ``LENS_RL_OTEL_ATTEMPT`` as set; else, with
    the file store, one more than the highest attempt of the driver files already in
    ``trace_dir/<run_id>/``; else ``SLURM_RESTART_COUNT`` / ``TORCHELASTIC_RESTART_COUNT``; else 0. And,
    with the file store, when the run's files were last written (ns; None for a new run)."""
    earlier: set[int] = set()
    last_write: int | None = None
    if config.exporter == "file":
        from lens_rl.store import driver_attempts

        earlier, last_write = driver_attempts(run_folder(config))
    given = attempt_from_env(env)
    if given is not None:
        return given, last_write
    if earlier:
        return max(earlier) + 1, last_write
    for name in RESTART_COUNT_ENV:
        value = attempt_value(env.get(name))
        if value is not None:
            return value, last_write
    return 0, last_write


def launch_time_ns(env: Mapping[str, str], now_ns: int, after_ns: int | None = None) -> tuple[int, str] | None:
    """When this attempt was launched, and the variable that says so: ``LENS_RL_OTEL_LAUNCH_TIME`` (epoch
    seconds, a launcher's; a value that is no number, or a finite one outside the store's years 2000 to 2200,
    raises ``ValueError`` naming it), else ``SLURM_JOB_START_TIME`` (a bad value there is passed over); only when it is earlier than ``now_ns`` by less than 7 days, and not before
    ``after_ns`` (the run's last write: a time before it is an earlier attempt's, left in the environment)."""
    for name in (LAUNCH_TIME_ENV, "SLURM_JOB_START_TIME"):
        text = env.get(name)
        if text is None or not text.strip():
            continue
        try:
            seconds = float(text.strip())
        except ValueError:
            if name == LAUNCH_TIME_ENV:
                raise ValueError(
                    f"{LAUNCH_TIME_ENV}={text!r} is not valid: expected epoch seconds (e.g. $(date +%s.%N))"
                ) from None
            continue
        if not math.isfinite(seconds):
            continue
        from lens_rl.store.format import TIME_MAX_NS, TIME_MIN_NS

        if not TIME_MIN_NS <= seconds * 1e9 < TIME_MAX_NS:  # 1e300 s: no time a store can hold
            if name == LAUNCH_TIME_ENV:
                raise ValueError(
                    f"{LAUNCH_TIME_ENV}={text!r} is not valid: expected epoch seconds between "
                    f"{TIME_MIN_NS // 10**9} and {TIME_MAX_NS // 10**9} (years 2000 to 2200)"
                )
            continue
        launched = int(seconds * 1e9)
        if 0 < now_ns - launched < LAUNCH_MAX_AGE_S * 1e9 and (after_ns is None or launched >= after_ns):
            return launched, name
    return None
