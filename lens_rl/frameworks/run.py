"""``lens-rl run [--trace-dir D] [--instrument NAMES] [--run-id R] -- COMMAND ...``: an unmodified job, traced.

The command runs as a child with telemetry on (the file store by default; any config field through the usual
``LENS_RL_OTEL_*`` variables), ``LENS_RL_OTEL_INSTRUMENT`` set (default ``all``: every supported framework
installed), ``OTEL_PYTHON_ID_GENERATOR=lens_rl`` (read by OpenTelemetry's auto-configuration only: a ``TracerProvider()``
built without an id generator, as vLLM's is, does not read it), and
``lens_rl/frameworks/bootstrap/`` first on ``PYTHONPATH``: its ``sitecustomize`` runs in every Python process
the job starts (Ray workers of a local cluster, multiprocessing children), chains the ``sitecustomize`` that
was there before, and weaves. The first Python process of the job is its driver (it opens the job's root
span, so one job is one trace); the others start telemetry lazily on their first woven phase.

The job's exit status is the command's; SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to ``lens-rl run`` are
forwarded to it; a command killed by signal N exits ``128 + N``, as a shell reports it. Afterwards one line
says where the store is and the one command that reads it.

Example::

    lens-rl run -- python train.py --config grpo.yaml
    lens-rl run --instrument verl --trace-dir /scratch/traces -- python -m verl.trainer.main_ppo ...
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BOOTSTRAP_DIR", "DRIVER_CLAIM_ENV", "job_environment", "run"]

#: The folder whose ``sitecustomize`` weaves every Python process of the job.
BOOTSTRAP_DIR = str(Path(__file__).resolve().parent / "bootstrap")
#: A path the first Python process of the job creates (exclusively) to become its driver.
DRIVER_CLAIM_ENV = "LENS_RL_RUN_DRIVER_CLAIM"
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def job_environment(
    environ: Mapping[str, str],
    *,
    trace_dir: str | None = None,
    instrument: str | None = None,
    run_id: str | None = None,
    claim: str | None = None,
) -> dict[str, str]:
    """The job's environment: telemetry on, the run id fixed, the bootstrap first on ``PYTHONPATH``.

    Raises ``ValueError`` (naming the field) when the resulting config is invalid.
    """
    from lens_rl.config import ENV, TelemetryConfig

    env = dict(environ)
    env[ENV["enabled"]] = "true"
    if trace_dir is not None:
        env[ENV["trace_dir"]] = trace_dir
    if instrument is not None:
        env[ENV["instrument"]] = instrument
    env.setdefault(ENV["instrument"], "all")
    if run_id is not None:
        env[ENV["run_id"]] = run_id
    config = TelemetryConfig.from_env(env)  # validated as a driver would
    env[ENV["run_id"]] = config.run_id or env.get("SLURM_JOB_ID", "").strip() or secrets.token_hex(4)
    env["OTEL_PYTHON_ID_GENERATOR"] = env.get("OTEL_PYTHON_ID_GENERATOR") or "lens_rl"
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOTSTRAP_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *paths])
    if claim is not None:
        env[DRIVER_CLAIM_ENV] = claim
    return env


def run(
    command: Sequence[str],
    *,
    trace_dir: str | None = None,
    instrument: str | None = None,
    run_id: str | None = None,
    out: Any = None,
) -> int:
    """Run ``command`` traced; its exit status (``128 + N`` when killed by signal N). Raises ``ValueError``
    on a bad config and ``FileNotFoundError`` when the command does not exist."""
    out = sys.stderr if out is None else out
    with tempfile.TemporaryDirectory(prefix="lens-rl-run-") as scratch:
        env = job_environment(
            os.environ,
            trace_dir=trace_dir,
            instrument=instrument,
            run_id=run_id,
            claim=os.path.join(scratch, "driver"),
        )
        child = subprocess.Popen(list(command), env=env)
        previous = _forward_signals(child)
        try:
            status = child.wait()
        finally:
            _restore(previous)
    _say_where(env, out)
    return 128 - status if status < 0 else status


def _forward_signals(child: subprocess.Popen[Any]) -> dict[int, Any]:
    def forward(signum: int, frame: Any) -> None:
        if child.poll() is None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

    previous = {}
    for name in _FORWARDED:
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, forward)
    return previous


def _restore(previous: Mapping[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _say_where(env: Mapping[str, str], out: Any) -> None:
    """One line: where the store is and the command that reads it (or where the spans went)."""
    from lens_rl.config import TelemetryConfig, mask_url

    try:
        config = TelemetryConfig.from_env(env)
    except ValueError:
        return
    if config.exporter != "file":
        where = mask_url(config.resolved_endpoint) if config.exporter == "otlp" else config.exporter
        print(f"lens-rl run: run {config.run_id}: spans went to {where}", file=out)
        return
    store = os.path.join(config.trace_dir, config.run_id or "")
    if not os.path.isdir(store):
        print(f"lens-rl run: run {config.run_id}: no process wrote to the store ({store})", file=out)
        return
    print(f"lens-rl run: the store is {store}; read it with: lens-rl goodput {shlex.quote(store)}", file=out)
