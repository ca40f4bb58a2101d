"""The command line of ``lens-rl``: one sub-parser a command, each bound to its function in
:mod:`lens_rl.cli.commands`."""

from __future__ import annotations

import argparse
from typing import Any

from lens_rl.cli.commands import (
    cmd_demo,
    cmd_goodput,
    cmd_perfetto,
    cmd_replay,
    cmd_report,
    cmd_run,
    cmd_status,
    cmd_watch,
)
from lens_rl.cli.profile import cmd_profile

__all__ = ["build_parser"]

_Subparsers = Any  # argparse's _SubParsersAction (private)


def _add_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", help="run id (default: the latest run)")


def _add_parallel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, metavar="N", help="files read in parallel (default: the cores, at most 4)")
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="read the files as Ray tasks (on ADDRESS, else a local cluster); same results",
    )


def _add_no_cache(parser: argparse.ArgumentParser, text: str | None = None) -> None:
    """``--no-cache``, on every command that reads a run (a script may pass it to any of them)."""
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help=text or "read every file whole (default: only what was appended since the last look, same results)",
    )


def _add_warmup(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--warmup-steps", type=int, default=1, metavar="N", help=f"{what} (default 1)")


def _demo(sub: _Subparsers) -> None:
    demo = sub.add_parser("demo", help="run a small traced GRPO-shaped job on a local Ray cluster")
    demo.add_argument("--steps", type=int, default=4, help="training steps (default 4)")
    demo.add_argument("--trace-dir", default="lens_traces", help="file store directory (default lens_traces)")
    demo.add_argument("--otlp", metavar="ENDPOINT", help="send to this OTLP/HTTP collector instead of the file store")
    demo.set_defaults(func=cmd_demo)


def _goodput(sub: _Subparsers) -> None:
    good = sub.add_parser("goodput", help="the goodput table of a traced run")
    good.add_argument("trace_dir", metavar="TRACE_DIR")
    good.add_argument("--json", action="store_true", help="machine-readable output (schema lens_rl.goodput/1)")
    _add_run(good)
    good.add_argument(
        "--steps",
        metavar="A-B|all",
        help="step rows and step figures for these steps (default: a summary with at most 20 step rows)",
    )
    _add_warmup(good, "steps the steady-state figure skips")
    _add_parallel(good)
    _add_no_cache(good)
    good.set_defaults(func=cmd_goodput)


def _perfetto(sub: _Subparsers) -> None:
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
    _add_run(perf)
    _add_no_cache(perf)
    perf.set_defaults(func=cmd_perfetto)


def _report(sub: _Subparsers) -> None:
    rpt = sub.add_parser("report", help="one self-contained HTML page: goodput, ranks, stragglers, a timeline")
    rpt.add_argument("trace_dir", metavar="TRACE_DIR")
    rpt.add_argument("-o", "--output", help="output file (default TRACE_DIR/report.html)")
    _add_run(rpt)
    rpt.add_argument(
        "--steps",
        metavar="A-B|all",
        help="the timeline's window (default: the slowest step and its neighbours); aggregates always cover every step",
    )
    _add_warmup(rpt, "steps the steady state skips")
    _add_parallel(rpt)
    _add_no_cache(rpt)
    rpt.set_defaults(func=cmd_report)


def _replay(sub: _Subparsers) -> None:
    rep = sub.add_parser("replay", help="send a run's stored spans to an OTLP/HTTP collector")
    rep.add_argument("trace_dir", metavar="TRACE_DIR")
    rep.add_argument("--otlp", metavar="ENDPOINT", required=True, help="collector base URL (http://host:4318)")
    _add_run(rep)
    rep.add_argument("--timeout-ms", type=int, default=30_000, help="give up after this long")
    rep.set_defaults(func=cmd_replay)


def _status(sub: _Subparsers) -> None:
    st = sub.add_parser(
        "status", help="what every process is doing now, from its heartbeats (exit 1: a process is stale or hung)"
    )
    st.add_argument("trace_dir", metavar="TRACE_DIR")
    _add_run(st)
    st.add_argument("--json", action="store_true", help="machine-readable output (schema lens_rl.status/1)")
    st.add_argument("--all", action="store_true", help="every process, however many (default: summaries above 32)")
    _add_no_cache(st, "read every heartbeat whole (what status does each look: heartbeats are small)")
    st.set_defaults(func=cmd_status)


def _watch(sub: _Subparsers) -> None:
    wt = sub.add_parser("watch", help="a live terminal view: status and goodput, refreshed through the cache")
    wt.add_argument("trace_dir", metavar="TRACE_DIR")
    _add_run(wt)
    wt.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between frames (default 10)")
    wt.add_argument("--once", action="store_true", help="print one frame and exit (for a log or a pipe)")
    wt.add_argument("--jobs", type=int, metavar="N", help="files read in parallel (default: the cores, at most 4)")
    wt.set_defaults(func=cmd_watch)


def _run(sub: _Subparsers) -> None:
    run = sub.add_parser("run", help="run an unmodified job traced, every Python process it starts woven")
    run.add_argument("--trace-dir", help="file store directory (default: LENS_RL_OTEL_TRACE_DIR, else lens_traces)")
    run.add_argument("--instrument", metavar="NAMES", help="frameworks to weave, comma-separated (default all)")
    run.add_argument("--run-id", help="the run's id (default: LENS_RL_OTEL_RUN_ID, SLURM_JOB_ID, else random)")
    run.add_argument("job", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    run.set_defaults(func=cmd_run)


def _profile(sub: _Subparsers) -> None:
    prof = sub.add_parser("profile", help="ask the running job for a profiler window; print the captured files")
    prof.add_argument("trace_dir", metavar="TRACE_DIR")
    _add_run(prof)
    prof.add_argument("--group", metavar="G", help="the worker group (a name or glob; default every group)")
    prof.add_argument("--rank", type=int, metavar="N", help="the rank (default every rank)")
    prof.add_argument("--steps", default="next", metavar="next|A-B", help="the steps to capture (default next)")
    prof.add_argument("--backend", choices=("torch", "cuda", "vllm"), help="the profiler (default: the job's config)")
    prof.add_argument("--timeout", type=float, default=300.0, metavar="S", help="give up after S seconds (default 300)")
    prof.set_defaults(func=cmd_profile)


def build_parser() -> argparse.ArgumentParser:
    """The ``lens-rl`` parser: ``--version`` and the commands, in the order ``--help`` lists them."""
    from lens_rl._version import __version__

    parser = argparse.ArgumentParser(prog="lens-rl", description="lens_rl: goodput and traces for RL jobs")
    parser.add_argument("--version", action="version", version=f"lens-rl {__version__}")
    sub = parser.add_subparsers(dest="command")
    for add in (_demo, _goodput, _perfetto, _report, _replay, _status, _watch, _run, _profile):
        add(sub)
    return parser
