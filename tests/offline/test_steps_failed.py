"""A step that failed (an exception left its umbrella: a veRL ``update_actor`` raising inside ``marked_timer``, a
user's loop raising out of its step) is no complete step: kept out of the steady state and the step
percentiles, its error said, through the refresh cache as cold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env, lens

#: A user's loop whose fourth step raises after its productive work (the job exits 1).
LOOP = """
import time
from lens_rl import traced_phase

for step in range(1, 6):
    with traced_phase("step", step=step):
        with traced_phase("policy_training", bucket="productive"):
            time.sleep(0.05)
        with traced_phase("weight_sync", bucket="overhead"):
            time.sleep(0.01 * step)
        if step == 4:
            raise RuntimeError("out of memory in update_actor")
"""


def _goodput(store: Path, *flags: str) -> dict[str, Any]:
    out = lens("goodput", str(store), "--json", *flags)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_step_that_raised_is_failed_and_out_of_the_step_figures(tmp_path: Path) -> None:
    """Step 4 raised out of its umbrella: it reads incomplete with its error and a note naming it; the steady
    state is steps 2-3's, the step times leave it out; the cached read and the cold one say the same."""
    (tmp_path / "loop.py").write_text(LOOP)
    done = subprocess.run(
        [sys.executable, "-m", "lens_rl", "run", "--trace-dir", str(tmp_path / "t"), "--run-id", "r", "--"]
        + [sys.executable, "loop.py"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "out of memory" in done.stderr
    store = tmp_path / "t" / "r"
    reports = [_goodput(store), _goodput(store), _goodput(store, "--no-cache")]  # cold, cached, --no-cache
    assert reports[0] == reports[1] == reports[2]
    report = reports[0]
    steps = {row["step"]: row for row in report["steps"]}
    assert sorted(steps) == [1, 2, 3, 4]
    assert steps[4]["incomplete"] and steps[4]["error"] == {
        "type": "RuntimeError",
        "message": "out of memory in update_actor",
    }
    assert not any(steps[s]["incomplete"] or "error" in steps[s] for s in (1, 2, 3))
    assert any("step 4 failed" in note and "out of memory in update_actor" in note for note in report["notes"])
    steady = sum(steps[s]["seconds"]["productive"] for s in (2, 3)) / sum(steps[s]["wall_s"] for s in (2, 3))
    assert report["steady_state_goodput"] == pytest.approx(steady, rel=0.01)
    assert report["step_time"]["max_s"] == max(steps[s]["wall_s"] for s in (1, 2, 3)) < steps[4]["wall_s"]
    assert 4 not in [row["step"] for row in report["slowest_steps"]]
    table = lens("goodput", str(store))
    assert table.returncode == 0 and "(failed: RuntimeError)" in table.stdout, table.stderr
    # the same store seen while the job ran, then grown: cut after its first half (the failed umbrella among the
    # new lines), and cut after the failed umbrella (held by the first look, its parent the job root not written
    # yet, and read again from there): through the cache its error is kept, as a cold read keeps it
    (driver,) = store.glob("spans-driver-*.jsonl")
    whole = driver.read_bytes()
    failed = whole.index(b'"n":"step"', whole.index(b'"rl.step":4') - 400)
    for k, cut in enumerate((whole.index(b"\n", len(whole) // 2) + 1, whole.index(b"\n", failed) + 1)):
        grown = tmp_path / f"grown{k}"
        grown.mkdir()
        (grown / driver.name).write_bytes(whole[:cut])
        _goodput(grown)
        with (grown / driver.name).open("ab") as handle:
            handle.write(whole[cut:])
        assert _goodput(grown)["steps"] == _goodput(grown, "--no-cache")["steps"] == report["steps"], k
