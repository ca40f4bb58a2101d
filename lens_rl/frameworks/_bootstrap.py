"""What ``lens-rl run``'s ``sitecustomize`` does in each Python process of the job: weave the configured
frameworks, and wait for the process's first step. The driver is the process that runs the training loop:
the first of the job to open a step (a step umbrella, a framework's woven step, a ``traced_phase`` with
``step=``) or to call ``init_telemetry_driver`` claims the role then (:mod:`lens_rl.lifecycle.launched`: a
file created exclusively) and starts as the driver; of ranks that all run the loop, ``RANK`` 0 alone claims.
Every other process is a worker, its telemetry started lazily by its first phase. A process that opens no
step (``python -c 'import torch'``, ``pip``, a launcher such as ``torchrun``, ``ray job submit``) claims
nothing and, with no phase, writes nothing. Never raises.
"""

from __future__ import annotations

import os
import sys

__all__ = ["start", "without_site"]

#: The folder of lens-rl run's ``sitecustomize`` (``frameworks/bootstrap``).
_SITE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "bootstrap")
_started: list[bool] = []


def start() -> None:
    """Weave this process as ``lens-rl run`` configured it (``LENS_RL_OTEL_*`` in the environment)."""
    if _started:
        return
    _started.append(True)
    if _reading_command():
        return
    try:
        from lens_rl._runtime import RUNTIME
        from lens_rl.frameworks import apply_configured
        from lens_rl.lifecycle import telemetry_enabled_in_env
        from lens_rl.lifecycle.launched import STARTED_MARK, mark, under_run

        if not telemetry_enabled_in_env():
            return
        mark(STARTED_MARK)  # (lens-rl run's last line tells a job that never loaded lens_rl)
        apply_configured()
        if under_run():
            RUNTIME.step_claim = _first_step
    except Exception as exc:  # never the job's fault: one line, then the job runs untraced
        print(f"lens-rl run: this process is not traced: {exc!r}", file=sys.stderr)


#: The modules that run lens_rl's command line (``python -m lens_rl``, ``python -m lens_rl.cli``).
_CLI_MODULES = frozenset({"lens_rl", "lens_rl.__main__", "lens_rl.cli", "lens_rl.cli.__main__"})


def _reading_command() -> bool:
    """Whether this process is ``lens-rl`` itself (``goodput``, ``status``, ``profile`` run from inside the
    job), started as the ``lens-rl`` script or as ``python -m lens_rl`` / ``python -m lens_rl.cli``: it reads
    the store, runs no phase and weaves nothing, and it does not count as a process of the job that loaded
    lens_rl (the hint of ``lens-rl run``'s last line stays true)."""
    if sys.argv and os.path.basename(sys.argv[0]) == "lens-rl":
        return True
    # at start-up (sitecustomize) sys.argv[0] is still "-m": the module is on the interpreter's own command line
    return _main_module(getattr(sys, "orig_argv", [])) in _CLI_MODULES


def _main_module(argv: list[str]) -> str | None:
    """The module a ``python ... -m NAME`` command line runs (``-m NAME``, ``-mNAME``, ``-Im NAME``), or None
    (a script, ``-c``, or no ``-m`` before the first argument that is not an option)."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--" or not arg.startswith("-") or arg == "-":
            return None
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":
                next(args, None)  # (the one long option that takes a value)
            continue
        for i, flag in enumerate(arg[1:], 2):
            if flag in "cmWX":
                value = arg[i:] or next(args, "")
                if flag == "c":
                    return None
                if flag == "m":
                    return value
                break
    return None


def _first_step() -> None:
    """The process's first step is about to open: the first process of the job here becomes its driver (a
    phase recorded before it, lazily, is handed over as the driver starts). Never raises."""
    from lens_rl._errors import internal_error
    from lens_rl._runtime import RUNTIME

    try:
        with RUNTIME.lock:
            if RUNTIME.step_claim is None:  # another thread of this process got here first
                return
            RUNTIME.step_claim = None
            from lens_rl.lifecycle import get_telemetry_handle, init_telemetry_driver
            from lens_rl.lifecycle.launched import claim

            handle = get_telemetry_handle()
            if (handle is None or handle.role == "lazy") and _rank_zero() and claim():
                init_telemetry_driver(None)  # the environment holds the config; the init weaves what it names
    except Exception as exc:
        internal_error(exc, "run-driver")


def _rank_zero() -> bool:
    """False for a rank other than 0 of a distributed job (``RANK``, as ``torchrun`` sets it): of ranks that
    all run the loop, rank 0 is the driver, whichever reaches its first step first."""
    return os.environ.get("RANK", "0").strip() in ("", "0")


def without_site() -> None:
    """``import lens_rl`` in a process of ``lens-rl run`` whose ``sitecustomize`` did not run (a launch script
    that set its own ``PYTHONPATH``, dropping the bootstrap folder): do its part now, so the process that runs
    the training loop still claims the driver (with the launch span) and the configured frameworks are woven
    from here on; one line for the job says the bootstrap was lost. A process that never imports lens_rl (a
    framework-only job) cannot be woven without it. A reading command (``lens-rl goodput`` under a
    ``PYTHONPATH`` of the job's) needs no bootstrap and says nothing. Never raises."""
    try:
        if _started or any(os.path.realpath(p or os.curdir) == _SITE for p in sys.path):
            return  # the bootstrap ran (or runs now: it imports lens_rl first)
        if _reading_command():
            return
        _say_lost()
        start()
    except Exception as exc:
        print(f"lens-rl run: this process is not traced: {exc!r}", file=sys.stderr)


def _say_lost() -> None:
    """One line for the whole job (the first process to get here says it; a mark beside the driver's claim)."""
    from lens_rl.lifecycle.launched import mark

    if not mark("bootstrap-lost"):
        return
    print(
        f"lens-rl run: the job's PYTHONPATH lost lens-rl run's bootstrap ({_SITE}): a process is traced and its "
        "frameworks woven only once it imports lens_rl, and a process that never does is not woven; "
        "add to PYTHONPATH instead of setting it (export PYTHONPATH=/your/src:$PYTHONPATH)",
        file=sys.stderr,
    )
