"""Offline analysis at scale: goodput and Perfetto over a synthesized store, against a plain parse.

Run:  python benchmarks/scale.py [--spans 1000000] [--files 50] [--jobs N] [--keep DIR] [--rounds K]

Synthesizes a GRPO-shaped run in the v2 file store (one driver file, the rest worker
files; per step a driver umbrella with its phases, and on each worker a bucketed phase
called from the driver plus a nested child), then times, each in a fresh process:

* the baseline: one plain pass of the standard library's ``json.loads`` over every line;
* ``lens-rl goodput --json`` (default ``--jobs``: the cores, at most 4);
* ``lens-rl perfetto -o X.pftrace`` and ``-o X.json``;
* the goodput read without the critical path (``analyze(..., critical=False)``): what the critical path
  costs, as a ratio to that read (goal: at most 0.25x);
* the refresh cache: a cold ``goodput`` read that writes it, a read of the unchanged store, and one after
  appending 1 % more spans, as ratios to that cold read (goals: 0.1x and 0.15x).

It prints spans/s, peak RSS (the largest of the command and its worker processes), the
CPU time of all its processes (the work done, whatever the cores), and each command's
wall time as a ratio to the baseline run in the same round (``--rounds K``: K rounds of
every case, medians reported; the machine's speed drifts between rounds).
Goals on 1 M spans / 50 files: peak RSS <= 300 MB, and no slower than the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = [
    ("generation", "productive"),
    ("logprob", "productive"),
    ("policy_training", "productive"),
    ("weight_sync", "overhead"),
    ("wait", "idle"),
]


T0 = 1_700_000_000_000_000_000
TRACE = "ab" * 16


def _line(name: str, span: str, parent: str | None, start: int, end: int, attrs: dict, remote: bool = False) -> str:
    row = {
        "n": name,
        "t": TRACE,
        "s": span,
        "b": start,
        "e": end,
        "a": attrs,
        "th": 140000000000000,
        "tn": "MainThread",
    }
    if parent:
        row["p"] = parent
        if remote:  # (a parent in another process: the driver's)
            row["pr"] = True
    return json.dumps(row, separators=(",", ":"))


def _paths(run: Path, files: int) -> list[Path]:
    return [run / f"spans-{'driver' if i == 0 else 'lm_policy'}-{max(i - 1, 0)}-{1000 + i}.jsonl" for i in range(files)]


def steps_of(spans: int, files: int) -> int:
    """How many steps make about ``spans`` spans over ``files`` files."""
    per_step = 1 + len(PHASES) + max(files - 1, 1) * 2  # driver umbrella + its phases + (phase, child) per worker
    return max(spans // per_step, 1)


def synthesize(root: Path, spans: int, files: int, seed: int = 0) -> int:
    """Write about ``spans`` spans in ``files`` process files; returns the number written."""
    run = root / "run"
    run.mkdir(parents=True)
    workers = max(files - 1, 1)
    for i, path in enumerate(_paths(run, files)):
        group = "driver" if i == 0 else "lm_policy"
        resource = {
            "service.name": "lens-rl",
            "rl.worker_group": group,
            "nv.dl.rank": max(i - 1, 0),
            "nv.dl.world_size": workers,
            "process.pid": 1000 + i,
            "host.name": "node-0",
            "rl.run_id": "run",
            "rl.algorithm": "grpo",
            "nv.dl.campaign.stage": "RL",
            "rl.model.name": "tiny-policy",
            "rl.precision": "bfloat16",
        }
        header = {
            "v": 2,
            "header": True,
            "format": "lens_rl.spans/2",
            "kind": "spans",
            "role": "driver" if i == 0 else "worker",
            "resource": resource,
            "pid": 1000 + i,
            "since": T0,
            "remote_parents": True,
        }
        if i == 0:
            header["root"] = "e" * 16  # the job root (never written: the run is still going)
        path.write_text(json.dumps(header) + "\n")
    return append_steps(root, files, 0, steps_of(spans, files), seed)


def append_steps(root: Path, files: int, first: int, count: int, seed: int = 0) -> int:
    """Append steps ``first`` .. ``first + count - 1`` to every file, as the job writes them (a span when it
    ends, children first); returns the spans written."""
    rng = random.Random(seed + first)
    handles = [open(path, "a") for path in _paths(root / "run", files)]
    written = 0
    for step in range(first, first + count):
        base = T0 + step * 10_000_000_000
        umbrella = f"d{step:07x}ffffffff"  # driver ids start with "d", workers' with "00": never the same
        for k, (name, bucket) in enumerate(PHASES):
            span = f"d{step:07x}{k + 1:08x}"
            start = base + k * 1_800_000_000
            handles[0].write(
                _line(name, span, umbrella, start, start + 1_700_000_000, {"rl.bucket": bucket, "rl.step": step}) + "\n"
            )
            written += 1
        handles[0].write(_line("step", umbrella, "e" * 16, base, base + 9_000_000_000, {"rl.step": step}) + "\n")
        written += 1
        for w in range(1, files):
            parent = f"d{step:07x}{(w % len(PHASES)) + 1:08x}"
            start = base + rng.randrange(0, 1_000_000_000)
            dur = int((1.5 if w == 3 and step % 2 else 1.0) * 1_000_000_000)
            span = f"{w:04x}{step:08x}0001"
            handles[w].write(
                _line(
                    "barrier",
                    f"{w:04x}{step:08x}0002",
                    span,
                    start + dur - 100_000_000,
                    start + dur,
                    {"rl.bucket": "idle", "rl.step": step},
                )
                + "\n"
            )
            handles[w].write(
                _line(
                    "policy_training",
                    span,
                    parent,
                    start,
                    start + dur,
                    {"rl.bucket": "productive", "rl.step": step, "rl.num_tokens": 4096},
                    True,
                )
                + "\n"
            )
            written += 2
    for handle in handles:
        handle.close()
    return written


BASELINE = """
import json, sys, time, resource
from pathlib import Path
t = time.perf_counter(); n = 0
for path in sorted(Path(sys.argv[1]).rglob("spans-*.jsonl")):
    with open(path, "rb") as handle:
        for line in handle:
            json.loads(line); n += 1
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"s": time.perf_counter() - t, "lines": n, "rss_mb": use.ru_maxrss / 1024,
                  "cpu_s": use.ru_utime + use.ru_stime}))
"""

MEASURE = """
import json, resource, sys, time, io, contextlib
from lens_rl.cli import main
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
s = time.perf_counter() - t
own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"s": s, "code": code, "rss_mb": max(own.ru_maxrss, workers.ru_maxrss) / 1024,
                  "cpu_s": own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime}))
"""


NO_CRITICAL = """
import json, resource, sys, time
from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
jobs = int(sys.argv[2]) if len(sys.argv) > 2 else None
t = time.perf_counter()
report = analyze(span_files(sys.argv[1]), jobs=jobs, critical=False)
json.dumps(report, default=str)
s = time.perf_counter() - t
own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"s": s, "code": 0, "rss_mb": max(own.ru_maxrss, workers.ru_maxrss) / 1024,
                  "cpu_s": own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime}))
"""


def _run(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


REFRESH = ("cold read, writing the cache", "refresh, unchanged", "refresh after 1 % more spans")


def _refresh_round(root: Path, spans: int, files: int, jobs: list[str]) -> dict[str, dict]:
    """One round of the refresh cases, each in a fresh process: a cold read that writes the cache, a read of
    the unchanged store, then one after appending 1 % more spans (whole steps, as a job writes them); the
    store is cut back to its size after."""
    run = root / "run"
    shutil.rmtree(run / ".lens_rl-cache", ignore_errors=True)
    sizes = {path: path.stat().st_size for path in run.glob("spans-*.jsonl")}
    command = (MEASURE, "goodput", str(root), "--json", *jobs)
    out = {REFRESH[0]: _run(*command), REFRESH[1]: _run(*command)}
    steps = steps_of(spans, files)
    append_steps(root, files, steps, max(steps_of(spans // 100, files), 1), seed=1)
    out[REFRESH[2]] = _run(*command)
    for path, size in sizes.items():
        os.truncate(path, size)
    shutil.rmtree(run / ".lens_rl-cache", ignore_errors=True)
    return out


def _print_refresh(refresh: dict[str, list[dict]], spans: int) -> None:
    """The refresh table: each case's wall against the cold read of its round (goals: 0.1x, 0.15x)."""
    cold = refresh[REFRESH[0]]
    print(f"\n{'refresh (lens-rl goodput --json)':34s} {'wall s':>8s} {'peak RSS':>9s} {'vs cold':>9s}  goal")
    goals = {REFRESH[1]: 0.1, REFRESH[2]: 0.15}
    for name in REFRESH:
        measured = refresh[name]
        ratio = statistics.median(r["s"] / c["s"] for r, c in zip(measured, cold, strict=True))
        wall, rss = statistics.median(r["s"] for r in measured), max(r["rss_mb"] for r in measured)
        goal = goals.get(name)
        verdict = "" if goal is None else (f"<= {goal}x: ok" if ratio <= goal else f"<= {goal}x: over goal")
        print(f"{name:34s} {wall:8.2f} {rss:7.0f}MB {ratio:8.3f}x  {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--keep", help="synthesize into (and keep) this directory")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every case; medians are reported")
    parser.add_argument("--refresh-only", action="store_true", help="only the refresh cases (cold, unchanged, +1 %%)")
    args = parser.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="lens-scale-"))
    try:
        t = time.perf_counter()
        if not (root / "run").exists():
            spans = synthesize(root, args.spans, args.files)
        else:
            spans = sum(1 for p in (root / "run").glob("spans-*.jsonl") for _ in open(p)) - args.files
        size_mb = sum(p.stat().st_size for p in (root / "run").glob("spans-*.jsonl")) / 1e6
        print(
            f"store: {spans:,} spans in {args.files} files, {size_mb:.0f} MB "
            f"({size_mb * 1e6 / spans:.0f} bytes a span), made in {time.perf_counter() - t:.0f}s"
        )
        jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
        cases = {  # name -> what runs (the baseline first in every round)
            "plain json.loads pass (stdlib)": (BASELINE, str(root)),
            "lens-rl goodput --json": (MEASURE, "goodput", str(root), "--json", "--no-cache", *jobs),
            "lens-rl perfetto -o X.pftrace": (MEASURE, "perfetto", str(root), "-o", str(root / "t.pftrace"), *jobs),
            "lens-rl perfetto -o X.json": (MEASURE, "perfetto", str(root), "-o", str(root / "t.json"), *jobs),
            "goodput without the critical path": (
                NO_CRITICAL,
                str(root / "run"),
                *([str(args.jobs)] if args.jobs else []),
            ),
        }
        # Rounds of every case, the baseline in each: on a shared machine whose speed drifts, a ratio is
        # only fair within one round; the median over rounds is what is reported.
        runs: dict[str, list[dict]] = {name: [] for name in cases}
        refresh: dict[str, list[dict]] = {name: [] for name in REFRESH}
        for _ in range(args.rounds):
            for name, command in cases.items():
                if not args.refresh_only:
                    runs[name].append(_run(*command))
            for name, measured in _refresh_round(root, args.spans, args.files, jobs).items():
                refresh[name].append(measured)
        if args.refresh_only:
            _print_refresh(refresh, spans)
            return 0
        base_runs = runs["plain json.loads pass (stdlib)"]
        print(
            f"\n{'case':34s} {'wall s':>8s} {'spans/s':>10s} {'peak RSS':>9s} {'CPU s':>7s} {'vs plain parse':>15s}"
            f"{'  (each round)' if args.rounds > 1 else ''}"
        )
        results = []
        for name, measured in runs.items():
            wall = statistics.median(r["s"] for r in measured)
            ratios = [r["s"] / b["s"] for r, b in zip(measured, base_runs, strict=True)]
            ratio, rss = statistics.median(ratios), max(r["rss_mb"] for r in measured)
            cpu = statistics.median(r["cpu_s"] for r in measured)  # every process's CPU: the work, whatever the cores
            each = "  " + " ".join(f"{x:.2f}" for x in ratios) if args.rounds > 1 else ""
            print(f"{name:34s} {wall:8.1f} {spans / wall:10,.0f} {rss:7.0f}MB {cpu:7.1f} {ratio:14.2f}x{each}")
            results.append(
                {
                    "case": name,
                    "wall_s": wall,
                    "spans_per_s": spans / wall,
                    "peak_rss_mb": rss,
                    "cpu_s": cpu,
                    "ratio_to_plain_parse": ratio,
                    "ratio_each_round": ratios,
                }
            )
        _print_refresh(refresh, spans)
        with_cp, without = runs["lens-rl goodput --json"], runs["goodput without the critical path"]
        cost = statistics.median(w["s"] / o["s"] - 1.0 for w, o in zip(with_cp, without, strict=True))
        cpu_cost = statistics.median(w["cpu_s"] / o["cpu_s"] - 1.0 for w, o in zip(with_cp, without, strict=True))
        verdict = "ok" if cost <= 0.25 else "over goal"
        print(
            f"\nthe critical path costs {cost:.2f}x of a goodput read without it (wall; CPU {cpu_cost:.2f}x); "
            f"goal <= 0.25x: {verdict}"
        )
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "spans": spans,
                        "files": args.files,
                        "rows": results,
                        "critical_path_cost": cost,
                        "refresh": {name: statistics.median(r["s"] for r in rs) for name, rs in refresh.items()},
                    },
                    indent=2,
                )
            )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
