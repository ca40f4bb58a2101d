"""GPU truth offline: ``lens-rl goodput --json`` joins each GPU process's phases to its devices' scripted samples
(busy, idle seconds, the warnings, the GPU goodput), reads unsupported and broken devices as unavailable, and
reads a store without sample files exactly as before."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.rollup.schema import GoodputReport, mismatches
from tests.conftest import lens
from tests.gpu_stores import ALL, device, scripted_reading, util_at, write_samples, write_scripted_job
from tests.stores import span, write_process

#: one sample period at 2 Hz: the join's figures are exact to it
PERIOD = 0.5


def _goodput(run: Path, *args: str) -> dict[str, Any]:
    out = lens("goodput", str(run), "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _phase(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(row for row in report["gpu"]["phases"] if row["phase"] == name)


def _kinds(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [w for w in report["warnings"] if w["kind"] == kind]


def test_each_phase_reads_its_gpus_busy_and_idle_within_one_sample_period(tmp_path: Path) -> None:
    """A generation phase whose devices idle 40 % of it and a training phase at 90 % read so per (group, phase)
    within one sample period per span, the warnings name generation and the gap between generation and training,
    and the GPU goodput is busy productive GPU-seconds over the wall's."""
    report = _goodput(write_scripted_job(tmp_path / "r1"), "--no-cache")
    assert mismatches(report, GoodputReport, "report", most=20) == []
    gen, train = _phase(report, "generation"), _phase(report, "training")
    assert gen["count"] == 2 and gen["worker_group"] == "actor" and gen["bucket"] == "productive"
    assert abs(gen["gpu_idle_s"] - 2 * 4.0) <= 2 * PERIOD  # (two workers' 4 s each: summed, as total_s is)
    assert abs(gen["gpu_busy"] - 0.8 * 0.6) <= 0.8 * PERIOD / 10 * 2
    assert abs(train["gpu_busy"] - 0.9) <= 0.9 * PERIOD / 5 * 2 and train["gpu_idle_s"] <= 2 * PERIOD
    assert gen["mem_peak_bytes"] == pytest.approx(2e9, rel=1e-6)
    assert gen["sm_active"] is None and gen["tensor_active"] is None  # (no GPM: null, never 0)
    (idle,) = _kinds(report, "gpu_idle_in_productive")
    assert (idle["phase"], idle["worker_group"]) == ("generation", "actor") and abs(idle["share"] - 0.4) <= 0.05
    (gap,) = _kinds(report, "gpu_idle_gap")
    assert gap["between"] == ["generation", "training"] and abs(gap["longest_s"] - 3.0) <= PERIOD
    assert not _kinds(report, "gpu_unavailable")
    good = report["gpu"]["goodput"]
    expected = 2 * (0.8 * 6 + 0.9 * 5) / (2 * 20)  # (busy productive GPU-seconds over 2 GPUs x the 20 s wall)
    assert good["devices"] == 2 and good["gpu_s"] == pytest.approx(40.0)
    assert abs(good["goodput"] - expected) <= 2 * 2 * PERIOD * 0.9 / 40
    (step,) = report["gpu"]["steps"]
    assert step["step"] == 1 and abs(step["gpu_idle_s"] - 2 * (4 + 3)) <= 4 * PERIOD
    assert {(r["rank"], tuple(r["devices"])) for r in report["gpu"]["ranks"]} == {(0, ("GPU-0",)), (1, ("GPU-1",))}
    assert [d["uuid"] for d in report["gpu"]["devices"]] == ["GPU-0", "GPU-1"]


def test_the_table_shows_gpu_columns_only_where_there_are_samples(tmp_path: Path) -> None:
    """The goodput table gains the GPU block (GPU goodput, busy and idle per phase and rank, the warnings) with
    sample files; a store without them prints exactly as it did."""
    run = write_scripted_job(tmp_path / "r1")
    out = lens("goodput", str(run), "--no-cache")
    assert out.returncode == 0, out.stderr
    assert "GPU goodput" in out.stdout and "GPU by phase" in out.stdout and "actor rank 1 (GPU-1)" in out.stdout
    assert "every GPU of actor read idle between generation and training" in out.stdout
    assert "in productive phases over the wall's " in out.stdout, out.stdout  # (it read "the wall' 40.25")
    bare = write_scripted_job(tmp_path / "bare" / "r1", samples=False)
    plain = lens("goodput", str(bare), "--no-cache")
    assert plain.returncode == 0 and "GPU goodput" not in plain.stdout and "GPU by" not in plain.stdout
    assert "gpu" not in _goodput(bare, "--no-cache")


def test_a_store_without_sample_files_reads_as_before(tmp_path: Path) -> None:
    """Sample files add the ``gpu`` section, GPU warnings and their files and lines, and change nothing else of
    the report: the same store without them gives every other figure unchanged."""
    with_samples = _goodput(write_scripted_job(tmp_path / "a" / "r1"), "--no-cache")
    without = _goodput(write_scripted_job(tmp_path / "b" / "r1", samples=False), "--no-cache")
    assert "gpu" not in without and not any(w["kind"].startswith("gpu_") for w in without["warnings"])
    with_samples.pop("gpu")
    with_samples["warnings"] = [w for w in with_samples["warnings"] if not w["kind"].startswith("gpu_")]
    assert with_samples["files"] == without["files"] + 2
    assert with_samples["skipped_lines"] == without["skipped_lines"] == 0
    for key in ("files", "elapsed_s"):
        with_samples.pop(key, None)
        without.pop(key, None)
    assert with_samples == without


def _broken(t: float) -> list[Any]:
    u = util_at(t)
    return [
        [None, None, int(3e9), 200000, 1980, None, None, None],  # (no utilisation counter: NOT_SUPPORTED)
        [0, 0, int(5e9), 0, 0, 0, 0, 0],  # (0 on every counter while its memory is in use)
        [u, u, int(1e9), 200000, 1980, u / 2, u / 3, u / 4],  # (a Hopper, with GPM)
    ]


def test_unsupported_and_all_zero_devices_read_unavailable_never_zero(tmp_path: Path) -> None:
    """A device without a utilisation counter and one that reads 0 everywhere while its memory is in use read
    null (``unavailable`` in the table), never 0 %, and are named in ``gpu_unavailable``; a process whose
    devices are all unavailable gets null busy; GPM activity reads where the device has it."""
    run = tmp_path / "r1"
    write_process(run, "driver", 0, 1, [span("rl.job", 0, 20, "job")], root="job")
    for rank, uuid in enumerate(["GPU-n", "GPU-z", "GPU-h"]):
        write_process(
            run,
            "actor",
            rank,
            10 + rank,
            [span("generation", 1, 11, f"g{rank}", bucket="productive", step=1)],
            **{"rl.gpu.uuids": [uuid]},
        )
    devices = [
        device("GPU-n", 0, has=["mem_used", "power", "sm_clock"]),
        device("GPU-z", 1),
        device("GPU-h", 2, has=ALL),
    ]
    write_samples(run, "node0", 50, devices, _broken)
    report = _goodput(run, "--no-cache")
    ranks = {r["devices"][0]: r for r in report["gpu"]["ranks"]}
    assert ranks["GPU-n"]["gpu_busy"] is None and ranks["GPU-n"]["gpu_idle_s"] is None
    assert ranks["GPU-z"]["gpu_busy"] is None and ranks["GPU-z"]["sm_active"] is None
    assert ranks["GPU-n"]["mem_peak_bytes"] == pytest.approx(3e9, rel=1e-6)
    hopper = ranks["GPU-h"]
    assert abs(hopper["gpu_busy"] - 0.48) <= 0.05 and abs(hopper["sm_active"] - 0.24) <= 0.03
    assert abs(hopper["tensor_active"] - 0.12) <= 0.02
    flagged = {w["uuid"] for w in _kinds(report, "gpu_unavailable")}
    assert flagged == {"GPU-n", "GPU-z"}
    by_uuid = {d["uuid"]: d for d in report["gpu"]["devices"]}
    assert by_uuid["GPU-z"]["unavailable"] and not by_uuid["GPU-n"]["unavailable"]
    table = lens("goodput", str(run), "--no-cache").stdout
    assert "unavailable" in table and "GPU GPU-z on node0: flagged unavailable" in table


def test_a_process_naming_no_device_gets_no_gpu_figures(tmp_path: Path) -> None:
    """Only processes whose resource names ``rl.gpu.uuids`` are joined: the driver and a CPU worker get no GPU rows."""
    run = write_scripted_job(tmp_path / "r1")
    write_process(run, "reward", 0, 30, [span("reward", 2, 4, "rw", bucket="overhead", step=1)])
    report = _goodput(run, "--no-cache")
    assert {r["worker_group"] for r in report["gpu"]["ranks"]} == {"actor"}
    assert {r["worker_group"] for r in report["gpu"]["phases"]} == {"actor"}


def test_hostile_sample_files_are_skipped_and_counted(tmp_path: Path) -> None:
    """Garbage lines, a line past the cap, a wrong shape, implausible values, a FIFO and a file with no header
    named like a sample file: each skipped (lines counted, entries named once on stderr), never a crash or a
    hang, and the good samples still read."""
    run = write_scripted_job(tmp_path / "r1")
    good = run / "gpu-node0-100.jsonl"
    with good.open("a") as handle:
        handle.write("garbage\n{not json\n")
        handle.write('{"t": 1, "d": [[1,2,3,4,5,null,null,null]]}\n')  # (a time before 2000)
        handle.write('{"t": 1700000020000000000, "d": [[150,2,3,4,5,null,null,null]]}\n')  # (150 %)
        handle.write('{"t": 1700000020000000000, "d": [[1,2,3]]}\n')  # (another shape)
        handle.write('{"t": 1700000020500000000, "d": [null]}\n')  # (a device not read: fine, no reading)
        handle.write('{"t": 1700000021000000000, "d": [[' + "1," * (9 << 20) + "1]]}\n")  # (past the 16 MiB cap)
    (run / "gpu-nohead-1.jsonl").write_text('{"t": 1, "d": []}\n')
    os.mkfifo(run / "gpu-fifo-2.jsonl")
    out = lens("goodput", str(run), "--json", "--no-cache", timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["skipped_lines"] == 6
    assert "gpu-fifo-2.jsonl: a FIFO; skipped" in out.stderr
    assert any("gpu-nohead-1.jsonl" in note for note in report["notes"])
    assert abs(_phase(report, "generation")["gpu_idle_s"] - 8.0) <= 2 * PERIOD


def test_a_grown_sample_file_reads_through_the_cache_as_a_cold_read(tmp_path: Path) -> None:
    """A sample file that grew between two looks is read from where the last look stopped and the answer is the
    cold read's (--no-cache), the second look appending to the file's cache entry."""
    run = write_scripted_job(tmp_path / "r1")
    first = _goodput(run)
    entry = run / ".lens_rl-cache" / "gpu-gpu-node0-100.jsonl.samples"
    assert entry.is_file()
    size = entry.stat().st_size
    # the node's sampler writes on: 20-30 s, with a bad line among them
    path = run / "gpu-node0-100.jsonl"
    more = [json.dumps({"t": 1_700_000_000 * 10**9 + int(t * 1e9), "d": scripted_reading(t)}) for t in range(20, 30)]
    with path.open("a") as handle:
        handle.write("\n".join(more[:5]) + "\ngarbage\n" + "\n".join(more[5:]) + "\n")
    grown = _goodput(run)
    assert grown == _goodput(run, "--no-cache") and grown != first
    assert entry.stat().st_size > size
    assert grown["skipped_lines"] == 1
    assert _goodput(run) == grown  # (an unchanged store: the kept answer)


def test_a_sample_file_seen_with_its_header_only_is_read_once_its_samples_come(tmp_path: Path) -> None:
    """A look that meets a sample file holding its header only (the sampler had just opened it, as a job starts
    or a sampler takes over) does not freeze it: the next look through the cache reads its samples, as cold."""
    run = write_scripted_job(tmp_path / "r1")
    path = run / "gpu-node0-100.jsonl"
    whole = path.read_text()
    path.write_text(whole.splitlines()[0] + "\n")
    _goodput(run)
    path.write_text(whole)
    grown = _goodput(run)
    assert grown == _goodput(run, "--no-cache")
    assert [d["samples"] for d in grown["gpu"]["devices"] if d["uuid"] == "GPU-0"] == [40]


def test_a_gpu_whose_readings_stop_is_named_and_its_unread_time_is_not_counted_idle(tmp_path: Path) -> None:
    """When one node's samples stop half way (its sampler stopped, a GPU lost), the GPU goodput counts the
    unread productive time at the busy of the time read (never as idle: 0.45, not 0.35), and that GPU, not
    the other, gets a ``gpu_unavailable`` warning with the seconds it went unread."""
    run = write_scripted_job(tmp_path / "r", samples=False)

    def steady(_t: float) -> list[Any]:
        return [[60, 30, int(1e9), 150000, 1980, None, None, None]]

    write_samples(run, "node0", 100, [device("GPU-0")], steady, end_s=9.0)
    write_samples(run, "node1", 101, [device("GPU-1")], steady)
    report = _goodput(run, "--no-cache")
    good = report["gpu"]["goodput"]
    assert good["devices"] == 2 and good["goodput"] == pytest.approx(2 * 0.6 * 15 / 40, abs=0.02)
    (lost,) = _kinds(report, "gpu_unavailable")
    assert lost["uuid"] == "GPU-0" and lost["unread_s"] == pytest.approx(10.0, abs=2 * PERIOD), lost
    assert "no reading for" in lost["message"]
    assert _goodput(run) == report  # (through the cache, the same)
