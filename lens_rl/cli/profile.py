"""``lens-rl profile``: ask the running job for a profiler window, and wait for its capture.

The request is a file in the run folder (:mod:`lens_rl.devices.profile_requests`) that every process of the job
looks at at its step boundaries, at most once a second; the processes it names answer with the files they
wrote and the steps they refused (and why); a process that takes a request answers at once (nothing captured
yet). The command waits for every live process the request names (:mod:`lens_rl.cli.profile_wait`: the run's
heartbeats say which run; one that ends or goes stale meanwhile is not waited for) to answer its last step:
then exit 0 printing the captured files (refusals said on stderr) once that step is captured somewhere, else 1
with the reasons every process gave. 1 at once when the run's heartbeats say every process has ended (or,
after a few seconds for a starting worker's first heartbeat, none running is named by ``--group`` /
``--rank``). On timeout, 1 naming who did not answer, the files captured so far printed; 2 on bad input, or when the run folder cannot be written (one line, no traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.cli.inputs import CliError, check_seconds, run_dir

__all__ = ["cmd_profile", "format_profiles"]

#: How often the answers are looked at while waiting.
POLL_S = 0.2
#: How often the heartbeats (who runs) are read while waiting.
LOOK_S = 1.0


def cmd_profile(args: argparse.Namespace) -> int:
    from lens_rl.devices.profile_requests import write_request

    steps = _steps(args.steps)
    if args.rank is not None and args.rank < 0:
        raise CliError(f"--rank: {args.rank} is negative; allowed: a rank >= 0")
    check_seconds("--timeout", args.timeout)
    try:
        run = run_dir(args.trace_dir, args.run, "live-*.json")
    except CliError:
        run = run_dir(args.trace_dir, args.run)
    try:
        request_id = write_request(run, steps=steps, group=args.group, rank=args.rank, backend=args.backend)
    except OSError as exc:
        raise CliError(f"cannot write the request into the run folder {str(run)!r}: {exc.strerror or exc}") from None
    who = " ".join(
        part
        for part in (f"group {args.group}" if args.group else "", f"rank {args.rank}" if args.rank is not None else "")
        if part
    )
    print(
        f"lens-rl: asked {who or 'every process'} of {run.name} for steps {args.steps} (request {request_id})",
        file=sys.stderr,
    )
    return _wait(run, request_id, args, steps if isinstance(steps, str) else steps[1])


def _wait(run: Path, request_id: str, args: argparse.Namespace, last: str | int) -> int:
    """Wait until every process the request names has answered (:mod:`lens_rl.cli.profile_wait`), or the
    timeout; print the files captured and say what was refused, or who did not answer."""
    from lens_rl.cli.profile_wait import Named, listed, steps_captured
    from lens_rl.devices.profile_requests import answers

    began = time.monotonic()
    deadline = began + args.timeout
    named, looked = Named(), -1.0
    while True:
        if time.monotonic() - looked >= LOOK_S:  # (the heartbeats: at most once a second)
            named, looked = Named.read(run, args.group, args.rank), time.monotonic()
        got = answers(run, request_id)
        files = sorted({name for answer in got for name in answer.get("files", []) if isinstance(name, str)})
        errors = sorted({text for answer in got for text in answer.get("errors", []) if isinstance(text, str)})
        left = named.waiting(got, last)
        if got and not left:
            gone = named.gone(got, last)
            if gone:
                errors.append(f"{listed(gone)} took the request and ended or went quiet before answering")
            if files and (last == "next" or any(steps_captured(answer, int(last)) for answer in got)):
                return _done(run, files, errors)
            _done(run, files, [])  # (every process it names refused: say why, exit 1)
            print(f"lens-rl: profile: not captured: {'; '.join(errors)}", file=sys.stderr)
            return 1
        nobody = None if got else named.nobody(args.group, args.rank, time.monotonic() - began)
        if nobody is not None:  # (the job ended, or names no running process: nothing will answer)
            print(f"lens-rl: profile: not captured: {nobody}", file=sys.stderr)
            return 1
        if time.monotonic() >= deadline:
            _done(run, files, errors)
            if not got:
                print(
                    f"lens-rl: profile: no process took request {request_id} within {args.timeout:g}s (is the job "
                    "running with telemetry on, and reaching step boundaries? does --group/--rank name a process?)"
                    + (f"; running and named: {listed([who for who, _ in left])}" if left else ""),
                    file=sys.stderr,
                )
                return 1
            wanted = "its next step" if last == "next" else f"step {last}"
            said = [
                f"{who}: " + ("took the request, " + wanted + " not captured yet" if answer else "did not take it")
                for who, answer in left
            ]
            print(
                f"lens-rl: profile: timed out after {args.timeout:g}s; not answered: {listed(said)}"
                + (" (the files above are the captures written so far)" if files else ""),
                file=sys.stderr,
            )
            return 1
        time.sleep(POLL_S)


def _steps(text: str) -> str | tuple[int, int]:
    """``--steps``: ``next``, ``N`` or ``A-B`` (inclusive, A <= B); never ``all``."""
    allowed = "allowed: next, N (one step) or A-B (inclusive, A <= B)"
    word = text.strip().lower()
    if word == "next":
        return "next"
    if word == "all":
        raise CliError(f"--steps: 'all' cannot be profiled; {allowed}")
    first, sep, later = word.partition("-")
    try:
        lo = int(first)
        hi = int(later) if sep else lo
    except ValueError:
        raise CliError(f"--steps: invalid value {text!r}; {allowed}") from None
    if hi < lo:
        raise CliError(f"--steps: {text!r} is empty (B < A); {allowed}")
    return lo, hi


def _done(run: Path, files: list[str], errors: list[str]) -> int:
    for name in files:
        print(run / name)
    for text in sorted(set(errors)):
        print(f"lens-rl: profile: {text}", file=sys.stderr)
    return 0


def format_profiles(captures: Sequence[Mapping[str, Any]]) -> str:
    """``lens-rl goodput``'s section of captures: one line each, and a torch capture's phases under it."""
    lines = ["", "profiler captures (paths relative to the run folder)"]
    for row in captures:
        missing = "" if row["exists"] else "  (file missing)"
        lines.append(
            f"  step {row['step']}  {row['worker_group']} rank {row['rank']}  {row['backend']}  {row['reason']}: "
            f"{row['path']}{missing}"
        )
        for phase in row.get("summary") or []:
            kernel = "" if phase["kernel_s"] is None else f"  kernels {phase['kernel_s']:.3f}s"
            idle = "" if phase["no_kernel_share"] is None else f"  no kernel running {phase['no_kernel_share']:.0%}"
            lines.append(
                f"      {phase['phase']:24s} {phase['wall_s']:8.3f}s  cpu ops {phase['cpu_op_s']:.3f}s{kernel}{idle}"
            )
    return "\n".join(lines)
