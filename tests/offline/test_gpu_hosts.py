"""A process's GPUs are its own host's devices: a sample file of another host naming the same UUID (the stand-in
NVML's defaults on every node, cloned VMs) is another device, and never merges into this host's figures."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lens_rl.offline.rollup.gpu_hosts import device_keys, on_host
from tests.conftest import lens
from tests.gpu_stores import device, scripted_reading, write_samples
from tests.stores import span, write_process


def test_a_uuid_sampled_on_two_hosts_is_two_devices() -> None:
    """A UUID sampled on one host keeps its name; one sampled on two is named by host on each."""
    keys = device_keys([("n0", "GPU-0"), ("n1", "GPU-0"), ("n0", "GPU-1")])
    assert keys == {("n0", "GPU-0"): "GPU-0@n0", ("n1", "GPU-0"): "GPU-0@n1", ("n0", "GPU-1"): "GPU-1"}


def test_a_process_joins_its_own_hosts_device_of_each_uuid() -> None:
    """On n1 GPU-0 is n1's; GPU-1, sampled on n0 alone, is no device of n1's; GPU-9, sampled nowhere, stays as it
    is; a process with no host joins by UUID alone."""
    devices = {
        k: SimpleNamespace(uuid=u, host=h) for (h, u), k in device_keys([("n0", "GPU-0"), ("n1", "GPU-0")]).items()
    }
    devices["GPU-1"] = SimpleNamespace(uuid="GPU-1", host="n0")
    assert on_host(("GPU-0", "GPU-1", "GPU-9"), "n1", devices) == ("GPU-0@n1", "GPU-1@n1", "GPU-9")
    assert on_host(("GPU-0", "GPU-1"), "n0", devices) == ("GPU-0@n0", "GPU-1")
    assert on_host(("GPU-1", "GPU-0"), None, devices) == ("GPU-1", "GPU-0@n0")


def _job(run: Path, uuids: tuple[str, str]) -> Path:
    """The driver and two actors on node0 and node1 (generation 1-11 s, training 14-19 s), each naming the GPU
    ``uuids`` gives it, sampled on its node: node0's reads the scripted job's, node1's 90 % throughout."""
    steps = [span("rl.job", 0, 20, "job"), span("step", 0.5, 19.5, "s1", parent="job", step=1)]
    write_process(run, "driver", 0, 1, steps, root="job")
    for rank, uuid in enumerate(uuids):
        phases = [
            span("generation", 1, 11, f"g{rank}", parent="s1", remote=True, bucket="productive", step=1),
            span("training", 14, 19, f"t{rank}", parent="s1", remote=True, bucket="productive", step=1),
        ]
        write_process(run, "actor", rank, 10 + rank, phases, **{"rl.gpu.uuids": [uuid], "host.name": f"node{rank}"})
    write_samples(run, "node0", 100, [device(uuids[0])], scripted_reading)
    write_samples(run, "node1", 101, [device(uuids[1])], lambda t: [[90, 45, int(1e9), 150000, 1980, None, None, None]])
    return run


def _gpu(run: Path, *args: str) -> dict[str, Any]:
    out = lens("goodput", str(run), "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["gpu"]  # type: ignore[no-any-return]


def test_another_hosts_file_of_the_same_uuid_leaves_each_hosts_figures_its_own(tmp_path: Path) -> None:
    """Two nodes whose GPUs both say GPU-0 read as two GPUs named apart (GPU-0@node0, GPU-0@node1): phases, steps,
    ranks' busy and GPU goodput as if their UUIDs differed, each device row its own host's 40 samples; the same
    through the refresh cache (a second look too) as with --no-cache."""
    apart = _gpu(_job(tmp_path / "apart", ("GPU-0", "GPU-1")))
    run = _job(tmp_path / "same", ("GPU-0", "GPU-0"))
    same = _gpu(run, "--no-cache")
    assert [(d["uuid"], d["host"], d["samples"], d["files"]) for d in same["devices"]] == [
        ("GPU-0", "node0", 40, ["gpu-node0-100.jsonl"]),
        ("GPU-0", "node1", 40, ["gpu-node1-101.jsonl"]),
    ]
    assert [d["gpu_busy"] for d in same["devices"]] == [d["gpu_busy"] for d in apart["devices"]]
    assert same["phases"] == apart["phases"] and same["steps"] == apart["steps"]
    assert [r["gpu_busy"] for r in same["ranks"]] == [r["gpu_busy"] for r in apart["ranks"]]
    assert [r["devices"] for r in same["ranks"]] == [["GPU-0@node0"], ["GPU-0@node1"]]
    assert same["goodput"] == apart["goodput"]
    for _ in range(2):
        assert _gpu(run) == same
