"""The commands of ``lens-rl``, one function each (``args`` parsed by :mod:`lens_rl.cli.parser`), each
returning its exit status; the offline tools are imported when a command runs."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lens_rl.cli.cache import command_cache
from lens_rl.cli.inputs import (
    CliError,
    check_count,
    check_jobs,
    check_seconds,
    check_steps,
    holds,
    parallel,
    parse_steps,
    run_dir,
    say,
    span_files_of,
)
from lens_rl.cli.profile import format_profiles
from lens_rl.offline.run.parallel import no_gc

__all__ = ["cmd_demo", "cmd_goodput", "cmd_perfetto", "cmd_replay", "cmd_report", "cmd_run", "cmd_status", "cmd_watch"]


def _print_json(report: Any) -> None:
    """``report`` as indented JSON on stdout (orjson: the standard library's JSON, faster)."""
    import orjson

    try:  # (keys all text, the common report: a third faster than orjson's pass that checks each key's type)
        data = orjson.dumps(report, default=str, option=orjson.OPT_INDENT_2)
    except TypeError:  # a key that is not text (a step's number, say): as text
        data = orjson.dumps(report, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text stream (a caller's StringIO)
        sys.stdout.write(data.decode())
        sys.stdout.write("\n")
        return
    sys.stdout.flush()
    out.write(data)  # (then its newline: no copy of a run's megabytes to end them with one)
    out.write(b"\n")
    out.flush()


def _one_look(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command that reads a store once and ends: the cyclic collector paused throughout (what it builds,
    its imports' objects and the store's parts, lives until it ends; no collection walks them meanwhile).
    Only ``goodput``'s: measured, ``report``'s look at an unchanged store was slower so (0.13 -> 0.19 s at
    1 M spans: numpy's typing module took 40 ms more to import after the page's path had run paused)."""

    @functools.wraps(command)
    def paused(args: argparse.Namespace) -> int:
        with no_gc():
            return command(args)

    return paused


@_one_look
def cmd_goodput(args: argparse.Namespace) -> int:
    from lens_rl.offline import analyze, format_table

    check_count("--warmup-steps", args.warmup_steps)
    steps = parse_steps(args.steps)
    paths, path = span_files_of(args.trace_dir, args.run)
    options = parallel(args)
    with command_cache(args, path) as cache:
        report = analyze(paths, warmup_steps=args.warmup_steps, steps=steps, cache=cache, **options)
        check_steps(steps, report["step_range"])
        if not report["spans"]:
            raise CliError(
                f"no readable lens_rl spans under {str(path)!r} ({report['files']} files, "
                f"{report['skipped_lines']} bad lines)"
            )
    if report["skipped_lines"]:
        print(
            f"lens-rl: skipped {report['skipped_lines']} unreadable line(s) (e.g. a killed process's last line)",
            file=sys.stderr,
        )
    from lens_rl.offline.run.profiles import profiles_of

    captures = profiles_of(path)  # (none without a profiles/ folder: nothing read)
    if captures:
        report["profiles"] = captures  # type: ignore[typeddict-unknown-key]
    if args.json:
        _print_json(report)
    else:
        print(format_table(report, all_steps=args.steps is not None))
        if captures:
            print(format_profiles(captures))
    return 0


def _write(args: argparse.Namespace, default_name: str, write: Any) -> tuple[Any, str, Path]:
    """Run ``write(paths, output, run_dir)`` for a command that writes one file; errors as one line."""
    paths, path = span_files_of(args.trace_dir, args.run)
    if not paths:
        raise CliError(f"no lens_rl span files under {str(path)!r}")
    output = args.output or str(Path(args.trace_dir) / default_name)
    try:
        return write(paths, output, path), output, path
    except (ImportError, ValueError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot write {output!r}: {exc.strerror or exc}") from None


def cmd_perfetto(args: argparse.Namespace) -> int:
    from lens_rl.offline import FORMATS, format_of, write_trace

    steps = parse_steps(args.steps)
    if args.output is not None and format_of(args.output) is None:
        raise CliError(
            f"-o {args.output!r}: no trace format has that extension; allowed: "
            + ", ".join(f"{ext} ({name})" for ext, name in FORMATS.items())
        )

    def trace(paths: list[Path], output: str, run: Path) -> int:
        with command_cache(args, run) as cache:  # (a rejected input leaves no cache behind)
            skipped: list[str] = []
            spans = write_trace(
                paths, output, steps=steps, group=args.group, cache=cache, skipped=skipped, **parallel(args)
            )
            if spans:  # (no span at all: the one error line says so)
                say(skipped)
            else:
                os.unlink(output)
                if args.steps is None and args.group is None:
                    raise CliError(f"no readable lens_rl spans under {str(run)!r}")
                where = [f"--steps {args.steps}"] * (args.steps is not None) + [f"--group {args.group}"] * (
                    args.group is not None
                )
                verb = "select" if len(where) > 1 else "selects"
                raise CliError(f"{' and '.join(where)} {verb} no span of {str(run)!r}")
        return spans

    spans, output, path = _write(args, "trace.json", trace)
    print(
        f"wrote {output} ({FORMATS[Path(output).suffix.lower()]}): {spans} spans; open it at https://ui.perfetto.dev "
        "(or any Perfetto build, offline)"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    steps = parse_steps(args.steps)
    check_count("--warmup-steps", args.warmup_steps)
    size, output, _ = _write(
        args,
        "report.html",
        lambda paths, output, run_dir: _report(args, paths, output, run_dir, steps),
    )
    print(f"wrote {output} ({size / 1e6:.1f} MB, self-contained: open it in any browser, offline)")
    return 0


def _report(args: argparse.Namespace, paths: list[Path], output: str, folder: Path, steps: Any) -> int:
    from lens_rl.offline import write_report

    options = parallel(args)
    with command_cache(args, folder) as cache:
        return write_report(paths, output, steps=steps, warmup_steps=args.warmup_steps, cache=cache, **options)


def cmd_replay(args: argparse.Namespace) -> int:
    from lens_rl.offline import replay

    if args.timeout_ms <= 0:
        raise CliError(f"--timeout-ms: {args.timeout_ms} is not a duration; allowed: milliseconds > 0")
    from lens_rl.config.values import as_endpoint

    try:
        as_endpoint(args.otlp, "otlp")
    except ValueError as exc:  # (its text shows the value with the userinfo masked)
        raise CliError("--otlp: " + str(exc).partition(": ")[2]) from None
    paths, path = span_files_of(args.trace_dir, args.run)
    try:
        sent, skipped = replay(path, args.otlp, timeout_ms=args.timeout_ms, paths=paths)
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    if not sent:
        raise CliError(f"no readable lens_rl spans under {str(path)!r}; nothing replayed")
    from lens_rl.config import mask_url

    to = mask_url(args.otlp)
    print(f"replayed {sent} spans from {path} to {to}" + (f" ({skipped} bad lines skipped)" if skipped else ""))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from lens_rl.offline import format_status, run_status

    path = run_dir(args.trace_dir, args.run, "live-*.json")
    report = run_status(path)
    if not report["superseded"] and all(r["state"] == "unreadable" for r in report["processes"]):
        notes = report["notes"]
        if not notes:
            raise CliError(f"no lens_rl heartbeat files (live-*.json) under {str(path)!r}")
        raise CliError(f"no readable lens_rl heartbeat under {str(path)!r} ({len(notes)} not read: {notes[0]})")
    say(report["notes"])  # entries not read: one line each on stderr, as every command says them
    if args.json:
        _print_json(report)
    else:
        print(format_status(report, all_rows=args.all))
    return 0 if report["ok"] else 1


def cmd_watch(args: argparse.Namespace) -> int:
    from lens_rl.offline import watch

    check_seconds("--interval", args.interval)
    check_jobs(args.jobs)
    try:
        folder = run_dir(args.trace_dir, args.run)
    except CliError:
        folder = run_dir(args.trace_dir, args.run, "live-*.json")  # heartbeats before the first span
    if not any(holds(folder, pattern) for pattern in ("spans-*.jsonl", "live-*.json", "**/spans-*.jsonl")):
        # a run folder with nothing in it, however it was named: bad input, as for status
        raise CliError(f"no lens_rl span or heartbeat files under {str(folder)!r}")
    try:
        return watch(folder, interval=args.interval, once=args.once, jobs=args.jobs)
    except ImportError as exc:
        raise CliError(str(exc)) from None


def cmd_demo(args: argparse.Namespace) -> int:
    from lens_rl.demo import run_demo

    return run_demo(steps=args.steps, trace_dir=args.trace_dir, otlp=args.otlp)


def cmd_run(args: argparse.Namespace) -> int:
    from lens_rl.frameworks.run import run

    command = args.job[1:] if args.job[:1] == ["--"] else args.job
    if not command:
        raise CliError("run: give the command to run after --, e.g. lens-rl run -- python train.py")
    try:
        return run(command, trace_dir=args.trace_dir, instrument=args.instrument, run_id=args.run_id, reraise=True)
    except ValueError as exc:
        raise CliError(f"run: {exc}") from None
    except OSError as exc:  # the command cannot be started: the status env, timeout and a shell give (127 not
        # found, 126 found but not runnable), so a launch script reads it as it would without lens-rl
        print(f"lens-rl: run: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
