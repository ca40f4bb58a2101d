"""GPU truth at scale: what joining a day of GPU samples costs a ``goodput`` look, against the same look without.

Run:  python benchmarks/gpu_join.py [--spans 1000000] [--files 50] [--nodes 8] [--devices 8] [--hours 24]
                                    [--hz 2] [--rounds 3] [--keep DIR]

Synthesizes (``synth.py``) a GRPO-shaped run of ``--spans`` spans whose workers name their GPUs
(``rl.gpu.uuids``: worker ``k`` on node ``k % nodes``, device ``(k // nodes) % devices``), and three stores
of it side by side: **plain** (the workers name no GPU: the look as it was before GPU truth), **uuids** (they
do, no sample file: the same look without sample files) and **samples** (they do, and one sample file per node
of ``--hours`` at ``--hz`` with ``--devices`` devices, utilisation varying sample to sample). Then, each in a
fresh process and in every round, ``lens-rl goodput --json --no-cache`` of each store, and on **samples**
through the refresh cache: the cold look that writes it, and after 1 % more spans and 1 % more samples were
appended (in the first round, its answer checked against a ``--no-cache`` look at the same grown store).
Reported: medians of wall and CPU, and the ratios (goals: samples / uuids <= 1.10; the +1 % look <= 0.10 of
its cold look, SPEC "Refresh").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import MEASURE, _compile, _run
from synth import T0, append_steps, steps_of, synthesize

__all__ = ["main"]


def _name_gpus(run: Path, nodes: int, devices: int) -> None:
    """Give each worker file's header ``rl.gpu.uuids`` and its node's ``host.name`` (rewritten in place)."""
    for path in sorted(run.glob("spans-lm_policy-*.jsonl")):
        with path.open("rb") as handle:
            head = json.loads(handle.readline())
            rest = handle.read()
        rank = head["resource"]["nv.dl.rank"]
        node, device = rank % nodes, (rank // nodes) % devices
        head["resource"]["rl.gpu.uuids"] = [f"GPU-n{node}-d{device}"]
        head["resource"]["host.name"] = f"node-{node}"
        path.write_bytes(json.dumps(head).encode() + b"\n" + rest)


def _sample_lines(node: int, devices: int, first: int, count: int, hz: float) -> str:
    """Sample lines ``first`` .. ``first + count - 1`` of a node (utilisation cycling through 0-100)."""
    period = int(1e9 / hz)
    out = []
    for k in range(first, first + count):
        d = ",".join(
            f"[{(k * 7 + i * 13 + node) % 101},{(k + i) % 50},{(40 << 30) + k % 4096},{200000 + k % 500},1980,"
            "null,null,null]"
            for i in range(devices)
        )
        out.append(f'{{"t":{T0 + k * period},"d":[{d}]}}\n')
    return "".join(out)


def _write_samples(run: Path, nodes: int, devices: int, lines: int, hz: float) -> None:
    for node in range(nodes):
        head = {
            "v": 1,
            "header": True,
            "format": "lens_rl.gpu/1",
            "kind": "gpu",
            "host": f"node-{node}",
            "run_id": "run",
            "attempt": 0,
            "pid": 9000 + node,
            "since": T0,
            "hz": hz,
            "devices": [
                {
                    "i": i,
                    "uuid": f"GPU-n{node}-d{i}",
                    "name": "H100",
                    "mem_total": 80 << 30,
                    "has": ["util", "mem_util", "mem_used", "power", "sm_clock"],
                }
                for i in range(devices)
            ],
        }
        with (run / f"gpu-node-{node}-{9000 + node}.jsonl").open("w") as out:
            out.write(json.dumps(head) + "\n")
            for first in range(0, lines, 20_000):
                out.write(_sample_lines(node, devices, first, min(20_000, lines - first), hz))


def _same_answer(warm: Path, cold: Path) -> str:
    """ "ok" where the two saved ``--json`` answers are the same, else the top-level keys that differ."""
    a, b = json.loads(warm.read_text()), json.loads(cold.read_text())
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return "ok" if not differ else f"DIFFERS in {differ}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--hz", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", default=None, help="build the stores here and keep them")
    args = ap.parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="lens-gpu-bench-"))
    lines = int(args.hours * 3600 * args.hz)
    try:
        stores = {name: root / name for name in ("plain", "uuids", "samples")}
        if not (stores["samples"] / "run").is_dir():
            synthesize(stores["plain"], args.spans, args.files)
            for name in ("uuids", "samples"):
                shutil.copytree(stores["plain"], stores[name])
                _name_gpus(stores[name] / "run", args.nodes, args.devices)
            _write_samples(stores["samples"] / "run", args.nodes, args.devices, lines, args.hz)
        sample_mb = sum(p.stat().st_size for p in (stores["samples"] / "run").glob("gpu-*.jsonl")) / 1e6
        span_mb = sum(p.stat().st_size for p in (stores["plain"] / "run").glob("spans-*.jsonl")) / 1e6
        print(
            f"stores under {root}: {span_mb:.0f} MB of spans; {args.nodes} sample files of {lines} lines, "
            f"{args.devices} devices each: {sample_mb:.0f} MB",
            flush=True,
        )
        _compile()
        looks: dict[str, list[dict]] = {}
        checks: list[str] = []
        for _ in range(args.rounds):
            for name, store in stores.items():
                looks.setdefault(f"cold {name}", []).append(
                    _run(MEASURE, "goodput", str(store / "run"), "--json", "--no-cache")
                )
            run = stores["samples"] / "run"
            sizes = {p: p.stat().st_size for p in run.glob("*.jsonl")}
            shutil.rmtree(run / ".lens_rl-cache", ignore_errors=True)
            try:
                looks.setdefault("cache: cold", []).append(_run(MEASURE, "goodput", str(run), "--json"))
                append_steps(
                    stores["samples"],
                    args.files,
                    steps_of(args.spans, args.files),
                    steps_of(args.spans // 100, args.files),
                    seed=1,
                )
                for node in range(args.nodes):
                    with (run / f"gpu-node-{node}-{9000 + node}.jsonl").open("a") as out:
                        out.write(_sample_lines(node, args.devices, lines, lines // 100, args.hz))
                warm, cold = root / "refresh.json", root / "refresh.cold"
                looks.setdefault("cache: +1 % spans and samples", []).append(
                    _run(MEASURE, "goodput", str(run), "--json", save=warm)
                )
                if not checks:  # (the first round: the +1 % answer against a --no-cache read of the same store)
                    _run(MEASURE, "goodput", str(run), "--json", "--no-cache", save=cold)
                    checks.append(_same_answer(warm, cold))
            finally:
                for path, size in sizes.items():
                    os.truncate(path, size)
                shutil.rmtree(run / ".lens_rl-cache", ignore_errors=True)
        med = {k: {m: statistics.median(r[m] for r in v) for m in ("s", "cpu_s", "rss_mb")} for k, v in looks.items()}
        for name, m in med.items():
            print(f"{name:34s} wall {m['s']:7.2f} s   cpu {m['cpu_s']:7.2f} s   peak RSS {m['rss_mb']:6.0f} MB")
        ratio = med["cold samples"]["s"] / med["cold uuids"]["s"]
        refresh = med["cache: +1 % spans and samples"]["s"] / med["cache: cold"]["s"]
        print(
            f"samples / uuids (goal <= 1.10): {ratio:.2f}x; uuids / plain: "
            f"{med['cold uuids']['s'] / med['cold plain']['s']:.2f}x; "
            f"+1 % refresh / its cold look (goal <= 0.10): {refresh:.3f}x   ({args.rounds} rounds, medians)"
        )
        print(f"+1 % through the cache == --no-cache: {checks[0] if checks else 'not checked'}")
        print("rounds (s): " + "; ".join(f"{k}: " + " / ".join(f"{r['s']:.2f}" for r in v) for k, v in looks.items()))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
