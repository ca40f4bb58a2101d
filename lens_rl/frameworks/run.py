"""``lens-rl run [--trace-dir D] [--instrument NAMES] [--run-id R] -- COMMAND ...``: an unmodified job, traced.

The command runs as a child with telemetry on (the file store by default; any config field through the usual
``LENS_RL_OTEL_*`` variables), ``LENS_RL_OTEL_INSTRUMENT`` set (default ``all``: every supported framework
installed), ``OTEL_PYTHON_ID_GENERATOR=lens_rl`` (read by OpenTelemetry's auto-configuration only: a ``TracerProvider()``
built without an id generator, as vLLM's is, does not read it), and
``lens_rl/frameworks/bootstrap/`` first on ``PYTHONPATH``: its ``sitecustomize`` runs in every Python process
the job starts (Ray workers of a local cluster, multiprocessing children), chains the ``sitecustomize`` that
was there before, and weaves. The driver is the process that runs the training loop: the first to open a
step (or call ``init_telemetry_driver``) claims the role (:mod:`lens_rl.lifecycle.launched`); a short Python
process before it (``python -c 'import torch'``, ``pip``) is no driver and, opening no phase, writes nothing.
Every other process writes its ended spans out whenever its last open phase ends (a ``Pool`` worker that
``terminate()`` kills, a Ray actor ``ray.shutdown()`` ends: neither runs ``atexit``).
The job root's ids are fixed here, before any process starts (``TRACEPARENT``: one job, one trace, whichever
process claims it), and so is the launch (``LENS_RL_OTEL_LAUNCH_TIME``: the job's wall starts here, its
``launch`` span covering what ran before the loop) and the attempt (``LENS_RL_OTEL_ATTEMPT``). A driver that
died leaves its claim: the next process to open a step takes it over as the next attempt (a launch script's
retry loop). Inside a ``lens-rl run`` of the same run (run id and store) this one is part of it (the outer's
claim, root, attempt and launch: one driver an attempt); inside another run's job, a run of its own. The
store's folder is made absolute here (the job may change folder); the job's ``PYTHONPATH`` entries are kept as
they are (an empty one is the current folder); a script without ``#!`` runs with ``/bin/sh``, as ``execvp``
runs it. A launch script that replaces ``PYTHONPATH`` drops the bootstrap: ``import lens_rl`` does its part.

The job's exit status is the command's, and a command killed by signal N kills ``lens-rl run`` with N too
(a shell reports ``128 + N``; a script running it stops on Ctrl-C as it would for the command itself).
SIGTERM and SIGHUP sent to ``lens-rl run`` are forwarded to the command. SIGINT and SIGQUIT, which a
terminal sends to its whole foreground process group (the command's too), are not forwarded while the
command shares ``lens-rl run``'s process group and that group is the foreground group of its controlling
terminal (the terminal delivered them to the command already), so a Ctrl-C reaches the job once; otherwise
(no terminal: a batch job, ``timeout -s INT``, ``kill -INT`` from a script; a background job; a command
that left the group) they are forwarded. (On a terminal's foreground group a ``kill -INT`` to
``lens-rl run``'s pid alone cannot be told from the terminal's and is not forwarded.) SIGTSTP (Ctrl-Z) stops both, as any foreground job (a command in a group of its own is stopped
and continued with ``lens-rl run``). A signal ignored when ``lens-rl run``
started (``nohup``'s SIGHUP, a non-interactive shell's ``cmd &`` SIGINT) does not end ``lens-rl run`` and is
forwarded: the command inherits it ignored and decides, as without ``lens-rl run``. Afterwards one line says where the store is and the one command that
reads it.

Example::

    lens-rl run -- python train.py --config grpo.yaml
    lens-rl run --instrument verl --trace-dir /scratch/traces -- python -m verl.trainer.main_ppo ...
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import resource
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.lifecycle.launched import CLAIM_ENV, PARENT_ENV, ROOT_ENV, STARTED_MARK

__all__ = ["BOOTSTRAP_DIR", "DRIVER_CLAIM_ENV", "job_environment", "run"]

#: The folder whose ``sitecustomize`` weaves every Python process of the job.
BOOTSTRAP_DIR = str(Path(__file__).resolve().parent / "bootstrap")
#: A path the process that runs the training loop creates (exclusively) to become the job's driver.
DRIVER_CLAIM_ENV = CLAIM_ENV
#: Sent to ``lens-rl run`` alone: always forwarded.
_FORWARDED = ("SIGTERM", "SIGHUP")
#: Sent by a terminal to its whole foreground group: not forwarded when that group is ours and the command's.
_TERMINAL = ("SIGINT", "SIGQUIT")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def job_environment(
    environ: Mapping[str, str],
    *,
    trace_dir: str | None = None,
    instrument: str | None = None,
    run_id: str | None = None,
    claim: str | None = None,
    launch: float | None = None,
) -> dict[str, str]:
    """The job's environment: telemetry on, the run id fixed, the bootstrap first on ``PYTHONPATH``; the
    job root's trace context (``TRACEPARENT``), its attempt and, given ``launch`` (epoch seconds), its launch
    time unless the job already has a valid one (a launcher's ``LENS_RL_OTEL_LAUNCH_TIME``,
    ``SLURM_JOB_START_TIME``: after the run's last write, within 7 days).

    Raises ``ValueError`` (naming the field) when the resulting config is invalid.
    """
    from lens_rl.config import ATTEMPT_ENV, ENV, LAUNCH_TIME_ENV, PARAMS, TelemetryConfig
    from lens_rl.identity.attempt import launch_time_ns, resolve_attempt

    for field, flag in (("trace_dir", trace_dir), ("instrument", instrument), ("run_id", run_id)):
        if flag and flag.strip():  # a flag's error names the flag (below, it is in the environment)
            PARAMS[field].parse(flag, f"{field} (from --{field.replace('_', '-')})")
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
    env[ENV["trace_dir"]] = os.path.abspath(config.trace_dir)  # here, whatever folder the job changes to
    env["OTEL_PYTHON_ID_GENERATOR"] = env.get("OTEL_PYTHON_ID_GENERATOR") or "lens_rl"
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *_job_paths(env.get("PYTHONPATH", ""))])
    inner = _nested(environ, env)
    if inner == "same":  # inside a lens-rl run of this very run: part of it (its claim, root, attempt, launch)
        launch = None
    elif claim is not None:
        if inner == "other":  # another run inside one: the outer's attempt and launch are not this run's
            env.pop(ATTEMPT_ENV, None)
            env.pop(LAUNCH_TIME_ENV, None)
        env[DRIVER_CLAIM_ENV] = claim
        _job_root(env)
    attempt, last_write = resolve_attempt(TelemetryConfig.from_env(env), env)
    if not env.get(ATTEMPT_ENV, "").strip():  # workers started before the driver claims know it too
        env[ATTEMPT_ENV] = str(attempt)
    # the launch, checked here against the run's earlier attempts (the driver, later, sees this attempt's
    # own files too): the job's own if it has a valid one, else lens-rl run's
    if launch is not None and launch_time_ns(env, time.time_ns(), last_write) is None:
        env[LAUNCH_TIME_ENV] = f"{launch:.6f}"
    return env


def _job_paths(pythonpath: str) -> list[str]:
    """The job's ``PYTHONPATH`` entries without lens_rl's bootstrap folder, each other one kept as it is (an
    empty entry is the current folder); none when it is unset or empty."""
    return [p for p in pythonpath.split(os.pathsep) if p != BOOTSTRAP_DIR] if pythonpath else []


def _nested(outer: Mapping[str, str], env: Mapping[str, str]) -> str | None:
    """Whether this ``lens-rl run`` runs inside another's job: ``same`` when it runs the same run (run id and
    store), ``other`` for another run, None when it is no nested run. A nested run of the same run is part of
    the outer job: its loop claims the outer's driver role by the one rule (the first loop, or the
    successor of a driver that died: the next attempt), so one attempt never has two drivers."""
    from lens_rl.config import ENV

    if not outer.get(DRIVER_CLAIM_ENV):
        return None
    same = all(outer.get(ENV[name], "") == env.get(ENV[name]) for name in ("run_id", "trace_dir"))
    return "same" if same else "other"


def _job_root(env: dict[str, str]) -> None:
    """Fix the job root's ids: a new span in the job's trace (the ``TRACEPARENT`` it had, kept as the root's
    parent), else in a new trace; every process of the job gets it as its ``TRACEPARENT``."""
    parent = env.get("TRACEPARENT", "").strip().lower()
    match = _TRACEPARENT.match(parent)
    trace = match.group(1) if match and int(match.group(1), 16) else f"{secrets.randbits(128) or 1:032x}"
    root = f"00-{trace}-{secrets.randbits(64) or 1:016x}-01"
    env[ROOT_ENV] = env["TRACEPARENT"] = root
    if match:
        env[PARENT_ENV] = parent
    else:
        env.pop(PARENT_ENV, None)
        env.pop("TRACESTATE", None)  # (a state without its traceparent belongs to no trace)


def run(
    command: Sequence[str],
    *,
    trace_dir: str | None = None,
    instrument: str | None = None,
    run_id: str | None = None,
    out: Any = None,
    reraise: bool = False,
) -> int:
    """Run ``command`` traced; its exit status (``128 + N`` when killed by signal N; with ``reraise``, as the
    CLI does, this process is then killed by N too, after its last line). Raises ``ValueError`` on a bad
    config and ``FileNotFoundError`` when the command does not exist."""
    out = sys.stderr if out is None else out
    launch = time.time()
    with tempfile.TemporaryDirectory(prefix="lens-rl-run-") as scratch:
        env = job_environment(
            os.environ,
            trace_dir=trace_dir,
            instrument=instrument,
            run_id=run_id,
            claim=os.path.join(scratch, "driver"),
            launch=launch,
        )
        child = _start(list(command), env)
        previous = _forward_signals(child)
        try:
            status = child.wait()
        finally:
            _restore(previous)
        started = os.path.exists(os.path.join(os.path.dirname(env[DRIVER_CLAIM_ENV]), STARTED_MARK))
    with contextlib.suppress(OSError):  # (stderr closed: a dead tee, a gone ssh; the job's status still passes)
        _say_where(env, out, started, command)
    if status < 0 and reraise:
        _die_by(-status, out)
    return 128 - status if status < 0 else status


def _start(command: list[str], env: Mapping[str, str]) -> subprocess.Popen[Any]:
    """Start ``command``; an executable file of no known format (a script without ``#!``) runs with ``/bin/sh``,
    as ``execvp`` (a shell, ``env``, ``timeout``) runs it."""
    try:
        return subprocess.Popen(command, env=env)
    except OSError as exc:
        if exc.errno != errno.ENOEXEC:
            raise
    path = command[0] if os.sep in command[0] else shutil.which(command[0], path=env.get("PATH")) or command[0]
    return subprocess.Popen(["/bin/sh", path, *command[1:]], env=env)


def _forward_signals(child: subprocess.Popen[Any]) -> dict[int, Any]:
    """Install the forwarding handlers; the handlers they replace. A signal ignored at start (``nohup``'s
    SIGHUP, SIGINT and SIGQUIT of a non-interactive shell's ``cmd &``) still does not end ``lens-rl run``
    but is forwarded: the command inherited it ignored and decides, as it would without ``lens-rl run``
    (one that installed a handler of its own gets it). SIGTSTP ignored at start stays ignored."""
    own_group = os.getpgrp()

    def forward(signum: int, frame: Any) -> None:
        if child.poll() is not None:
            return
        try:
            if signum in terminal and os.getpgid(child.pid) == own_group and _terminal_could_send(own_group):
                return  # the terminal's signal reached the command's group (ours) already: once is enough
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    def apart() -> bool:
        """The command runs, in a process group of its own (not the terminal's, which is ours)."""
        try:
            return child.poll() is None and os.getpgid(child.pid) != own_group
        except ProcessLookupError:
            return False

    def suspend(signum: int, frame: Any) -> None:
        """Ctrl-Z: stop as the default would (the kernel ignores it in an orphaned group); a command in a group
        of its own is stopped with us and continued with us."""
        away = apart()
        if away:
            child.send_signal(signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), signal.SIGTSTP)  # returns once continued
        finally:
            signal.signal(signal.SIGTSTP, suspend)
        if away and child.poll() is None:
            child.send_signal(signal.SIGCONT)

    terminal = {getattr(signal, name) for name in _TERMINAL if hasattr(signal, name)}
    previous = {}
    for name in (*_FORWARDED, *_TERMINAL, "SIGTSTP"):
        signum = getattr(signal, name, None)
        if signum is None or (name == "SIGTSTP" and signal.getsignal(signum) is signal.SIG_IGN):
            continue
        previous[signum] = signal.signal(signum, suspend if name == "SIGTSTP" else forward)
    return previous


def _terminal_could_send(group: int) -> bool:
    """Whether ``group`` is the foreground process group of this process's controlling terminal: the one
    group a terminal's Ctrl-C or Ctrl-\\ reaches. With no controlling terminal (a batch job, ``setsid``, a
    launcher's pipes) no terminal sent the signal, so it is forwarded."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(fd) == group
    except OSError:
        return False
    finally:
        os.close(fd)


def _die_by(signum: int, out: Any) -> None:
    """End this process by ``signum``, as the command ended (no core file of its own); returns only if the
    signal does not end a process."""
    for stream in (out, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or no stream at all: nothing to wait for
            pass
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass


def _restore(previous: Mapping[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _say_where(env: Mapping[str, str], out: Any, started: bool = True, command: Sequence[str] = ()) -> None:
    """One line: where the store is and the command that reads it (or where the spans went); ``started``:
    whether a process of the job started lens_rl (else, with nothing written, a hint why; also for a
    ``command`` run through ``opentelemetry-instrument``, whose ``sitecustomize`` goes first on
    ``PYTHONPATH`` and runs none after it)."""
    from lens_rl.config import TelemetryConfig, mask_url
    from lens_rl.identity.attempt import run_folder

    try:
        config = TelemetryConfig.from_env(env)
    except ValueError:
        return
    if config.exporter != "file":
        where = mask_url(config.resolved_endpoint) if config.exporter == "otlp" else config.exporter
        print(f"lens-rl run: run {config.run_id}: spans went to {where}", file=out)
        return
    store = run_folder(config)  # the folder the processes write ('exp 1' -> exp_1)
    if not os.path.isdir(store):
        why = ""
        if any(os.path.basename(arg) == "opentelemetry-instrument" for arg in command):
            why = (
                "; opentelemetry-instrument's sitecustomize replaces lens-rl run's (nothing is woven): run "
                "opentelemetry-instrument lens-rl run -- ... instead"
            )
        elif not started:
            why = "; no Python process of the job loaded lens_rl (a PYTHONPATH the job sets must add to it, not replace it)"
        print(f"lens-rl run: run {config.run_id}: no process wrote to the store ({store}){why}", file=out)
        return
    print(f"lens-rl run: the store is {store}; read it with: lens-rl goodput {shlex.quote(store)}", file=out)
