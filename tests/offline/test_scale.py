"""Scale: a synthesized 50k-span store read serially, in parallel and on Ray gives identical results;
Perfetto windows; the native protobuf parses with Perfetto's own definitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import lens
from tests.stores import scale_module, synthesized_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GRPO-shaped store of ~50,000 spans in 20 process files (one driver), and a file of another shape (v1)."""
    return synthesized_store(tmp_path_factory.mktemp("scale"))


def _report(store: Path, *args: str) -> dict[str, Any]:
    out = lens("goodput", str(store), "--json", *args)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_parallel_reads_give_identical_results(store: Path) -> None:
    """--jobs 1 and --jobs 3 give the same JSON, byte for byte; a file of another shape is skipped, named."""
    serial = _report(store, "--jobs", "1")
    assert serial == _report(store, "--jobs", "3")
    assert serial["spans"] > 49_000 and serial["files"] == 21
    assert not any(r["worker_group"] == "legacy" for r in serial["ranks"])
    assert any("spans-legacy-0-9.jsonl: not a lens_rl store file" in note for note in serial["notes"])
    assert any(p["worker_group"] == "lm_policy" and p["rank"] == 2 for p in serial["stragglers"]["persistent"])


@pytest.mark.slow
def test_ray_reads_give_identical_results(store: Path) -> None:
    """--ray (a local cluster) gives the same goodput JSON, and the same Perfetto protobuf, as a serial read."""
    pytest.importorskip("ray")
    assert _report(store, "--ray") == _report(store, "--jobs", "1")
    outputs = []
    for args in (["--ray"], ["--jobs", "1"]):
        out = store / f"ray{len(args)}.pftrace"
        res = lens("perfetto", str(store), "-o", str(out), *args)
        assert res.returncode == 0, res.stderr[-2000:]
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and len(outputs[0]) > 1_000_000


def test_steps_cut_the_goodput_window(store: Path) -> None:
    """--steps A-B selects the step rows and the figures computed over steps."""
    window = _report(store, "--steps", "5-9")
    assert [s["step"] for s in window["steps"]] == list(range(5, 10))
    assert window["step_time"]["max_s"] is not None


def test_a_job_of_three_attempts_refreshed_reads_as_a_cold_read(tmp_path: Path) -> None:
    """A resumed job of three attempts (the driver's later headers in its one file, new worker files per
    attempt, each resuming 5 steps back) reads as 3 attempts and 2 restarts; after its last attempt's files
    grew, a look through the refresh cache gives the very report a --no-cache read does."""
    scale = scale_module()
    scale.synthesize_attempts(tmp_path, 20_000, 6)
    run = tmp_path / "run"
    first = _report(run)
    assert [a["attempt"] for a in first["attempts"]] == [0, 1, 2] and first["job"]["restarts"] == 2
    rerun = first["attempts"][0]["rerun_steps"]
    assert len(rerun) == 5 and first["attempts"][1]["resumed_from_step"] == rerun[0]
    scale.append_attempt_steps(tmp_path, 20_000, 6, 10)
    warm = _report(run)
    assert warm["attempts"][2]["last_step"] == first["attempts"][2]["last_step"] + 10
    assert warm == _report(run, "--no-cache")


def test_a_store_of_so_many_steps_in_two_worker_groups_refreshes_as_a_cold_read(tmp_path: Path) -> None:
    """The benchmark's second store (--steps, --groups: a driver and two worker groups, several spans under
    each worker's phase) has the steps and groups asked for, and after it grew a look through the refresh cache
    gives the very report a --no-cache read does."""
    scale = scale_module()
    shape = scale.shape_for(30 * 26, 5, 30, groups=2)
    assert (shape.groups, shape.children) == (2, 4)
    scale.synthesize(tmp_path, scale.per_step(5, shape) * 30, 5, shape=shape)
    run = tmp_path / "run"
    first = _report(run)
    assert first["spans"] == 30 * 26 and len(first["steps"]) == 30
    assert {r["worker_group"] for r in first["ranks"]} >= {"lm_policy", "rollout"}
    scale.append_steps(tmp_path, 5, 30, 3, seed=1, shape=shape)
    warm = _report(run)
    assert len(warm["steps"]) == 33 and warm == _report(run, "--no-cache")
    with pytest.raises(ValueError):
        scale.shape_for(1000, 5, 30, groups=3)
