"""The ``lens-rl`` command (also ``python -m lens_rl``).

    lens-rl --version
    lens-rl demo [--steps N] [--trace-dir DIR] [--otlp ENDPOINT]
    lens-rl goodput TRACE_DIR [--json] [--run RUN_ID] [--steps A-B|all] [--warmup-steps N]
    lens-rl perfetto TRACE_DIR [-o TRACE_DIR/trace.json | X.pftrace] [--steps A-B] [--group G] [--jobs N] [--ray]
    lens-rl report TRACE_DIR [-o TRACE_DIR/report.html] [--steps A-B] [--jobs N] [--ray]
    lens-rl replay TRACE_DIR --otlp ENDPOINT [--run RUN_ID]
    lens-rl status TRACE_DIR [--run RUN_ID] [--json] [--all]      (exit 1 when a process is stale or hung)
    lens-rl watch TRACE_DIR [--run RUN_ID] [--interval S] [--once]
    lens-rl run [--trace-dir D] [--instrument NAMES] [--run-id R] -- COMMAND ...   (exit status: COMMAND's)

``TRACE_DIR`` is the file exporter's ``trace_dir`` (holding one folder per run; the
most recent run is used unless ``--run`` names one) or a run folder itself. Exit statuses
mean one thing each: 0 read and nothing wrong; 1 (``status``, ``watch --once``) a process
stale or hung; 2 bad input or usage (one line on stderr, never a traceback), a folder with
no readable span included; 70 a defect of lens-rl (with its traceback, to report). An entry
that cannot be read is skipped and named on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["main"]


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _folder_problem(path: Path) -> str | None:
    """What is wrong with a folder named on the command line, in a few words (None: nothing)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if exc.errno == errno.ENOENT:
            return "is a dangling symbolic link" if os.path.islink(path) else "does not exist"
        return f"cannot be read ({exc.strerror or exc})"
    return None if stat.S_ISDIR(mode) else "is not a directory"


def _holds(folder: Path, pattern: str) -> bool:
    try:
        return any(folder.glob(pattern))
    except OSError:
        return False


def _last_write(folder: Path, pattern: str) -> float:
    """The latest modification of ``folder``'s entries matching ``pattern`` (a link's own, where its target
    cannot be read)."""
    latest = 0.0
    for entry in folder.glob(pattern):
        with contextlib.suppress(OSError):
            latest = max(latest, entry.lstat().st_mtime)
    return latest


def _run_dir(trace_dir: str, run: str | None, pattern: str = "spans-*.jsonl") -> Path:
    root = Path(trace_dir)
    why = _folder_problem(root)
    if why == "does not exist":
        raise CliError(f"{trace_dir!r} does not exist (give the telemetry trace_dir, or one run's folder in it)")
    if why is not None:
        raise CliError(f"{trace_dir!r} {why}")
    try:
        folders = sorted(p for p in root.iterdir() if _folder_problem(p) is None)
    except OSError as exc:
        raise CliError(f"{trace_dir!r} cannot be listed ({exc.strerror or exc})") from None
    if run is not None:
        path = root / run
        why = _folder_problem(path)
        if why == "does not exist":
            names = [p.name for p in folders]
            raise CliError(f"no run {run!r} under {trace_dir!r} (runs: {', '.join(names) or 'none'})")
        if why is not None:
            raise CliError(f"the run folder {str(path)!r} {why}")
        return path
    if _holds(root, pattern):
        return root
    runs = [p for p in folders if _holds(p, pattern)]
    if not runs:
        what = "span files" if pattern.startswith("spans") else "heartbeat files"
        raise CliError(f"no lens_rl {what} ({pattern}) under {trace_dir!r}")
    latest = max(runs, key=lambda p: _last_write(p, pattern))
    if len(runs) > 1:
        print(
            f"lens-rl: {len(runs)} runs under {trace_dir}; using the latest, {latest.name} (--run to choose)",
            file=sys.stderr,
        )
    return latest


def _say(notes: list[str]) -> None:
    """Notes on what was not read (an entry that is no readable file), one line each on stderr."""
    for note in notes:
        print(f"lens-rl: {note}", file=sys.stderr)


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """``--steps``: ``A-B`` (inclusive) or ``all`` (None); the same everywhere."""
    if text is None or text.strip().lower() == "all":
        return None
    first, sep, last = text.strip().partition("-")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        raise CliError(
            f"--steps: invalid value {text!r}; allowed: A-B (inclusive, e.g. 10-20), a single step, or all"
        ) from None
    if hi < lo:
        raise CliError(f"--steps: {text!r} is empty (B < A); allowed: A-B with A <= B, or all")
    return lo, hi


def _files(trace_dir: str, run: str | None) -> tuple[list[Path], Path]:
    """The run's span files; a warning on stderr when they are of several runs (files copied together)."""
    from lens_rl.store import read_head, span_files

    path = _run_dir(trace_dir, run)
    notes: list[str] = []
    paths = span_files(path, notes)
    _say(notes)
    runs = set()
    for file in paths:
        head, _ = read_head(file)
        if head is not None and head.resource.get("rl.run_id") is not None:
            runs.add(str(head.resource["rl.run_id"]))
    if len(runs) > 1:
        print(
            f"lens-rl: warning: {str(path)!r} holds spans of {len(runs)} runs ({', '.join(sorted(runs))}); their "
            "figures are mixed (keep one run per folder)",
            file=sys.stderr,
        )
    return paths, path


def _check_steps(steps: tuple[int, int] | None, step_range: Any) -> None:
    """``--steps`` that select no step of the run: say which the run has."""
    if steps is not None and step_range is not None and (steps[1] < step_range[0] or steps[0] > step_range[1]):
        raise CliError(
            f"--steps {steps[0]}-{steps[1]} selects no step: the run's steps are {step_range[0]}-{step_range[1]}"
        )


def _parallel(args: argparse.Namespace) -> dict[str, Any]:
    if args.jobs is not None and args.jobs < 1:
        raise CliError(f"--jobs: {args.jobs} is not a count; allowed: 1 or more")
    return {"jobs": args.jobs, "use_ray": args.ray is not None, "ray_address": args.ray or None}


@contextlib.contextmanager
def _cache(args: argparse.Namespace, run_dir: Path) -> Iterator[str | None]:
    """The refresh cache's folder for this run (None with --no-cache, or where none can be made). A command
    that rejects its input leaves no cache behind: what it wrote there is removed (the folder too, when it
    made it)."""
    if getattr(args, "no_cache", False):
        yield None
        return
    from lens_rl.offline import cache_folder
    from lens_rl.offline.run.cache import CACHE_DIR

    made = not (run_dir / CACHE_DIR).exists()
    try:
        folder = cache_folder(run_dir)
    except OSError as exc:
        print(f"lens-rl: no refresh cache ({exc}); reading cold", file=sys.stderr)
        yield None
        return
    before = _entries(folder)
    try:
        yield folder
    except BaseException:
        _forget(folder, before, made and Path(folder) == (run_dir / CACHE_DIR).resolve())
        raise


def _entries(folder: str) -> dict[str, tuple[int, int]]:
    """Each file of a folder with its inode and modification time."""
    out = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                out[entry.name] = (info.st_ino, info.st_mtime_ns)
    return out


def _forget(folder: str, before: dict[str, tuple[int, int]], whole: bool) -> None:
    """Remove what was written to a cache folder since ``before`` (and the folder, if ``whole`` and empty)."""
    for name, state in _entries(folder).items():
        if before.get(name) != state:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
    if whole:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _print_json(report: Any) -> None:
    """``report`` as indented JSON on stdout (orjson when the analysis extra is there: the same JSON, faster)."""
    try:
        import orjson
    except ImportError:
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return
    data = orjson.dumps(report, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text stream (a caller's StringIO)
        sys.stdout.write(data.decode())
        return
    sys.stdout.flush()
    out.write(data)
    out.flush()


def cmd_goodput(args: argparse.Namespace) -> int:
    from lens_rl.offline import analyze, format_table

    if args.warmup_steps < 0:
        raise CliError(f"--warmup-steps: {args.warmup_steps} is negative; allowed: 0 or more")
    steps = parse_steps(args.steps)
    paths, path = _files(args.trace_dir, args.run)
    parallel = _parallel(args)
    with _cache(args, path) as cache:
        report = analyze(paths, warmup_steps=args.warmup_steps, steps=steps, cache=cache, **parallel)
        _check_steps(steps, report["step_range"])
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
    if args.json:
        _print_json(report)
    else:
        print(format_table(report, all_steps=args.steps is not None))
    return 0


def _write(args: argparse.Namespace, default_name: str, write: Any) -> tuple[Any, str, Path]:
    """Run ``write(paths, output, run_dir)`` for a command that writes one file; errors as one line."""
    paths, path = _files(args.trace_dir, args.run)
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
    spans, output, path = _write(
        args,
        "trace.json",
        lambda paths, output, _run: write_trace(paths, output, steps=steps, group=args.group, **_parallel(args)),
    )
    if not spans and args.steps is None and args.group is None:
        os.unlink(output)
        raise CliError(f"no readable lens_rl spans under {str(path)!r}")
    if not spans:
        os.unlink(output)
        where = [f"--steps {args.steps}"] * (args.steps is not None) + [f"--group {args.group}"] * (
            args.group is not None
        )
        raise CliError(f"{' and '.join(where)} select no span of {str(path)!r}")
    print(
        f"wrote {output} ({FORMATS[Path(output).suffix.lower()]}): {spans} spans; open it at https://ui.perfetto.dev "
        "(or any Perfetto build, offline)"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    steps = parse_steps(args.steps)
    size, output, _ = _write(
        args,
        "report.html",
        lambda paths, output, run_dir: _report(args, paths, output, run_dir, steps),
    )
    print(f"wrote {output} ({size / 1e6:.1f} MB, self-contained: open it in any browser, offline)")
    return 0


def _report(args: argparse.Namespace, paths: list[Path], output: str, run_dir: Path, steps: Any) -> int:
    from lens_rl.offline import write_report

    parallel = _parallel(args)
    with _cache(args, run_dir) as cache:
        return write_report(paths, output, steps=steps, warmup_steps=args.warmup_steps, cache=cache, **parallel)


def cmd_replay(args: argparse.Namespace) -> int:
    from lens_rl.offline import replay

    paths, path = _files(args.trace_dir, args.run)
    try:
        sent, skipped = replay(path, args.otlp, timeout_ms=args.timeout_ms, paths=paths)
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    if not sent:
        raise CliError(f"no readable lens_rl spans under {str(path)!r}; nothing replayed")
    print(f"replayed {sent} spans from {path} to {args.otlp}" + (f" ({skipped} bad lines skipped)" if skipped else ""))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from lens_rl.offline import format_status, run_status

    path = _run_dir(args.trace_dir, args.run, "live-*.json")
    report = run_status(path)
    if not report["superseded"] and all(r["state"] == "unreadable" for r in report["processes"]):
        notes = report["notes"]
        raise CliError(
            f"no readable lens_rl heartbeat under {str(path)!r} ({len(notes)} not read: {notes[0] if notes else '-'})"
        )
    if args.json:
        _print_json(report)
    else:
        print(format_status(report, all_rows=args.all))
    return 0 if report["ok"] else 1


def cmd_watch(args: argparse.Namespace) -> int:
    from lens_rl.offline import watch

    if args.interval <= 0:
        raise CliError(f"--interval: {args.interval} is not a duration; allowed: seconds > 0")
    try:
        run_dir = _run_dir(args.trace_dir, args.run)
    except CliError:
        run_dir = _run_dir(args.trace_dir, args.run, "live-*.json")  # heartbeats before the first span
    try:
        return watch(run_dir, interval=args.interval, once=args.once, jobs=args.jobs)
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
        return run(command, trace_dir=args.trace_dir, instrument=args.instrument, run_id=args.run_id)
    except ValueError as exc:
        raise CliError(f"run: {exc}") from None
    except OSError as exc:  # the command cannot be started (not found, not executable)
        raise CliError(f"run: cannot start {command[0]!r}: {exc.strerror or exc}") from None


def _add_parallel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, metavar="N", help="files read in parallel (default: the cores, at most 4)")
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="read the files as Ray tasks (on ADDRESS, else a local cluster); same results",
    )


def _add_no_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="read every file whole (default: only what was appended since the last look, same results)",
    )


def _parser() -> argparse.ArgumentParser:
    from lens_rl._version import __version__

    parser = argparse.ArgumentParser(prog="lens-rl", description="lens_rl: goodput and traces for RL jobs")
    parser.add_argument("--version", action="version", version=f"lens-rl {__version__}")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="run a small traced GRPO-shaped job on a local Ray cluster")
    demo.add_argument("--steps", type=int, default=4, help="training steps (default 4)")
    demo.add_argument("--trace-dir", default="lens_traces", help="file store directory (default lens_traces)")
    demo.add_argument("--otlp", metavar="ENDPOINT", help="send to this OTLP/HTTP collector instead of the file store")
    demo.set_defaults(func=cmd_demo)
    good = sub.add_parser("goodput", help="the goodput table of a traced run")
    good.add_argument("trace_dir", metavar="TRACE_DIR")
    good.add_argument("--json", action="store_true", help="machine-readable output (schema lens_rl.goodput/1)")
    good.add_argument("--run", help="run id (default: the latest run)")
    good.add_argument(
        "--steps",
        metavar="A-B|all",
        help="step rows and step figures for these steps (default: a summary with at most 20 step rows)",
    )
    good.add_argument(
        "--warmup-steps", type=int, default=1, metavar="N", help="steps the steady-state figure skips (default 1)"
    )
    _add_parallel(good)
    _add_no_cache(good)
    good.set_defaults(func=cmd_goodput)
    perf = sub.add_parser("perfetto", help="Chrome trace-event JSON for Perfetto UI")
    perf.add_argument("trace_dir", metavar="TRACE_DIR")
    perf.add_argument(
        "-o",
        "--output",
        help="output file: X.json (Chrome JSON) or X.pftrace / X.perfetto-trace "
        "(Perfetto protobuf); default TRACE_DIR/trace.json",
    )
    perf.add_argument("--steps", metavar="A-B|all", help="only the spans of these steps (default all)")
    perf.add_argument("--group", metavar="G", help="only this worker group's processes")
    _add_parallel(perf)
    perf.add_argument("--run", help="run id (default: the latest run)")
    perf.set_defaults(func=cmd_perfetto)
    rpt = sub.add_parser("report", help="one self-contained HTML page: goodput, ranks, stragglers, a timeline")
    rpt.add_argument("trace_dir", metavar="TRACE_DIR")
    rpt.add_argument("-o", "--output", help="output file (default TRACE_DIR/report.html)")
    rpt.add_argument("--run", help="run id (default: the latest run)")
    rpt.add_argument(
        "--steps",
        metavar="A-B|all",
        help="the timeline's window (default: the slowest step and its neighbours); aggregates always cover every step",
    )
    rpt.add_argument(
        "--warmup-steps", type=int, default=1, metavar="N", help="steps the steady state skips (default 1)"
    )
    _add_parallel(rpt)
    _add_no_cache(rpt)
    rpt.set_defaults(func=cmd_report)
    rep = sub.add_parser("replay", help="send a run's stored spans to an OTLP/HTTP collector")
    rep.add_argument("trace_dir", metavar="TRACE_DIR")
    rep.add_argument("--otlp", metavar="ENDPOINT", required=True, help="collector base URL (http://host:4318)")
    rep.add_argument("--run", help="run id (default: the latest run)")
    rep.add_argument("--timeout-ms", type=int, default=30_000, help="give up after this long")
    rep.set_defaults(func=cmd_replay)
    st = sub.add_parser(
        "status", help="what every process is doing now, from its heartbeats (exit 1: a process is stale or hung)"
    )
    st.add_argument("trace_dir", metavar="TRACE_DIR")
    st.add_argument("--run", help="run id (default: the latest run)")
    st.add_argument("--json", action="store_true", help="machine-readable output (schema lens_rl.status/1)")
    st.add_argument("--all", action="store_true", help="every process, however many (default: summaries above 32)")
    st.set_defaults(func=cmd_status)
    wt = sub.add_parser("watch", help="a live terminal view: status and goodput, refreshed through the cache")
    wt.add_argument("trace_dir", metavar="TRACE_DIR")
    wt.add_argument("--run", help="run id (default: the latest run)")
    wt.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between frames (default 10)")
    wt.add_argument("--once", action="store_true", help="print one frame and exit (for a log or a pipe)")
    wt.add_argument("--jobs", type=int, metavar="N", help="files read in parallel (default: the cores, at most 4)")
    wt.set_defaults(func=cmd_watch)
    run = sub.add_parser("run", help="run an unmodified job traced, every Python process it starts woven")
    run.add_argument("--trace-dir", help="file store directory (default: LENS_RL_OTEL_TRACE_DIR, else lens_traces)")
    run.add_argument("--instrument", metavar="NAMES", help="frameworks to weave, comma-separated (default all)")
    run.add_argument("--run-id", help="the run's id (default: LENS_RL_OTEL_RUN_ID, SLURM_JOB_ID, else random)")
    run.add_argument("job", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lens-rl``; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
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


#: The exit status of a defect (``EX_SOFTWARE``): no input's answer, so that 1 and 2 keep their meaning.
INTERNAL_ERROR = 70


def _version() -> str:
    from lens_rl._version import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
