"""Hostile figures in a store or its refresh cache: sums of a store's times past int64's reach (spans of ~4e18
ns nested or overlapping in one step, a file that grows after its part was cached) are saturated, and a cache
record naming a bucket nobody knows is corrupt: every reading answers, and the cache's answer is a cold read's."""

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


def _goodput(root: Path, *args: str, said: list[str] | None = None) -> Any:
    ran = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(root), "--json", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=ROOT,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    if said is not None:
        said.extend(ran.stderr.splitlines())
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


def test_a_cache_record_with_an_edited_bucket_name_costs_one_line_and_a_cold_read(tmp_path: Path) -> None:
    """Cache entries whose bucket names were edited ("overhead" to "overheaX") are corrupt: goodput, with and
    without --steps, says so in one line of stderr and answers as --no-cache does."""
    run = tmp_path / "traces" / "r"
    spans = [span("step", 0, 10, "s1", step=1), span("gen", 0, 6, "g", bucket="productive", parent="s1")]
    spans += [span("sync", 6, 9, "y", bucket="overhead", parent="s1"), span("step", 10, 20, "s2", step=2)]
    spans += [span("gen", 10, 18, "g2", bucket="productive", parent="s2", step=2)]
    write_process(run, "driver", 0, 1, spans)
    for steps in ((), ("--steps", "1-2")):
        cold = _goodput(run.parent, "--no-cache", *steps)
        assert _goodput(run.parent, *steps) == cold
        edited = 0
        for entry in (run / ".lens_rl-cache").glob("*"):
            data = entry.read_bytes() if entry.is_file() else b""
            if entry.suffix == ".cache" and b"overhead" in data:
                entry.write_bytes(data.replace(b"overhead", b"overheaX"))
                edited += 1
            elif entry.name.startswith("report-"):
                entry.unlink()  # (a kept answer would be read before the entries)
        assert edited == 1
        said: list[str] = []
        assert _goodput(run.parent, *steps, said=said) == cold
        assert len([line for line in said if "cache" in line]) == 1 and "corrupt" in " ".join(said), said
