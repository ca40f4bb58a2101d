"""What ``lens-rl run``'s ``sitecustomize`` does in each Python process of the job: the first one claims the
driver's role (telemetry started, the job's root span opened, its context handed to every later process);
every other one weaves the configured frameworks and starts telemetry lazily on its first phase. A launcher
(``torchrun``, ``accelerate launch``, ``deepspeed``) runs no training loop of its own: it claims nothing, and
the first rank it starts is the driver. Never raises.
"""

from __future__ import annotations

import os
import sys

__all__ = ["start"]


def start() -> None:
    """Weave this process as ``lens-rl run`` configured it (``LENS_RL_OTEL_*`` in the environment)."""
    try:
        from lens_rl.frameworks.run import DRIVER_CLAIM_ENV
        from lens_rl.lifecycle import telemetry_enabled_in_env

        if not telemetry_enabled_in_env():
            return
        if not _launcher() and _claim(os.environ.get(DRIVER_CLAIM_ENV, "")):
            from lens_rl.lifecycle import init_telemetry_driver

            init_telemetry_driver(None)  # the environment holds the config; the init weaves what it names
        else:
            from lens_rl.frameworks import apply_configured

            apply_configured()
    except Exception as exc:  # never the job's fault: one line, then the job runs untraced
        print(f"lens-rl run: this process is not traced: {exc!r}", file=sys.stderr)


#: Programs (script names, ``-m`` modules) that start a job's ranks and train nothing themselves.
LAUNCHERS = frozenset(
    [
        "torchrun",
        "torch.distributed.run",
        "torch.distributed.launch",
        "accelerate",
        "accelerate.commands.launch",
        "accelerate.commands.accelerate_cli",
        "deepspeed",
        "deepspeed.launcher.runner",
    ]
)


def _launcher() -> bool:
    """Whether this process is a distributed launcher (read from ``sys.orig_argv``: ``sys.argv`` is not yet
    set when ``sitecustomize`` runs)."""
    argv = list(getattr(sys, "orig_argv", ()))[1:]
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1] in LAUNCHERS
        if not arg.startswith("-"):
            return os.path.basename(arg) in LAUNCHERS
    return False


def _claim(path: str) -> bool:
    """True for the first process of the job to get here (it creates ``path`` exclusively)."""
    if not path:
        return False
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return False
    return True
