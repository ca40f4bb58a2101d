"""Sums of a hostile store's times past int64's reach (spans of ~4e18 ns nested or overlapping in one step, a
file that grows after its part was cached) are saturated: every reading answers, and the refresh cache's
answer is a cold read's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import clean_env
from tests.stores import span, write_process

ROOT = Path(__file__).resolve().parents[2]
E = 6e9  # seconds: 6e18 ns, three of which pass int64


def _spans(step: int, at: float, tag: str = "") -> list[dict[str, Any]]:
    """One step of 6e18 ns holding three nested productive spans and three overlapping siblings."""
    s, e = f"s{step}{tag}", f"e{step}{tag}"
    nested = [span("gen", at + E * k / 100, at + E * (0.9 - k / 100), f"g{step}{k}{tag}", bucket="productive",
                   parent=s if k == 0 else f"g{step}{k - 1}{tag}") for k in range(3)]  # fmt: skip
    siblings = [span("train", at + E * k / 100, at + E * 0.95, f"t{step}{k}{tag}", bucket="productive", parent=e)
                for k in range(3)]  # fmt: skip
    umbrella = span("step", at, at + E, s, step=step)
    return [umbrella, *nested, span("step", at, at + E, e, step=step, trace="u"), *siblings]


def _goodput(root: Path, *args: str) -> Any:
    ran = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(root), "--json", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=ROOT,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout)


def test_times_past_int64_give_an_answer_and_the_cache_gives_a_cold_reads(tmp_path: Path) -> None:
    """A store whose step sums pass int64 is read (all steps and --steps), and through the refresh cache,
    also after its file grew, the answer equals --no-cache's."""
    run = tmp_path / "traces" / "r"
    path = write_process(run, "driver", 0, 1, _spans(1, 0))
    for steps in ((), ("--steps", "1-1")):
        assert _goodput(run.parent, *steps) == _goodput(run.parent, "--no-cache", *steps)
    with path.open("a") as out:  # the cached part's file grows: the same step again, and the next
        out.writelines(json.dumps(s) + "\n" for s in [*_spans(1, 0, "again"), *_spans(2, E)])
    for steps in ((), ("--steps", "1-2")):
        assert _goodput(run.parent, *steps) == _goodput(run.parent, "--no-cache", *steps)
