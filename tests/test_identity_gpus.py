"""Which GPUs a process uses: ``rl.gpu.uuids`` from CUDA_VISIBLE_DEVICES (indices, UUIDs, MIG ids) through NVML."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lens_rl.identity.device import gpu_uuids
from lens_rl.testing import nvml
from tests.conftest import run_python

WORKER = """
import json, lens_rl
handle = lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="actor")
attrs = dict(handle.resource.attributes)
print(json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items() if "gpu" in k or "device" in k}))
"""


def worker_attrs(tmp_path: Path, visible: str | None, standin: bool = True) -> dict[str, object]:
    sc = nvml.write_scenario(
        tmp_path / "gpus.json",
        [{"uuid": "GPU-zero", "name": "NVIDIA A100"}, {"uuid": "GPU-one", "name": "NVIDIA H100", "mig": ["MIG-one-a"]}],
    )
    env = {
        "LENS_RL_OTEL_ENABLED": "true",
        "LENS_RL_OTEL_EXPORTER": "none",
        "LENS_RL_OTEL_GPU_SAMPLE_HZ": "0",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    if standin:
        env = nvml.env(sc, base=env)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    out = run_python(WORKER, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_indices_uuids_and_mig_ids_resolve_to_gpu_uuids(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES as indices, UUIDs or MIG ids gives the GPUs' UUIDs, their count and NVML's name."""
    assert worker_attrs(tmp_path, "1,0") == {
        "rl.num_gpus": 2,
        "rl.gpu_ids": "1,0",
        "rl.gpu.uuids": ["GPU-one", "GPU-zero"],
        "rl.device.name": "NVIDIA H100",
    }
    attrs = worker_attrs(tmp_path, "MIG-one-a")
    assert attrs["rl.gpu.uuids"] == ["GPU-one"] and attrs["rl.num_gpus"] == 1
    assert worker_attrs(tmp_path, "GPU-zero")["rl.gpu.uuids"] == ["GPU-zero"]


def test_cuda_visible_devices_is_read_as_cuda_reads_it(tmp_path: Path) -> None:
    """A unique UUID prefix names its GPU; CUDA 11's ``MIG-GPU-<uuid>/<gi>/<ci>`` its GPU; the list ends at the
    first entry that names no device (garbage, a negative index, an index past the count, an ambiguous prefix),
    and ``rl.num_gpus`` counts the GPUs named before it, as CUDA would see them."""
    assert worker_attrs(tmp_path, "GPU-o")["rl.gpu.uuids"] == ["GPU-one"]
    assert worker_attrs(tmp_path, "MIG-GPU-one/1/0")["rl.gpu.uuids"] == ["GPU-one"]
    for visible, uuids in (("0,garbage,1", ["GPU-zero"]), ("1,-1,0", ["GPU-one"]), ("1,7,0", ["GPU-one"])):
        attrs = worker_attrs(tmp_path, visible)
        assert attrs["rl.gpu.uuids"] == uuids and attrs["rl.num_gpus"] == 1, (visible, attrs)
    for visible in ("7", "GPU-", "GPU-nine", "-1,0"):
        attrs = worker_attrs(tmp_path, visible)
        assert "rl.gpu.uuids" not in attrs and attrs["rl.num_gpus"] == 0, (visible, attrs)


def test_a_device_named_twice_hides_every_device(tmp_path: Path) -> None:
    """CUDA (and torch's device count) sees no GPU when CUDA_VISIBLE_DEVICES names one twice: no UUIDs, zero
    GPUs, never the same GPU counted twice."""
    for visible in ("0,0", "1,01", "0,1,0", "GPU-zero,GPU-zero"):
        attrs = worker_attrs(tmp_path, visible)
        assert "rl.gpu.uuids" not in attrs and attrs["rl.num_gpus"] == 0, (visible, attrs)


def test_no_gpus_named_means_none(tmp_path: Path) -> None:
    """No CUDA_VISIBLE_DEVICES (and no Ray), or an empty one: no UUIDs, zero GPUs."""
    assert worker_attrs(tmp_path, None) == {"rl.num_gpus": 0}
    assert worker_attrs(tmp_path, "") == {"rl.num_gpus": 0}


def test_without_nvml_uuids_given_as_such_are_kept(tmp_path: Path) -> None:
    """Without pynvml, UUIDs named in CUDA_VISIBLE_DEVICES are kept; indices alone cannot be resolved."""
    attrs = worker_attrs(tmp_path, "GPU-x,GPU-y", standin=False)
    assert attrs["rl.gpu.uuids"] == ["GPU-x", "GPU-y"] and attrs["rl.num_gpus"] == 2
    assert "rl.gpu.uuids" not in worker_attrs(tmp_path, "0,1", standin=False)


def test_an_unknown_id_is_not_guessed() -> None:
    """An index NVML does not know (or no NVML at all) resolves to nothing rather than a guess."""
    assert gpu_uuids("7") == (None, None)
    assert gpu_uuids("") == (None, None)
