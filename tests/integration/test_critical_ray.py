"""The critical path of a real Ray job: the slow rank (a sleep) comes out on top of every step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env

pytestmark = pytest.mark.slow


def test_the_slow_rank_holds_every_step_up(tmp_path: Path) -> None:
    """Both trainers run under the driver's training phase; rank 1 takes 0.3 s to rank 0's 0.1 s: every
    step's top stretch is rank 1's training, the trainers' training is about 0.3 s of each step's path
    (exposed: 0.3 of their 0.4 s), then the driver's advantage phase."""
    job = Path(__file__).with_name("critical_job.py")
    out = subprocess.run(
        [sys.executable, str(job), str(tmp_path / "traces")],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    goodput = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(tmp_path / "traces"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert goodput.returncode == 0, goodput.stderr
    critical = json.loads(goodput.stdout)["critical_path"]
    assert len(critical["steps"]) == 4
    for step in critical["steps"]:
        assert step["top"]["worker_group"] == "lm_policy" and step["top"]["rank"] == 1, step
        assert step["top"]["phase"] == "policy_training" and step["top"]["seconds"] == pytest.approx(0.3, abs=0.05)
    phases = {(p["worker_group"], p["phase"]): p for p in critical["phases"]}
    trained = phases[("lm_policy", "policy_training")]
    assert trained["critical_s"] == pytest.approx(4 * 0.3, abs=0.2)
    assert trained["exposed_share"] == pytest.approx(0.75, abs=0.1)
    assert phases[("driver", "advantage")]["critical_s"] == pytest.approx(4 * 0.05, abs=0.05)
