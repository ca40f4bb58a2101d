"""``lens-rl perfetto`` through the refresh cache, side by side in one process, as ratios to a cold read.

Run:  python benchmarks/perfetto_refresh.py [--spans 200000] [--files 20] [--rounds 3] [--jobs N]

Synthesizes (``synth.py``) a GRPO-shaped store, then per round and per format (``-o X.json``, ``-o X.pftrace``),
on a fresh copy of it: ``--no-cache`` (cold), a first look (cold, writes the cache), a second look of the
unchanged store, and a look after 1 % more spans were appended (whole steps, to every file), then ``--no-cache``
of the grown store (checked byte for byte against the look before it). Also one plain pass of the store's reader
(``iter_rows`` over every file, the lines decoded and nothing drawn): the share of a cold look that is reading.
Medians over the rounds; each look's wall time as a ratio to the cold one of its round.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (synth.py)

from synth import append_steps, steps_of, synthesize


def _look(run: Path, out: Path, *extra: str) -> float:
    from lens_rl.cli import main

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["perfetto", str(run), "-o", str(out), *extra])
    assert code == 0, code
    return time.perf_counter() - start


def _plain_read(run: Path) -> float:
    from lens_rl.store import iter_rows, span_files

    start = time.perf_counter()
    for path in span_files(run):
        for _ in iter_rows(path):
            pass
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "pristine"
        spans = synthesize(pristine, args.spans, args.files)
        steps = steps_of(args.spans, args.files)
        for ext in ("json", "pftrace"):  # (imports and first calls out of the timings)
            _look(pristine / "run", Path(tmp) / f"warm.{ext}", "--no-cache", *jobs)
        for _ in range(args.rounds):
            for ext in ("json", "pftrace"):
                root = Path(tmp) / "store"
                shutil.rmtree(root, ignore_errors=True)
                shutil.copytree(pristine, root)
                run, out = root / "run", Path(tmp) / f"t.{ext}"
                row = {
                    "cold": _look(run, out, "--no-cache", *jobs),
                    "first look": _look(run, out, *jobs),
                    "unchanged": _look(run, out, *jobs),
                }
                append_steps(root, args.files, steps, max(1, steps // 100))
                row["+1 %"] = _look(run, out, *jobs)
                cold = Path(tmp) / f"cold.{ext}"
                row["cold of +1 %"] = _look(run, cold, "--no-cache", *jobs)
                assert filecmp.cmp(out, cold, shallow=False), "the +1 % look differs from --no-cache"
                for case, seconds in row.items():
                    times.setdefault((ext, case), []).append(seconds)
                    times.setdefault((ext, case + " ratio"), []).append(seconds / row["cold"])
            times.setdefault(("read", "plain"), []).append(_plain_read(pristine / "run"))
    print(f"{spans} spans in {args.files} files, {args.rounds} rounds, jobs {args.jobs or 'default'} (medians)")
    read = statistics.median(times[("read", "plain")])
    for ext in ("json", "pftrace"):
        cold = statistics.median(times[(ext, "cold")])
        print(f"-o X.{ext}: cold {cold:.2f} s; the store's plain read {read:.2f} s ({read / cold:.0%} of it)")
        for case in ("first look", "unchanged", "+1 %", "cold of +1 %"):
            seconds, ratio = statistics.median(times[(ext, case)]), statistics.median(times[(ext, case + " ratio")])
            print(f"  {case:>14}: {seconds:6.2f} s  {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
