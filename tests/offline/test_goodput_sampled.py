"""A sampled run's headline goodput estimates the unsampled one: productive time of the kept phases scaled by
``1 / sample_rate`` over the wall measured in full (not the kept seconds over the full wall, which reads about
``sample_rate`` times too low)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.run.records import PartRec, decode, encode, part_from, part_record
from lens_rl.store import Process
from tests.conftest import clean_env

#: 100 steps of a 20 ms generation and 10 ms of loop (long enough that a loaded machine's late wake-ups,
#: a few ms, move the two runs' goodput alike), at ``sample_rate`` argv[2], lens_rl's own stream seeded
#: with argv[3] (which top-level phases are kept is then the same every run).
JOB = """
import sys, time
import lens_rl
from lens_rl import traced_phase
from lens_rl.export import ids

trace_dir, rate, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
config = {"telemetry": {"enabled": True, "trace_dir": trace_dir, "run_id": "r", "sample_rate": rate}}
lens_rl.init_telemetry_driver(config, "grpo")
ids.STREAM.seed(seed)
for step in range(1, 101):
    with traced_phase("step", step=step):
        with traced_phase("generation"):
            time.sleep(0.02)
        time.sleep(0.01)
lens_rl.shutdown_telemetry()
"""


def _goodput(tmp_path: Path, rate: float, seed: int) -> dict[str, object]:
    store = tmp_path / f"t{rate}"
    (tmp_path / "job.py").write_text(JOB)
    env = clean_env()
    subprocess.run([sys.executable, "job.py", str(store), str(rate), str(seed)], env=env, cwd=tmp_path, check=True)
    out = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(store / "r"), "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_sampled_runs_goodput_estimates_the_unsampled_figure(tmp_path: Path) -> None:
    """The same loop at sample_rate 0.5 (seeded: 51 of 100 steps kept) reads a headline goodput within 0.1 of
    the loop at 1.0, not about half of it; so do its attempt's and the steady state, and the report says it
    was sampled."""
    full = _goodput(tmp_path, 1.0, 3)
    sampled = _goodput(tmp_path, 0.5, 3)
    assert sampled["sampled"] is True and full["sampled"] is False
    assert 30 < len(sampled["steps"]) < 70  # type: ignore[arg-type]
    assert abs(sampled["goodput"] - full["goodput"]) < 0.1, (sampled["goodput"], full["goodput"])  # type: ignore[operator]
    assert abs(sampled["steady_state_goodput"] - full["steady_state_goodput"]) < 0.1  # type: ignore[operator]
    attempt, full_attempt = sampled["attempts"][0]["goodput"], full["attempts"][0]["goodput"]  # type: ignore[index]
    assert abs(attempt - full_attempt) < 0.1
    assert sampled["job"]["seconds"]["productive"] < 0.75 * full["job"]["seconds"]["productive"]  # type: ignore[index]


def test_a_parts_sample_rate_survives_the_refresh_cache() -> None:
    """A part's sample rate is kept in its cache record (a refreshed look estimates as a cold one), and a record
    written before the field existed reads as unsampled-rate 1."""
    part = ProcessPart(Process("driver", 0, 1, 0, True), spans=3, sampled=True, sample_rate=0.25)
    assert part_from(decode(encode(part_record(part)), PartRec)).sample_rate == 0.25
    fields = msgspec.msgpack.decode(encode(part_record(part)))
    at = list(PartRec.__struct_fields__).index("sample_rate")
    before = msgspec.msgpack.encode(
        fields[:at]
    )  # (the record as a lens_rl without the field (nor later ones) wrote it)
    assert part_from(decode(before, PartRec)).sample_rate == 1.0


def test_the_estimate_scales_each_parts_kept_productive_time_by_its_own_rate() -> None:
    """Two sampled processes at different rates: each one's kept productive time over its own rate, over the
    wall, clipped at 1; an unsampled view keeps its ratio as it was."""
    from lens_rl.offline.rollup.sampled import estimated_goodput

    a = ProcessPart(Process("driver", 0, 1, 0, True), sampled=True, sample_rate=0.5)
    b = ProcessPart(Process("driver", 0, 2, 1, True), sampled=True, sample_rate=0.25)
    a.bucket_ns["productive"], b.bucket_ns["productive"] = 20, 10
    assert estimated_goodput([a, b], 0.3, 100) == pytest.approx((40 + 40) / 100)
    assert estimated_goodput([a, b], 0.3, 50) == 1.0
    plain = ProcessPart(Process("driver", 0, 3, 0, True))
    plain.bucket_ns["productive"] = 30
    assert estimated_goodput([plain], 0.3, 100) == 0.3
