"""Offline analysis at scale: goodput, report and Perfetto over synthesized stores, against a plain parse.

Run:  python benchmarks/scale.py [--spans 1000000] [--files 50] [--steps S] [--groups G] [--jobs N] [--keep DIR]
                                 [--rounds K] [--refresh-only] [--json OUT]

Synthesizes (``synth.py``) a GRPO-shaped run in the v2 file store (one driver file, the rest worker files;
per step a driver umbrella with its phases, and on each worker a bucketed phase called from the driver plus
a nested child), and a resumed job of three attempts of about as many spans (the driver restarted under its
pid, appending a header per attempt to its file; ``files - 1`` new worker files per attempt; each attempt
re-runs the previous one's last 5 steps). ``--steps S`` makes both stores of S steps (each worker writing more
spans under its phase per step, as many as make about ``--spans``) and ``--groups G`` lays the workers out in G
worker groups (issue 48's second store: ``--steps 4000 --groups 2``, a driver and two worker groups in 50
files). Then it times, each in a fresh process:

* the baseline: one plain pass of the standard library's ``json.loads`` over every line;
* ``lens-rl goodput --json --no-cache`` (default ``--jobs``: the cores, at most 4);
* ``lens-rl perfetto -o X.pftrace`` and ``-o X.json``;
* the goodput read without the critical path (``analyze(..., critical=False)``): what the critical path
  costs, as a ratio to that read (goal: at most 0.25x);
* the refresh cache, on each store: ``lens-rl goodput --json`` cold (it writes the cache), of the unchanged
  store, and after 1 % more spans were appended (whole steps, as a job writes them: to every file of the
  one-attempt run; to the last attempt's files of the three), as ratios to that store's cold read (goals,
  SPEC "Refresh" and issue 38: unchanged <= 0.1x; +1 % <= 0.10x, <= 0.15x for the three attempts);
* ``lens-rl report RUN -o X.html`` on the one-attempt run: first (no cache), second of the unchanged store
  (goal <= 0.25x of the first), and after the +1 % (a ratio to the first, no goal).

``--refresh-only`` runs only the refresh and report cases, and the baseline: the first look of the one-attempt
store, which writes the cache, is given as a ratio to it too (goal, issue 48: at most 1.10x). In the first round the +1 % goodput reports are
checked against a ``--no-cache`` read of the same files (identical JSON), and the three-attempt store against
what it should read as (3 attempts, 2 restarts).

The commands run with bytecode as an installed user has it: the lens_rl package is byte-compiled
(``python -m compileall -q``) before any timing, and ``PYTHONDONTWRITEBYTECODE`` (which this machine sets) is
removed from the measured processes' environment; otherwise every fresh process compiles what it imports of
lens_rl again (measured: 0.29-0.36 s against 0.22-0.28 s for a whole ``lens-rl goodput`` process of an
unchanged 1 M-span store).

A wall time is the command's own (``lens_rl.cli.main``): Python's start and the import of ``lens_rl.cli`` are
left out; its stdout is a text stream over a byte buffer, as a terminal's, a pipe's or a file's is (a
``StringIO`` would time a copy no real stdout makes: 8 MB of ``--json`` decoded to text). It prints spans/s, peak RSS (the largest of the command and its worker processes), the CPU time of
all its processes (the work done, whatever the cores), and each command's wall time as a ratio to the
baseline run in the same round (``--rounds K``: K rounds of every case, medians reported; the machine's speed drifts
between rounds). Goals on 1 M spans / 50 files: peak RSS <= 300 MB, and no slower than the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (synth.py, also when loaded by its path)

from synth import (
    Shape,
    append_attempt_steps,
    append_steps,
    per_step,
    shape_for,
    steps_of,
    synthesize,
    synthesize_attempts,
)

__all__ = ["append_attempt_steps", "append_steps", "main", "steps_of", "synthesize", "synthesize_attempts"]

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
import json, os, resource, sys, time, io, contextlib
from lens_rl.cli import main
out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # (stdout as a command has it: text over a byte buffer)
t = time.perf_counter()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
    out.flush()
s = time.perf_counter() - t
own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
if os.environ.get("LENS_SCALE_SAVE"):
    open(os.environ["LENS_SCALE_SAVE"], "wb").write(out.buffer.getvalue())
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


def _env(**extra: str) -> dict[str, str]:
    """The measured processes' environment: this one, writing and reading bytecode as an installed user's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def _compile() -> str:
    """Byte-compile the lens_rl package the measured processes import (as installing it does); its folder."""
    where = subprocess.run(
        [sys.executable, "-c", "import lens_rl, os; print(os.path.dirname(lens_rl.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    ).stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=True, env=_env())
    return where


def _run(code: str, *args: str, save: Path | None = None) -> dict:
    env = _env(LENS_SCALE_SAVE=str(save)) if save else _env()
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


ONE, THREE = "1 attempt", "3 attempts"
#: (store, case) -> goal (a ratio to the first case of the same store and command; None: no goal)
LOOKS: dict[tuple[str, str], float | None] = {
    (ONE, "goodput: cold, writes the cache"): None,
    (ONE, "goodput: unchanged"): 0.10,
    (ONE, "goodput: +1 % spans"): 0.10,
    (ONE, "report: first (no cache)"): None,
    (ONE, "report: second, unchanged"): 0.25,
    (ONE, "report: after +1 % spans"): None,
    (THREE, "goodput: cold, writes the cache"): None,
    (THREE, "goodput: unchanged"): 0.10,
    (THREE, "goodput: +1 % spans"): 0.15,
}


def _looks(run: Path, command: tuple[str, ...], grow: Callable[[], object], check: Path | None) -> list[dict]:
    """Three looks at ``run``, each in a fresh process: the first with no cache (it writes it), one of the
    unchanged store, one after ``grow()`` appended 1 % more spans; with ``check``, the last look's output is
    saved there and a ``--no-cache`` read's beside it (``.cold``). The store and its cache are put back."""
    shutil.rmtree(run / ".lens_rl-cache", ignore_errors=True)
    sizes = {path: path.stat().st_size for path in run.glob("spans-*.jsonl")}
    try:
        out = [_run(*command), _run(*command)]
        grow()
        out.append(_run(*command, save=check))
        if check is not None:
            _run(*command, "--no-cache", save=check.with_suffix(".cold"))
    finally:
        for path, size in sizes.items():
            os.truncate(path, size)
        shutil.rmtree(run / ".lens_rl-cache", ignore_errors=True)
    return out


def _checks(root: Path) -> list[str]:
    """What the first round's saved +1 % reports say: each identical to a ``--no-cache`` read, and the three
    attempts' store read as 3 attempts with 2 restarts; one line each, "ok" or what differs."""
    lines = []
    for store, name in ((ONE, "one"), (THREE, "three")):
        warm = json.loads((root / f"{name}.json").read_text())
        cold = json.loads((root / f"{name}.cold").read_text())
        differ = sorted(k for k in set(warm) | set(cold) if warm.get(k) != cold.get(k))
        lines.append(f"{store}, +1 %: goodput through the cache == --no-cache: {'ok' if not differ else differ}")
        if store == THREE:
            got = (len(warm["attempts"]), warm["job"]["restarts"])
            lines.append(f"{store}: reads as 3 attempts, 2 restarts: {'ok' if got == (3, 2) else got}")
    return lines


def _round(
    root: Path, spans: int, files: int, jobs: list[str], check: bool, shape: Shape
) -> dict[tuple[str, str], dict]:
    """One round of every refresh and report look, on both stores (of ``shape``)."""
    one, three = root / "run", root / "attempts" / "run"
    more = steps_of(spans // 100, files, shape)

    def grow_one() -> None:
        append_steps(root, files, steps_of(spans, files, shape), more, seed=1, shape=shape)

    def grow_three() -> None:
        append_attempt_steps(root / "attempts", spans, files, more, shape=shape)

    looks = [
        (ONE, "goodput", one, ("goodput", str(one), "--json", *jobs), grow_one, root / "one.json"),
        (ONE, "report", one, ("report", str(one), "-o", str(root / "r.html"), *jobs), grow_one, None),
        (THREE, "goodput", three, ("goodput", str(three), "--json", *jobs), grow_three, root / "three.json"),
    ]
    out: dict[tuple[str, str], dict] = {}
    for store, command, run, args, grow, save in looks:
        names = [case for (s, case) in LOOKS if s == store and case.startswith(command)]
        for case, measured in zip(names, _looks(run, (MEASURE, *args), grow, save if check else None), strict=True):
            out[(store, case)] = measured
    return out


def _table(looks: dict[tuple[str, str], list[dict]]) -> list[dict]:
    """The refresh and report table, printed and returned: each look's wall as a ratio to the first look of
    its store and command in the same round (medians over rounds)."""
    print(f"\n{'store':11s} {'case':32s} {'wall s':>8s} {'peak RSS':>9s} {'ratio':>8s} {'goal':>8s}")
    rows: list[dict] = []
    first: dict[tuple[str, str], list[dict]] = {}
    for (store, case), goal in LOOKS.items():
        measured = looks[(store, case)]
        first.setdefault((store, case.split(":")[0]), measured)
        base = first[(store, case.split(":")[0])]
        ratio = statistics.median(r["s"] / b["s"] for r, b in zip(measured, base, strict=True))
        wall, rss = statistics.median(r["s"] for r in measured), max(r["rss_mb"] for r in measured)
        ok = None if goal is None else ratio <= goal
        verdict = "" if goal is None else f"<= {goal:.2f}x  {'ok' if ok else 'over'}"
        print(f"{store:11s} {case:32s} {wall:8.2f} {rss:7.0f}MB {ratio:7.3f}x {verdict}")
        row = {"store": store, "case": case, "wall_s": wall, "peak_rss_mb": rss, "ratio": ratio}
        rows.append(row | {"goal": goal, "ok": ok, "wall_each_round": [r["s"] for r in measured]})
    return rows


def _first_look(looks: dict[tuple[str, str], list[dict]], base_runs: list[dict]) -> float:
    """The first look at the one-attempt store (it writes the cache) as a ratio to the plain ``json.loads``
    pass of the same round (median over rounds); printed against its goal."""
    first = looks[(ONE, "goodput: cold, writes the cache")]
    ratio = statistics.median(r["s"] / b["s"] for r, b in zip(first, base_runs, strict=True))
    each = " ".join(f"{r['s'] / b['s']:.2f}" for r, b in zip(first, base_runs, strict=True))
    print(
        f"\nthe first look (writes the cache) costs {ratio:.2f}x the plain json.loads pass ({each}); "
        f"goal <= 1.10x: {'ok' if ratio <= 1.10 else 'over goal'}"
    )
    return ratio


def _count(run: Path) -> tuple[int, int]:
    """A store's span lines (its header lines left out) and its files."""
    paths, lines = list(run.glob("spans-*.jsonl")), 0
    for path in paths:
        with path.open("rb") as handle:
            lines += sum(not line.startswith(b'{"v": 2, "header"') for line in handle)
    return lines, len(paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--steps", type=int, default=None, help="steps of each store (default: as --spans make)")
    parser.add_argument("--groups", type=int, default=1, help="worker groups (1 or 2)")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--keep", help="synthesize into (and keep, or reuse) this directory")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every case; medians are reported")
    parser.add_argument("--refresh-only", action="store_true", help="only the refresh and report cases")
    args = parser.parse_args(argv)
    try:
        shape = shape_for(args.spans, args.files, args.steps, args.groups)
    except ValueError as exc:
        parser.error(str(exc))
    size = args.spans if args.steps is None else per_step(args.files, shape) * args.steps  # (whole steps)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="lens-scale-"))
    run = root / "run"
    try:
        t = time.perf_counter()
        if not run.exists():
            synthesize(root, size, args.files, shape=shape)
        if not (root / "attempts" / "run").exists():
            synthesize_attempts(root / "attempts", size, args.files, shape=shape)
        spans = 0
        for name, folder in ((ONE, run), (THREE, root / "attempts" / "run")):
            count, files = _count(folder)
            spans = spans or count
            size_mb = sum(p.stat().st_size for p in folder.glob("spans-*.jsonl")) / 1e6
            print(
                f"store, {name}: {count:,} spans in {files} files, {size_mb:.0f} MB ({size_mb * 1e6 / count:.0f} B a span)"
                f"; {steps_of(size, args.files, shape):,} steps, {shape.groups} worker group(s)"
            )
        print(f"made in {time.perf_counter() - t:.0f}s; lens_rl byte-compiled in {_compile()}")
        jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
        cases = {  # name -> what runs (the baseline first in every round)
            "plain json.loads pass (stdlib)": (BASELINE, str(run)),
            "lens-rl goodput --json": (MEASURE, "goodput", str(run), "--json", "--no-cache", *jobs),
            "lens-rl perfetto -o X.pftrace": (MEASURE, "perfetto", str(run), "-o", str(root / "t.pftrace"), *jobs),
            "lens-rl perfetto -o X.json": (MEASURE, "perfetto", str(run), "-o", str(root / "t.json"), *jobs),
            "goodput without the critical path": (NO_CRITICAL, str(run), *([str(args.jobs)] if args.jobs else [])),
        }
        # Rounds of every case, the baseline in each: on a shared machine whose speed drifts, a ratio is
        # only fair within one round; the median over rounds is what is reported.
        runs: dict[str, list[dict]] = {name: [] for name in cases}
        looks: dict[tuple[str, str], list[dict]] = {key: [] for key in LOOKS}
        for k in range(args.rounds):
            for name, command in cases.items():
                if not args.refresh_only or command[0] is BASELINE:
                    runs[name].append(_run(*command))
            for key, measured in _round(root, size, args.files, jobs, k == 0, shape).items():
                looks[key].append(measured)
        steps = steps_of(size, args.files, shape)
        results: dict = {
            "spans": spans,
            "files": args.files,
            "steps": steps,
            "groups": shape.groups,
            "rounds": args.rounds,
        }
        if not args.refresh_only:
            results.update(_plain_table(runs, spans, args.rounds))
        results["looks"] = _table(looks)
        results["first_look_vs_plain_parse"] = _first_look(looks, runs["plain json.loads pass (stdlib)"])
        results["checks"] = _checks(root)
        print("\n" + "\n".join(results["checks"]))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def _plain_table(runs: dict[str, list[dict]], spans: int, rounds: int) -> dict:
    """The table of the cold commands against the plain parse, and the critical path's cost; printed, and
    returned for ``--json``."""
    base_runs = runs["plain json.loads pass (stdlib)"]
    print(
        f"\n{'case':34s} {'wall s':>8s} {'spans/s':>10s} {'peak RSS':>9s} {'CPU s':>7s} {'vs plain parse':>15s}"
        f"{'  (each round)' if rounds > 1 else ''}"
    )
    results = []
    for name, measured in runs.items():
        wall = statistics.median(r["s"] for r in measured)
        ratios = [r["s"] / b["s"] for r, b in zip(measured, base_runs, strict=True)]
        ratio, rss = statistics.median(ratios), max(r["rss_mb"] for r in measured)
        cpu = statistics.median(r["cpu_s"] for r in measured)  # every process's CPU: the work, whatever the cores
        each = "  " + " ".join(f"{x:.2f}" for x in ratios) if rounds > 1 else ""
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
    with_cp, without = runs["lens-rl goodput --json"], runs["goodput without the critical path"]
    cost = statistics.median(w["s"] / o["s"] - 1.0 for w, o in zip(with_cp, without, strict=True))
    cpu_cost = statistics.median(w["cpu_s"] / o["cpu_s"] - 1.0 for w, o in zip(with_cp, without, strict=True))
    verdict = "ok" if cost <= 0.25 else "over goal"
    print(
        f"\nthe critical path costs {cost:.2f}x of a goodput read without it (wall; CPU {cpu_cost:.2f}x); "
        f"goal <= 0.25x: {verdict}"
    )
    return {"rows": results, "critical_path_cost": cost}


if __name__ == "__main__":
    sys.exit(main())
