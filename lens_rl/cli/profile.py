"""``lens-rl profile``: ask the running job for a profiler window, and wait for its capture.

The request is a file in the run folder (:mod:`lens_rl.devices.profile_requests`) that every process of the job
looks at at its step boundaries, at most once a second; the processes it names answer with the files they
wrote and the steps they refused (and why); a process that takes a request answers at once (nothing captured
yet), so the command knows who took it. Exit 0 printing the captured files once the last step is captured; 1 with
the reason on timeout, or as soon as every process that took it refused its last step (``max_windows`` reached,
the process ended, its profiler failed: the files captured so far printed); 2 on bad input, or when the run folder cannot be written (one line, no traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lens_rl.cli.inputs import CliError, parse_steps, run_dir

__all__ = ["cmd_profile", "format_profiles"]

#: How often the answers are looked at while waiting.
POLL_S = 0.2


def cmd_profile(args: argparse.Namespace) -> int:
    from lens_rl.devices.profile_requests import answers, write_request

    steps = _steps(args.steps)
    if args.rank is not None and args.rank < 0:
        raise CliError(f"--rank: {args.rank} is negative; allowed: a rank >= 0")
    if not args.timeout > 0:
        raise CliError(f"--timeout: {args.timeout} is not a duration; allowed: seconds > 0")
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
    last = steps if isinstance(steps, str) else steps[1]
    deadline = time.monotonic() + args.timeout
    while True:
        got = answers(run, request_id)
        files = sorted({name for answer in got for name in answer.get("files", []) if isinstance(name, str)})
        errors = [text for answer in got for text in answer.get("errors", []) if isinstance(text, str)]
        if files and (last == "next" or any(f"-step{last}." in name for name in files)):
            return _done(run, files, errors)
        if (
            got and all(_refused(answer, last) for answer in got) and len(got) >= _named(run, args.group, args.rank)
        ):  # (every process it names took it and said no: say why, exit 1)
            _done(run, files, [])
            print(f"lens-rl: profile: not captured: {'; '.join(sorted(set(errors)))}", file=sys.stderr)
            return 1
        if time.monotonic() >= deadline:
            if files:
                _done(run, files, errors)
                print(
                    f"lens-rl: profile: timed out after {args.timeout:g}s before step {last} was captured "
                    "(the files above are the steps captured so far)",
                    file=sys.stderr,
                )
                return 1
            print(
                f"lens-rl: profile: no process took request {request_id} within {args.timeout:g}s (is the job running "
                "with telemetry on, and reaching step boundaries? does --group/--rank name a process?)",
                file=sys.stderr,
            )
            return 1
        time.sleep(POLL_S)


def _named(run: Path, group: str | None, rank: int | None) -> int:
    """How many running processes of the run (by their fresh heartbeats) the request names: those that will take
    it at their next step boundary."""
    from lens_rl.devices.profile_requests import matches
    from lens_rl.store import read_live

    beats, _ = read_live(run)
    now = time.time_ns()
    count = 0
    for beat in beats:
        said, every, when = beat.get("resource"), beat.get("interval_ms"), beat.get("written_ns")
        resource: dict[str, Any] = said if isinstance(said, dict) else {}
        interval = every if isinstance(every, int) else 1000
        written = when if isinstance(when, int) else 0
        if beat.get("state") != "running" or now - written > 3 * interval * 10**6:
            continue
        try:
            their_rank = int(resource.get("nv.dl.rank", 0))
        except (TypeError, ValueError):
            continue
        if matches({"group": group, "rank": rank}, str(resource.get("rl.worker_group", "worker")), their_rank):
            count += 1
    return count


def _refused(answer: dict[str, Any], last: str | int) -> bool:
    """Did the process of ``answer`` refuse the request's last step (``next``: its step)?"""
    for pair in answer.get("refused", []):
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(step, int) for step in pair):
            if last == "next" or pair[0] <= int(last) <= pair[1]:
                return True
    return False


def _steps(text: str) -> str | tuple[int, int]:
    if text.strip().lower() == "next":
        return "next"
    if text.strip().lower() == "all":
        raise CliError("--steps: 'all' cannot be profiled; allowed: next, or A-B (inclusive)")
    steps = parse_steps(text)
    assert steps is not None
    return steps


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
