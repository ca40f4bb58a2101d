"""lens_rl's figures beside the job's own, for the closing note: per step, per optimizer step, per TRL block.

    lens-rl run --trace-dir t --run-id r -- python tests/frameworks/trl_job.py job.json
    python tests/frameworks/trl_figures.py t/r job.json

(test_trl.py asserts the same agreement, within 1 ms + 1 %.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(store: Path, job: Path) -> None:
    figures = json.loads(job.read_text())
    rows = [row for p in store.glob("spans-*.jsonl") for row in map(json.loads, p.read_text().splitlines())]
    rows = sorted((row for row in rows if "n" in row), key=lambda row: row["b"])

    def seconds(row: dict[str, Any]) -> float:
        return (row["e"] - row["b"]) / 1e9

    for name, key in (("step", "steps"), ("optimizer_step", "optimizer")):
        print(f"{name:<52}{'lens_rl s':>11}{'job s':>11}{'diff ms':>9}")
        for row in rows:
            if row["n"] == name:
                theirs = figures[key][str(row["a"]["rl.step"])]
                print(
                    f"  {row['a']['rl.step']:<50}{seconds(row):>11.6f}{theirs:>11.6f}{1e3 * (seconds(row) - theirs):>9.3f}"
                )
    print(f"{'TRL block (phase)':<52}{'lens_rl s':>11}{'TRL s':>11}{'diff ms':>9}")
    by_block: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if "rl.trl_block" in row["a"]:
            by_block.setdefault(row["a"]["rl.trl_block"], []).append(row)
    for name, theirs in figures["profiling"]:
        row = by_block[name].pop(0)
        label = f"{name} ({row['n']})"
        print(f"  {label:<50}{seconds(row):>11.6f}{theirs:>11.6f}{1e3 * (seconds(row) - theirs):>9.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
