"""The ``lens-rl`` command (also ``python -m lens_rl``).

    lens-rl --version
    lens-rl demo [--steps N] [--trace-dir DIR] [--otlp ENDPOINT]
    lens-rl goodput TRACE_DIR [--json] [--run RUN_ID] [--steps A-B|all] [--warmup-steps N]
    lens-rl perfetto TRACE_DIR [-o TRACE_DIR/trace.json | X.pftrace] [--steps A-B] [--group G] [--jobs N] [--ray]
    lens-rl report TRACE_DIR [-o TRACE_DIR/report.html] [--steps A-B] [--jobs N] [--ray]
    lens-rl replay TRACE_DIR --otlp ENDPOINT [--run RUN_ID]
    lens-rl status TRACE_DIR [--run RUN_ID] [--json] [--all]      (exit 1 when a process is stale or hung)
    lens-rl watch TRACE_DIR [--run RUN_ID] [--interval S] [--once]
    lens-rl profile TRACE_DIR [--run R] [--group G] [--rank N] [--steps next|A-B] [--backend B] [--timeout S]
    lens-rl run [--trace-dir D] [--instrument NAMES] [--run-id R] -- COMMAND ...   (exit status: COMMAND's;
                                                    127 / 126 when it is not found / not runnable)

``TRACE_DIR`` is the file exporter's ``trace_dir`` (holding one folder per run; the
most recent run is used unless ``--run`` names one) or a run folder itself. Exit statuses
mean one thing each: 0 read and nothing wrong; 1 (``status``, ``watch --once``) a process
stale or hung; 2 bad input or usage (one line on stderr, never a traceback), a folder with
no readable span included; 70 a defect of lens-rl (with its traceback, to report). An entry
that cannot be read is skipped and named on stderr.

The package: :mod:`~lens_rl.cli.parser` (the command line), :mod:`~lens_rl.cli.commands` (one function a
command), :mod:`~lens_rl.cli.inputs` (the run folder, its files and the options, checked) and
:mod:`~lens_rl.cli.cache` (a command's refresh cache).
"""

from __future__ import annotations

import os
import sys

from lens_rl.cli.inputs import CliError
from lens_rl.cli.parser import build_parser

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lens-rl``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    # the reading side's numpy never multiplies matrices: OpenBLAS's thread pool, one thread a core started
    # when numpy loads (here and in each parallel reader), is not made, unless the user sized it; for this
    # command only (a later one in the same process sees the environment as it was)
    blas = args.command in READERS and "OPENBLAS_NUM_THREADS" not in os.environ
    if blas:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"lens-rl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a defect: said as one, never as an exit status that means something (1: stale or hung)
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__)
        print(f"lens-rl: internal error (a defect of lens-rl {_version()}: please report it)", file=sys.stderr)
        return INTERNAL_ERROR
    finally:
        if blas:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)


#: The commands that read a store (what runs a job, ``run`` and ``demo``, keeps the user's environment).
READERS = frozenset({"goodput", "perfetto", "report", "status", "watch", "replay"})

#: The exit status of a defect (``EX_SOFTWARE``): no input's answer, so that 1 and 2 keep their meaning.
INTERNAL_ERROR = 70


def _version() -> str:
    from lens_rl._version import __version__

    return __version__
