"""The job's GPU goodput stays within 0..1: a device without a utilisation reading adds no GPU-seconds above or
below the line, and a device shared by processes (a trainer and an engine on one GPU) or used past the job's
wall counts at most its wall; through the refresh cache as with ``--no-cache``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.rollup.schema import GoodputReport, mismatches
from tests.conftest import lens
from tests.gpu_stores import device, write_samples
from tests.stores import span, write_process

#: the devices of the 3-GPU process: no utilisation counter, 0 on every counter (flagged unavailable), 80 %
_NSUP, _ZERO, _OK = "GPU-nsup", "GPU-zero", "GPU-ok"


def _looks(run: Path) -> dict[str, Any]:
    """The ``gpu`` section of a cold look (``--no-cache``), checked the same through the cache (twice: the look
    that fills it and the one that reads it)."""
    reports = []
    for args in (["--no-cache"], [], []):
        out = lens("goodput", str(run), "--json", *args)
        assert out.returncode == 0, out.stderr
        reports.append(json.loads(out.stdout))
    assert mismatches(reports[0], GoodputReport, "report", most=20) == []
    assert reports[1]["gpu"] == reports[0]["gpu"] == reports[2]["gpu"]
    return dict(reports[0]["gpu"])


def _reading(t: float) -> list[Any]:
    return [
        [None, None, int(1e9), None, 1980, None, None, None],  # (no utilisation counter: NOT_SUPPORTED)
        [0, 0, int(10e9), 0, 0, None, None, None],  # (0 on every counter while its memory is in use)
        [80, 40, int(1e9), 200000, 1980, None, None, None],
    ]


@pytest.mark.parametrize("uuids", [[_NSUP, _ZERO, _OK], [_NSUP, _OK], [_OK]], ids=["3", "2", "1"])
def test_devices_without_a_reading_add_no_gpu_seconds_to_the_goodput(tmp_path: Path, uuids: list[str]) -> None:
    """A process on 3 GPUs of which one reads 80 % (one without a utilisation counter, one reading 0 everywhere)
    has the GPU goodput of that GPU alone: 80 % x 18 productive s of the 20 s wall, 0.72, never 2.16."""
    run = tmp_path / "r1"
    write_process(run, "driver", 0, 1, [span("rl.job", 0, 20, "job")], root="job")
    spans = [
        span("generation", 1, 11, "g", bucket="productive", step=1),
        span("training", 11, 19, "t", bucket="productive", step=1),
    ]
    write_process(run, "actor", 0, 10, spans, **{"rl.gpu.uuids": uuids})
    devices = [device(_NSUP, 0, has=["mem_used", "sm_clock"]), device(_ZERO, 1), device(_OK, 2)]
    write_samples(run, "node0", 50, devices, _reading)
    good = _looks(run)["goodput"]
    assert good["devices"] == 1 and good["gpu_s"] == pytest.approx(20.0)
    assert good["goodput"] == pytest.approx(0.8 * 18 / 20, abs=0.01)


def test_a_gpu_shared_by_two_processes_counts_its_wall_once(tmp_path: Path) -> None:
    """A trainer (the driver, training 1-9 s) and an engine worker (generation 0-14 s, past the job's 10 s
    wall) on one GPU reading 100 %: the GPU goodput is 1.0 (the GPU busy and productive all the wall), never
    their sum 2.2."""
    run = tmp_path / "r1"
    on_gpu = {"rl.gpu.uuids": ["GPU-a"], "host.name": "node0"}
    driver = [span("rl.job", 0, 10, "job"), span("training", 1, 9, "t", parent="job", bucket="productive", step=1)]
    write_process(run, "driver", 0, 1, driver, root="job", **on_gpu)
    write_process(run, "gen", 0, 10, [span("generation", 0, 14, "g", bucket="productive", step=1)], **on_gpu)

    def busy(_t: float) -> list[Any]:
        return [[100, 50, int(1e9), 300000, 1980, None, None, None]]

    write_samples(run, "node0", 50, [device("GPU-a")], busy, end_s=15.0)
    gpu = _looks(run)
    good = gpu["goodput"]
    assert good["devices"] == 1 and 0 < good["gpu_s"] <= 15.0
    assert good["goodput"] == pytest.approx(1.0, abs=0.01) and good["busy_productive_s"] <= good["gpu_s"]
    assert {r["worker_group"]: r["gpu_busy"] for r in gpu["ranks"]} == {"driver": 1.0, "gen": 1.0}


@pytest.mark.parametrize("engines", [1, 2])
def test_time_two_processes_are_productive_at_once_on_one_gpu_counts_once(tmp_path: Path, engines: int) -> None:
    """On a 20 s wall, a trainer (training 2-8 s) and one or two engine workers (generation 5-12 s each) on one
    GPU reading 100 %: the GPU worked productively 2-12 s, 10 GPU-seconds, so the GPU goodput is 0.5, not the
    processes' busy added (13 or 20 s: 0.65, 1.0); through the refresh cache the same."""
    run = tmp_path / "r1"
    on_gpu = {"rl.gpu.uuids": ["GPU-a"], "host.name": "node0"}
    driver = [span("rl.job", 0, 20, "job"), span("training", 2, 8, "t", parent="job", bucket="productive", step=1)]
    write_process(run, "driver", 0, 1, driver, root="job", **on_gpu)
    for rank in range(engines):
        gen = [span("generation", 5, 12, f"g{rank}", bucket="productive", step=1)]
        write_process(run, "gen", rank, 10 + rank, gen, **on_gpu)

    def busy(_t: float) -> list[Any]:
        return [[100, 50, int(1e9), 300000, 1980, None, None, None]]

    write_samples(run, "node0", 50, [device("GPU-a")], busy, end_s=20.0)
    good = _looks(run)["goodput"]
    assert good["devices"] == 1 and good["gpu_s"] == pytest.approx(20.0)
    assert good["busy_productive_s"] == pytest.approx(10.0, abs=0.1)
    assert good["goodput"] == pytest.approx(0.5, abs=0.01)
